#include "mpitron/parallel/data_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mpitron/core/error.hpp"
#include "mpitron/core/trace.hpp"
#include "mpitron/model/tensor_parallel/tp_grad_norm.hpp"

namespace mpitron {

using Ev = ModelChunk::UnitEvent;

DataParallel::DataParallel(ModelChunk& model, Comm& dp, FlatOps& ops, const DataParallelOptions& opt)
    : model_(model), dp_(dp), ops_(ops), opt_(opt), progress_(opt.progress) {
  usage_check(opt.zero >= 0 && opt.zero <= 3, "parallel.zero must be 0, 1, 2 or 3 (got {})", opt.zero);
  usage_check(opt.bucket_mb >= 0, "parallel.bucket_mb must be >= 0 (0: automatic; got {})", opt.bucket_mb);
  const ModelShard& ms = model.shard();
  n_layers_ = local_layers(model.config(), ms);
  n_ = model.num_params();
  region_ = param_set_range(model.params(), n_, opt.params);
  check(region_.size() > 0, "DataParallel: no parameters in this set");
  shard_ = opt.zero == 0 ? region_ : zero_shard(region_, dp.size(), dp.rank());
  bucket_floats_ = grad_bucket_floats(opt.bucket_mb, region_.size());
  check(!opt.tied_copy || opt.tied_group, "DataParallel: tied_copy without a tied_group");
  buckets_ = plan_grad_buckets(model.params(), n_, bucket_floats_, ms, n_layers_, opt.tied_group != nullptr, opt.params);
  bucket_bufs_.resize(buckets_.size());
  bucket_ops_.assign(buckets_.size(), 0);
  bucket_in_flight_.assign(buckets_.size(), false);

  for (const auto& p : model.params()) {  // the table as seen from the shard
    size_t lo = std::max(shard_.begin, p.offset), hi = std::min(shard_.end, p.offset + p.numel);
    if (lo >= hi) continue;
    ParamInfo q = p;
    q.offset = lo - shard_.begin;
    q.numel = hi - lo;
    shard_table_.push_back(std::move(q));
  }
  if (opt.zero >= 2) {
    grad_shard_ = Buffer<float>(Mem::grads, shard_.size(), ops.allocator());
    model.release_grad_buffer();
  }
  if (opt.zero == 3) {
    zero3_ = std::make_unique<ShardedParams>(model, dp, ops, progress_, opt.params);
    // The dense set is built first and leaves the buffer to the experts' shard (StageModel).
    if (opt.params != ParamSet::dense) model.release_param_buffer();
  }
  // ZeRO-1/2 on the CPU: the parameter all-gather per unit, overlapped with the next forward.
  if ((opt.zero == 1 || opt.zero == 2) && dp.size() > 1 && !ops.allocator())
    param_gather_ = std::make_unique<ParamAllGather>(model, dp, progress_, opt.params);
  optim_ = std::make_unique<AdamW>(opt.adamw, ops, shard_table_, 0, shard_.size());
  if (opt.reproducible) fixed_ = std::make_unique<FixedPointGrads>(region_.size());
  if (opt.params == ParamSet::all) model.set_unit_hook([this](Ev ev, int unit) { on_event(ev, unit); });
}

DataParallel::~DataParallel() {
  if (opt_.params == ParamSet::all) model_.set_unit_hook({});
}

std::string DataParallel::describe() const {
  size_t biggest = 0;
  for (const auto& b : buckets_) biggest = std::max(biggest, b.end - b.begin);
  std::string s = fmt::format(
      "data parallel: {} {} zero {} | {} gradient bucket(s) (cap {:.3g} MiB{}, largest {:.2f} MiB) | progress {} | "
      "flat params {} floats, this rank's shard [{}, {})",
      opt_.params == ParamSet::experts ? "routed experts over expert_dp"
      : opt_.params == ParamSet::dense ? "the other parameters over dp x cp"
                                       : "dp",
      dp_.size(), opt_.zero, buckets_.size(), bucket_floats_ * 4.0 / (1 << 20),
      opt_.bucket_mb > 0 ? "" : ": auto, a quarter of the model up to 25", biggest * 4.0 / (1 << 20),
      progress_mode_name(opt_.progress), region_.size(), shard_.begin, shard_.end);
  if (zero3_) s += fmt::format(" | largest gathered unit {} floats", zero3_->largest_unit_floats());
  if (fixed_)
    s += fmt::format(" | reproducible: fixed-point gradient sums, {:.2f} MiB of host memory, reduced at the step's end{}",
                     fixed_->size() * (ops_.allocator() ? 21.0 : 17.0) / (1 << 20),
                     ops_.allocator() ? " (gradients copied to the host per bucket and micro-batch)" : "");
  if (param_gather_)
    s += fmt::format(" | parameters all-gathered in {} units, each awaited at its next forward", param_gather_->units());
  else if ((opt_.zero == 1 || opt_.zero == 2) && dp_.size() > 1)
    s += " | parameters all-gathered after the step (blocking)";
  return s;
}

float* DataParallel::grad_shard() {
  return opt_.zero >= 2 ? grad_shard_.data() : model_.grad_data() + shard_.begin;
}

float* DataParallel::param_shard() { return zero3_ ? zero3_->shard() : model_.param_data() + shard_.begin; }

void DataParallel::begin_step(int micro_batches) {
  micro_batches_ = micro_batches;
  backwards_done_ = 0;
  grad_scale_ = 1.f;
  progress_.take_timing();  // drop what ran between steps (ZeRO-3 gathers of an evaluation)
  if (opt_.zero >= 2) {
    ops_.zero(grad_shard_.data(), grad_shard_.size());
  } else {
    model_.zero_grad();
  }
  if (fixed_) fixed_->clear();
}

// The timeline (trace.hpp): a unit's forward or backward from its pre_ to its post_ event.
void DataParallel::trace_unit(Ev ev, int unit) {
  const bool pre = ev == Ev::pre_forward || ev == Ev::pre_backward;
  const int phase = ev == Ev::pre_forward || ev == Ev::post_forward ? 0 : 1;
  auto& open = trace_open_[phase];
  if (pre) {
    open[unit] = trace::Clock::now();
    return;
  }
  auto it = open.find(unit);
  if (it == open.end()) return;  // tracing was switched on inside the unit
  // The embedding's forward ends with the chunk's (its post_forward is the last event of a forward).
  const std::string what = unit == ModelChunk::kEmbeddingUnit ? (phase == 0 ? "(the whole chunk)" : "embedding")
                           : unit == ModelChunk::kHeadUnit     ? "head"
                                                               : fmt::format("block {}", model_.shard().layer_begin + unit);
  trace::event(fmt::format("{} {}", phase == 0 ? "forward" : "backward", what), trace::compute, it->second,
               trace::Clock::now());
  open.erase(it);
}

void DataParallel::on_event(Ev ev, int unit) {
  if (trace::enabled() && opt_.params != ParamSet::experts) trace_unit(ev, unit);  // once per chunk
  progress_.poll();
  if (param_gather_ && ev == Ev::pre_forward) param_gather_->wait_unit(unit);
  if (zero3_) zero3_->on_event(ev, unit);
  if (ev != Ev::pre_backward && ev != Ev::post_backward) return;
  int pos = backward_position(unit, n_layers_);
  const bool last_backward = backwards_done_ + 1 == micro_batches_;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (ev == Ev::pre_backward && opt_.zero >= 2 && buckets_[b].alloc_at == pos) alloc_bucket(b);
    if (ev == Ev::post_backward && buckets_[b].ready_at == pos && !buckets_[b].deferred) {
      if (fixed_) add_to_fixed_point(b);
      else launch_bucket(b, last_backward);
    }
  }
  if (fixed_ && ev == Ev::post_backward && unit == ModelChunk::kEmbeddingUnit)  // both wte copies are done
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (buckets_[b].deferred) add_to_fixed_point(b);
  if (ev == Ev::post_backward && unit == ModelChunk::kEmbeddingUnit) ++backwards_done_;  // the last event of a backward
}

// ZeRO-2/3: the bucket's gradients get memory of their own (zeroed) until its reduce-scatter is
// done; the model's gradient pointers of its parameters point into it.
void DataParallel::alloc_bucket(size_t b) {
  const GradBucket& bk = buckets_[b];
  if (bk.deferred && bucket_bufs_[b].size()) return;  // accumulating since the step's first backward
  if (bucket_in_flight_[b]) progress_.wait(bucket_ops_[b]);  // the previous micro-batch's
  bucket_bufs_[b] = Buffer<float>(Mem::grads, bk.end - bk.begin, ops_.allocator());
  for (size_t i : bk.params) model_.bind_grad(i, bucket_bufs_[b].data() + (model_.params()[i].offset - bk.begin));
}

void DataParallel::launch_bucket(size_t b, bool last_backward) {
  const GradBucket& bk = buckets_[b];
  const size_t len = bk.end - bk.begin;
  const size_t lo = std::max(bk.begin, shard_.begin);  // my part of the bucket starts here
  // ZeRO 0/1 accumulate locally until the step's last backward; ZeRO 2/3 reduce every time.
  const bool communicate = dp_.size() > 1 && (last_backward || opt_.zero >= 2);
  if (!communicate) {
    if (opt_.zero >= 2) {  // one rank: the "reduction" is adding the bucket into the shard
      size_t hi = std::min(bk.end, shard_.end);
      if (hi > lo) ops_.axpy(grad_shard_.data() + (lo - shard_.begin), 1.f, bucket_bufs_[b].data() + (lo - bk.begin), hi - lo);
      bucket_bufs_[b].reset();
    }
    return;
  }
  if (opt_.zero == 0) {
    bucket_ops_[b] = progress_.add(dp_.iall_reduce(model_.grad_data() + bk.begin, len, DType::f32, ReduceOp::sum));
    bucket_in_flight_[b] = true;
    return;
  }
  std::vector<size_t> counts = shard_counts(region_, bk.begin, bk.end, dp_.size());
  const size_t mine = counts[dp_.rank()];
  auto tmp = std::make_shared<Buffer<float>>(Mem::comm, mine, ops_.allocator(), Fill::none);  // the reduce-scatter writes it
  const float* send = opt_.zero == 1 ? model_.grad_data() + bk.begin : bucket_bufs_[b].data();
  Request r = dp_.ireduce_scatterv(send, tmp->data(), counts.data(), DType::f32, ReduceOp::sum);
  std::function<void()> done;
  if (opt_.zero == 1) {
    done = [this, tmp, lo, mine] {
      ops_.copy(model_.grad_data() + lo, tmp->data(), mine);
      tmp->reset();
    };
  } else {  // accumulate over micro-batches, then the bucket's memory goes back
    done = [this, tmp, lo, mine, b] {
      if (mine) ops_.axpy(grad_shard_.data() + (lo - shard_.begin), 1.f, tmp->data(), mine);
      tmp->reset();
      bucket_bufs_[b].reset();
      bucket_in_flight_[b] = false;
    };
  }
  bucket_ops_[b] = progress_.add(std::move(r), std::move(done));
  bucket_in_flight_[b] = true;
}

// The bucket's gradients of this micro-batch (the model adds into zeroed memory) move into the
// fixed-point sums; the memory is zeroed (ZeRO 0/1) or given back (ZeRO 2/3) for the next one.
void DataParallel::add_to_fixed_point(size_t b) {
  const GradBucket& bk = buckets_[b];
  const size_t len = bk.end - bk.begin;
  if (opt_.zero >= 2) {
    if (!bucket_bufs_[b].size()) return;  // no backward reached it this micro-batch
    fixed_->add(on_host(bucket_bufs_[b].data(), len), bk.begin - region_.begin, len);
    bucket_bufs_[b].reset();
    return;
  }
  float* g = model_.grad_data() + bk.begin;
  fixed_->add(on_host(g, len), bk.begin - region_.begin, len);
  ops_.zero(g, len);
}

const float* DataParallel::on_host(const float* g, size_t n) {
  if (!ops_.allocator()) return g;
  if (host_stage_.size() < n) host_stage_.resize(n);
  ops_.to_host(host_stage_.data(), g, n);
  return host_stage_.data();
}

void DataParallel::store_from_host(float* dst, size_t n, const std::function<void(float*)>& fill) {
  if (!ops_.allocator()) return fill(dst);
  if (host_stage_.size() < n) host_stage_.resize(n);
  fill(host_stage_.data());
  ops_.from_host(dst, host_stage_.data(), n);
}

// Summed over the tie first, then over dp, both in integers: the result does not depend on which
// rank ran which micro-batch (data_parallel.hpp: the tie before dp, as in the float path).
void DataParallel::reduce_fixed_point() {
  for (const GradBucket& bk : buckets_)
    if (bk.deferred) fixed_->all_reduce(*opt_.tied_group, bk.begin - region_.begin, bk.end - bk.begin);
  if (opt_.zero == 0) {
    fixed_->all_reduce(dp_, 0, region_.size());
    store_from_host(model_.grad_data() + region_.begin, region_.size(),
                    [&](float* out) { fixed_->to_float(0, region_.size(), out); });
    return;
  }
  std::vector<size_t> counts = shard_counts(region_, region_.begin, region_.end, dp_.size());
  store_from_host(grad_shard(), counts[static_cast<size_t>(dp_.rank())],
                  [&](float* out) { fixed_->reduce_scatter_to(dp_, 0, counts.data(), out); });
}

void DataParallel::finish_backward() {
  progress_.wait_all();
  if (fixed_) {
    progress_.blocking([&] { reduce_fixed_point(); });
    return;
  }
  reduce_deferred_buckets();
  std::fill(bucket_in_flight_.begin(), bucket_in_flight_.end(), false);
}

// The tied wte bucket: sum the two stages' local gradients over the embedding group (both ends
// then hold the same full gradient), then reduce it over DP as the step's last backward would.
// Blocking, after every other bucket is done: the two stages reach here at different times, and
// an embedding-group collective inside backward would wait on a stage that is still waiting for
// this one's activation gradients.
void DataParallel::reduce_deferred_buckets() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const GradBucket& bk = buckets_[b];
    if (!bk.deferred) continue;
    float* g = opt_.zero >= 2 ? bucket_bufs_[b].data() : model_.grad_data() + bk.begin;
    check(g != nullptr, "DataParallel: the tied wte bucket has no gradients this step");
    progress_.blocking([&] { opt_.tied_group->all_reduce(g, bk.end - bk.begin, DType::f32, ReduceOp::sum); });
    launch_bucket(b, /*last_backward=*/true);
  }
  progress_.wait_all();
}

double DataParallel::grad_sum_squares(int tp_rank) {
  double local = shard_.size() ? tp_local_grad_sum_squares(model_.params(), grad_shard(), shard_.begin, shard_.end,
                                                           ops_, tp_rank)
                               : 0.0;
  if (opt_.tied_copy) {  // wte is TP-sharded, so every TP rank counted its part of it above
    const auto [at, len] = tied_wte_in_shard();
    if (len) local -= ops_.sum_squares(grad_shard() + at, len);
  }
  if (opt_.params == ParamSet::experts) {  // this rank's experts; the other ranks of ep hold the others
    double total = local;
    progress_.blocking([&] {
      if (opt_.zero > 0 && dp_.size() > 1) total = dp_.all_reduce_scalar(total, ReduceOp::sum);
      if (opt_.ep && opt_.ep->size() > 1) total = opt_.ep->all_reduce_scalar(total, ReduceOp::sum);
    });
    return total;
  }
  if (opt_.zero == 0 || dp_.size() == 1) return local;  // every rank holds the same full gradient
  double total = 0;
  progress_.blocking([&] { total = dp_.all_reduce_scalar(local, ReduceOp::sum); });
  return total;
}

std::pair<size_t, size_t> DataParallel::tied_wte_in_shard() const {
  const ParamInfo* p = model_.find_token_embedding();
  const size_t lo = std::max(shard_.begin, p->offset), hi = std::min(shard_.end, p->offset + p->numel);
  return hi > lo ? std::pair<size_t, size_t>{lo - shard_.begin, hi - lo} : std::pair<size_t, size_t>{0, 0};
}

void DataParallel::grad_sum_squares_exact(int tp_rank, ExactSum& into) {
  check(fixed_ != nullptr, "DataParallel::grad_sum_squares_exact: for train.reproducible");
  ExactSum local;
  const float* g = on_host(grad_shard(), shard_.size());
  for (const auto& [at, len] : tp_local_grad_ranges(model_.params(), shard_.begin, shard_.end, tp_rank))
    local.add_squares(g + at, len);
  if (opt_.tied_copy) {  // the first stage counts wte (exactly cancelled here)
    const auto [at, len] = tied_wte_in_shard();
    if (len) local.add_squares(g + at, len, -1.0);
  }
  progress_.blocking([&] {
    if (opt_.zero > 0) local.all_reduce(dp_);  // each rank holds a shard
    if (opt_.params == ParamSet::experts && opt_.ep) local.all_reduce(*opt_.ep);
  });
  into.merge(local);
}

void DataParallel::scale_grads(float s) { grad_scale_ *= s; }

void DataParallel::optimizer_step(double lr) {
  sync_params();  // (the forward waited for every unit already)
  const bool in_place = !zero3_ && !param_gather_ && (opt_.zero == 0 || dp_.size() == 1);  // nothing gathered after
  bf16* bf = in_place ? model_.param_bf16_data() : nullptr;
  optim_->step(param_shard(), bf ? bf + shard_.begin : nullptr, grad_shard(), grad_scale_, lr);
  grad_scale_ = 1.f;
  if (param_gather_) {
    param_gather_->launch();
  } else if ((opt_.zero == 1 || opt_.zero == 2) && dp_.size() > 1) {
    // Everyone's updated shard, in place (this rank's part is already where it belongs).
    std::vector<size_t> counts = shard_counts(region_, region_.begin, region_.end, dp_.size());
    float* p = model_.param_data();
    progress_.blocking([&] { dp_.all_gatherv(p + shard_.begin, p + region_.begin, counts.data(), DType::f32); });
  }
  if (!zero3_ && !bf) model_.params_changed();  // ZeRO-3 units are gathered (and converted) when used
}

void DataParallel::sync_params() {
  if (param_gather_) param_gather_->wait_all();
}

void DataParallel::gather_params_into(float* out) {
  check(zero3_ && !ops_.allocator(), "DataParallel::gather_params_into: for ZeRO-3 on the host");
  zero3_->gather_full(out);
}

const float* DataParallel::full_params(Buffer<float>& scratch) {
  check(opt_.params == ParamSet::all, "DataParallel::full_params: one parameter set of two (StageModel::full_params)");
  sync_params();
  if (!zero3_ && !ops_.allocator()) return model_.param_data();
  scratch = Buffer<float>(Mem::workspace, n_);
  if (!ops_.allocator()) {
    zero3_->gather_full(scratch.data());
    return scratch.data();
  }
  Buffer<float> gathered;  // on the device
  const float* src = model_.param_data();
  if (zero3_) {
    gathered = Buffer<float>(Mem::workspace, n_, ops_.allocator());
    zero3_->gather_full(gathered.data());
    src = gathered.data();
  }
  ops_.to_host(scratch.data(), src, n_);
  return scratch.data();
}

}  // namespace mpitron
