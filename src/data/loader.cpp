// DataLoader: sampler -> windows -> batches, produced on a background thread into a bounded
// queue. Each queued batch carries the sampler state *after* it, so state() is exact however
// far the producer has run ahead, and restore() just restarts the producer from a state.
#include "mpitron/data/loader.hpp"


#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "mpitron/core/error.hpp"
#include "mpitron/data/sampler.hpp"
#include "mpitron/data/shard.hpp"

namespace mpitron {

void fill_batch(const TokenDataset& ds, int seq_len, const std::vector<int64_t>& samples, Batch& b) {
  const size_t T = static_cast<size_t>(seq_len);
  b.batch = static_cast<int>(samples.size());
  b.seq_len = seq_len;
  b.inputs.resize(samples.size() * T);
  b.targets.resize(samples.size() * T);
  std::vector<int32_t> win(T + 1);
  for (size_t i = 0; i < samples.size(); ++i) {
    ds.read(samples[i] * static_cast<int64_t>(seq_len), static_cast<int64_t>(T + 1), win.data());
    std::copy(win.begin(), win.end() - 1, b.inputs.begin() + i * T);
    std::copy(win.begin() + 1, win.end(), b.targets.begin() + i * T);
  }
}

namespace {

// Checks shared by both loaders: the data holds at least one sample of seq_len + 1 tokens.
void check_fits(const TokenDataset& ds, const LoaderOptions& opt) {
  usage_check(opt.seq_len >= 1, "seq_len must be >= 1 (got {})", opt.seq_len);
  usage_check(opt.micro_batch >= 1, "micro_batch must be >= 1 (got {})", opt.micro_batch);
  usage_check(ds.num_tokens() >= static_cast<int64_t>(opt.seq_len) + 1,
              "seq_len {} is larger than the data: {} holds fewer tokens than one sample of seq_len + 1 = {}", opt.seq_len,
              ds.describe(), opt.seq_len + 1);
}

}  // namespace

struct DataLoader::Impl {
  LoaderOptions opt;
  std::unique_ptr<TokenDataset> ds;
  std::unique_ptr<DistributedSampler> sampler;  // producer side only
  int64_t batches_per_epoch = 0;

  SamplerState consumed;  // after the last batch next() returned
  SamplerState cursor;    // producer: after the last batch it made

  struct Item {
    Batch b;
    SamplerState after;
  };
  std::deque<Item> queue;
  std::mutex mu;
  std::condition_variable not_full, not_empty;
  bool stop = false;
  std::exception_ptr error;
  std::thread worker;

  SamplerState normalized(SamplerState s) const {
    if (static_cast<int64_t>(s.position) + opt.micro_batch > sampler->num_samples()) return {s.epoch + 1, 0};
    return s;
  }

  // Makes the batch at `cursor` and advances it.
  void produce(Batch& b) {
    cursor = normalized(cursor);
    if (sampler->epoch() != cursor.epoch) sampler->set_epoch(cursor.epoch);
    std::vector<int64_t> samples(opt.micro_batch);
    for (int j = 0; j < opt.micro_batch; ++j) samples[j] = (*sampler)[static_cast<int64_t>(cursor.position) + j];
    fill_batch(*ds, opt.seq_len, samples, b);
    cursor.position += opt.micro_batch;
  }

  void run() {
    for (;;) {
      {
        std::unique_lock lk(mu);
        not_full.wait(lk, [&] { return stop || static_cast<int>(queue.size()) < opt.prefetch; });
        if (stop) return;
      }
      Item it;
      try {
        produce(it.b);
        it.after = cursor;
      } catch (...) {
        std::lock_guard lk(mu);
        error = std::current_exception();
        not_empty.notify_all();
        return;
      }
      std::lock_guard lk(mu);
      queue.push_back(std::move(it));
      not_empty.notify_one();
    }
  }

  void start() {
    if (opt.prefetch <= 0) return;
    stop = false;
    error = nullptr;
    worker = std::thread([this] { run(); });
    pthread_setname_np(worker.native_handle(), "mpitron-data");  // named in top, gdb and /proc
  }

  void halt() {
    {
      std::lock_guard lk(mu);
      stop = true;
    }
    not_full.notify_all();
    if (worker.joinable()) worker.join();
    queue.clear();
  }
};

DataLoader::DataLoader(const LoaderOptions& opt) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.opt = opt;
  usage_check(opt.dp_size >= 1 && opt.dp_rank >= 0 && opt.dp_rank < opt.dp_size, "data loader: dp_rank {} not in [0, {})",
              opt.dp_rank, opt.dp_size);
  m.ds = std::make_unique<TokenDataset>(opt.dir, opt.split);
  check_fits(*m.ds, opt);
  int64_t n = m.ds->num_samples(opt.seq_len);
  usage_check(n >= opt.dp_size || !opt.drop_last,
              "{} gives {} samples of seq_len {}: fewer than the {} data-parallel ranks (use less DP or more data)",
              m.ds->describe(), n, opt.seq_len, opt.dp_size);
  m.sampler = std::make_unique<DistributedSampler>(n, opt.dp_size, opt.dp_rank, opt.shuffle, opt.seed, opt.drop_last);
  m.batches_per_epoch = m.sampler->num_samples() / opt.micro_batch;
  usage_check(m.batches_per_epoch >= 1,
              "{} gives each of {} data-parallel ranks {} samples of seq_len {} per epoch: fewer than one micro-batch of {}",
              m.ds->describe(), opt.dp_size, m.sampler->num_samples(), opt.seq_len, opt.micro_batch);
  m.start();
}

DataLoader::~DataLoader() { impl_->halt(); }

void DataLoader::next(Batch& b) {
  auto& m = *impl_;
  if (m.opt.prefetch <= 0) {
    m.produce(b);
    m.consumed = m.cursor;
    return;
  }
  std::unique_lock lk(m.mu);
  m.not_empty.wait(lk, [&] { return !m.queue.empty() || m.error; });
  if (m.queue.empty()) std::rethrow_exception(m.error);
  Impl::Item it = std::move(m.queue.front());
  m.queue.pop_front();
  lk.unlock();
  m.not_full.notify_one();
  b = std::move(it.b);
  m.consumed = it.after;
}

SamplerState DataLoader::state() const { return impl_->normalized(impl_->consumed); }

void DataLoader::restore(const SamplerState& s) {
  auto& m = *impl_;
  usage_check(static_cast<int64_t>(s.position) <= m.sampler->num_samples(),
              "data loader: saved position {} is beyond the {} samples per epoch of this rank (different data or layout?)",
              s.position, m.sampler->num_samples());
  m.halt();
  m.consumed = m.cursor = s;
  m.start();
}

int64_t DataLoader::samples_per_epoch() const { return impl_->sampler->num_samples(); }
int64_t DataLoader::batches_per_epoch() const { return impl_->batches_per_epoch; }
int64_t DataLoader::num_tokens() const { return impl_->ds->num_tokens(); }
int DataLoader::vocab_size() const { return impl_->ds->vocab_size(); }
int DataLoader::eot() const { return impl_->ds->eot(); }
const std::string& DataLoader::tokenizer_json() const { return impl_->ds->tokenizer_json(); }

// ---- validation ----

ValidationLoader::ValidationLoader(const LoaderOptions& opt, int64_t max_batches) : opt_(opt) {
  ds_ = std::make_unique<TokenDataset>(opt.dir, opt.split);
  check_fits(*ds_, opt);
  int64_t per_round = static_cast<int64_t>(opt.micro_batch) * opt.dp_size;
  num_batches_ = ds_->num_samples(opt.seq_len) / per_round;
  usage_check(num_batches_ >= 1, "{} gives {} samples of seq_len {}: fewer than one micro-batch of {} on each of {} DP ranks",
              ds_->describe(), ds_->num_samples(opt.seq_len), opt.seq_len, opt.micro_batch, opt.dp_size);
  if (max_batches > 0 && max_batches < num_batches_) num_batches_ = max_batches;
}

ValidationLoader::~ValidationLoader() = default;

bool ValidationLoader::next(Batch& b) {
  if (next_ >= num_batches_) return false;
  std::vector<int64_t> samples(opt_.micro_batch);
  int64_t first = (next_ * opt_.dp_size + opt_.dp_rank) * opt_.micro_batch;
  for (int j = 0; j < opt_.micro_batch; ++j) samples[j] = first + j;
  fill_batch(*ds_, opt_.seq_len, samples, b);
  ++next_;
  return true;
}

void ValidationLoader::reset() { next_ = 0; }
int64_t ValidationLoader::num_batches() const { return num_batches_; }
int ValidationLoader::vocab_size() const { return ds_->vocab_size(); }
int ValidationLoader::eot() const { return ds_->eot(); }

}  // namespace mpitron
