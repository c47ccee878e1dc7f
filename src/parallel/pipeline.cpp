// The pipeline executor (see pipeline.hpp for the communication rule).
#include "mpitron/parallel/pipeline.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <tuple>

#include "mpitron/core/error.hpp"
#include "mpitron/core/trace.hpp"

namespace mpitron {
namespace {

// A batch's document positions for ModelChunk::forward (nullptr without document masking).
const int32_t* positions_of(const Batch& b) { return b.positions.empty() ? nullptr : b.positions.data(); }

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

PipelineSchedule pipeline_schedule_for_job(const ParallelSection& par, int pp, int microbatches) {
  return make_schedule(par.schedule, pp, microbatches, par.virtual_stages);
}

std::vector<double> pipeline_idle_by_stage(const PipelineStepStats& st, Comm& pp) {
  std::vector<double> idle(pp.size(), 0.0);
  idle[pp.rank()] = st.idle_fraction();
  pp.all_reduce_host_f64(idle.data(), idle.size(), ReduceOp::sum);
  return idle;
}

PipelineExecutor::PipelineExecutor(const PipelineSchedule& schedule, Comm& pp, std::vector<ModelChunk*> chunks)
    : s_(schedule), comm_(pp), chunks_(std::move(chunks)), rank_(pp.rank()), V_(schedule.num_virtual_stages()) {
  init();
}

void PipelineExecutor::init() {
  const Comm& pp = comm_;
  check(pp.size() == s_.pp, "pipeline: PP group of {} ranks for a schedule of {} stages", pp.size(), s_.pp);
  check(static_cast<int>(chunks_.size()) == s_.virtual_stages, "pipeline: {} model chunks for {} virtual stages",
        chunks_.size(), s_.virtual_stages);
  for (int c = 0; c < s_.virtual_stages; ++c) {
    int vs = s_.virtual_stage(rank_, c);
    const ModelShard& sh = chunks_[c]->shard();
    check(sh.has_embedding == (vs == 0) && sh.has_head == (vs == V_ - 1),
          "pipeline: chunk {} of rank {} (virtual stage {}) has embedding={} head={}", c, rank_, vs, sh.has_embedding,
          sh.has_head);
    std::vector<int> slots;
    for (int k = s_.max_in_flight(rank_, c) - 1; k >= 0; --k) slots.push_back(k);
    free_slots_.push_back(std::move(slots));
  }
  slot_of_.resize(chunks_.size());
}

PipelineExecutor::~PipelineExecutor() {
  try {
    reap_sends(true);
  } catch (...) {
  }
}

int PipelineExecutor::tag(int dir, int mb, int receiver_vs) const {
  return ((mb * V_ + receiver_vs) * 2 + dir) % 32768;  // MPI guarantees tags up to 32767
}

int PipelineExecutor::take_buffer(size_t floats) {
  reap_sends(false);
  for (size_t k = 0; k < free_.size(); ++k) {
    int i = free_[k];
    if (bufs_[i].size() >= floats) {
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(k));
      return i;
    }
  }
  bufs_.emplace_back(Mem::comm, floats);
  return static_cast<int>(bufs_.size()) - 1;
}

void PipelineExecutor::reap_sends(bool all) {
  for (size_t k = 0; k < sends_.size();) {
    if (all) sends_[k].req->wait();
    if (all || sends_[k].req->test()) {
      if (!sends_[k].what.empty())  // from its post until it was seen complete
        trace::lane_event(sends_[k].what, trace::pp_send, sends_[k].posted, Clock::now());
      release_buffer(sends_[k].buf);
      sends_.erase(sends_.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      ++k;
    }
  }
}

void PipelineExecutor::run_comm_group(const std::vector<PipeAction>& acts, size_t begin, size_t end,
                                      const std::vector<Batch>& batches) {
  std::vector<Request> recvs;
  std::vector<std::string> recv_names;
  const bool tracing = trace::enabled();
  const auto posted = Clock::now();
  auto name = [&](const char* what, const PipeAction& a) {
    return V_ > s_.pp ? fmt::format("pp {} mb {} chunk {}", what, a.mb, a.chunk) : fmt::format("pp {} mb {}", what, a.mb);
  };
  for (size_t i = begin; i < end; ++i) {
    const PipeAction a = acts[i];
    ModelChunk& m = *chunks_[a.chunk];
    // Stage tensors are [rows, C]; with sequence parallel each TP rank holds (and sends to the same
    // TP rank of the next stage) only its slice of the sequence.
    const size_t n = m.stage_floats(batches[a.mb].batch);
    const int vs = s_.virtual_stage(rank_, a.chunk), peer = s_.peer(rank_, a);
    switch (a.op) {
      case PipeOp::recv_act:
      case PipeOp::recv_grad: {
        int dir = a.op == PipeOp::recv_grad;
        int b = take_buffer(n);
        arrived_[{dir, a.mb, a.chunk}] = b;
        recvs.push_back(comm_.irecv(bufs_[b].data(), n, DType::f32, peer, tag(dir, a.mb, vs)));
        if (tracing) recv_names.push_back(name(dir ? "recv grad" : "recv act", a));
        break;
      }
      case PipeOp::send_act:
      case PipeOp::send_grad: {
        int dir = a.op == PipeOp::send_grad;
        int b = take_buffer(n);
        if (dir == 0) m.get_stage_output(slot_of_[a.chunk].at(a.mb), bufs_[b].data(), n);
        else m.get_stage_input_grad(bufs_[b].data(), n);
        int to_vs = dir == 0 ? vs + 1 : vs - 1;
        sends_.push_back({comm_.isend(bufs_[b].data(), n, DType::f32, peer, tag(dir, a.mb, to_vs)), b,
                          tracing ? name(dir ? "send grad" : "send act", a) : std::string(), Clock::now()});
        break;
      }
      default: fail("pipeline: {} in a communication group", pipe_op_name(a.op));
    }
  }
  const auto t0 = Clock::now();
  for (size_t k = 0; k < recvs.size(); ++k) {
    recvs[k]->wait();
    if (tracing) trace::event(recv_names[k], trace::pp_recv, posted, Clock::now());
  }
  if (tracing && !recvs.empty()) trace::event("waiting for pp recv", trace::compute, t0, Clock::now());
}

PipelineStepStats PipelineExecutor::run(const std::vector<Batch>& batches, float loss_scale) {
  check(static_cast<int>(batches.size()) == s_.microbatches, "pipeline: {} micro-batches for a schedule of {}",
        batches.size(), s_.microbatches);
  PipelineStepStats st;
  const auto t_start = Clock::now();
  const auto& acts = s_.ranks[rank_];
  for (size_t i = 0; i < acts.size();) {
    const PipeAction a = acts[i];
    if (is_comm(a.op)) {
      size_t end = i;
      while (end < acts.size() && is_comm(acts[end].op)) ++end;
      run_comm_group(acts, i, end, batches);
      i = end;
      continue;
    }
    ModelChunk& m = *chunks_[a.chunk];
    const Batch& b = batches[a.mb];
    const int vs = s_.virtual_stage(rank_, a.chunk);
    const size_t n = m.stage_floats(b.batch);
    const auto t0 = Clock::now();
    if (a.op == PipeOp::forward) {
      check(!free_slots_[a.chunk].empty(), "pipeline: no free activation slot on chunk {} for micro-batch {}", a.chunk,
            a.mb);
      int slot = free_slots_[a.chunk].back();
      free_slots_[a.chunk].pop_back();
      slot_of_[a.chunk][a.mb] = slot;
      if (vs > 0) {
        int buf = arrived_.at({0, a.mb, a.chunk});
        m.set_stage_input(slot, bufs_[buf].data(), n);
        arrived_.erase({0, a.mb, a.chunk});
        release_buffer(buf);
      }
      int64_t count = 0;
      const double loss = m.forward(b.inputs.data(), b.targets.data(), b.batch, &count, slot, positions_of(b));
      st.loss_sum += loss;
      st.loss_exact.add(loss);
      st.n_targets += count;
    } else {
      int slot = slot_of_[a.chunk].at(a.mb);
      if (vs < V_ - 1) {
        int buf = arrived_.at({1, a.mb, a.chunk});
        m.set_stage_output_grad(bufs_[buf].data(), n);
        arrived_.erase({1, a.mb, a.chunk});
        release_buffer(buf);
      }
      m.backward(loss_scale, slot);  // the input gradient it leaves is sent before the next backward
      free_slots_[a.chunk].push_back(slot);
      slot_of_[a.chunk].erase(a.mb);
    }
    const auto t1 = Clock::now();
    st.compute_ms += ms_between(t0, t1);  // idle_fraction(): the same intervals as the timeline's
    if (trace::enabled())
      trace::event(V_ > s_.pp ? fmt::format("{} mb {} chunk {}", a.op == PipeOp::forward ? "forward" : "backward", a.mb, a.chunk)
                              : fmt::format("{} mb {}", a.op == PipeOp::forward ? "forward" : "backward", a.mb),
                   trace::compute, t0, t1);
    ++i;
  }
  reap_sends(true);
  check(arrived_.empty(), "pipeline: {} received messages were never used", arrived_.size());
  const auto t_end = Clock::now();
  st.total_ms = ms_between(t_start, t_end);
  if (trace::enabled()) trace::event("pipeline schedule", trace::compute, t_start, t_end);
  return st;
}

double PipelineExecutor::forward_only(const Batch& b, int64_t* n_targets) {
  double loss = 0;
  *n_targets = 0;
  for (int c = 0; c < s_.virtual_stages; ++c) {
    ModelChunk& m = *chunks_[c];
    const int vs = s_.virtual_stage(rank_, c);
    const size_t n = m.stage_floats(b.batch);
    if (vs > 0) {
      int buf = take_buffer(n);
      comm_.recv(bufs_[buf].data(), n, DType::f32, (rank_ + s_.pp - 1) % s_.pp, tag(0, 0, vs));
      m.set_stage_input(0, bufs_[buf].data(), n);
      release_buffer(buf);
    }
    m.set_grad_enabled(false);
    int64_t count = 0;
    loss += m.forward(b.inputs.data(), b.targets.data(), b.batch, &count, 0, positions_of(b));
    m.set_grad_enabled(true);
    *n_targets += count;
    if (vs < V_ - 1) {
      int buf = take_buffer(n);
      m.get_stage_output(0, bufs_[buf].data(), n);
      sends_.push_back({comm_.isend(bufs_[buf].data(), n, DType::f32, (rank_ + 1) % s_.pp, tag(0, 0, vs + 1)), buf, {}, {}});
    }
  }
  reap_sends(true);
  return loss;
}

}  // namespace mpitron
