// DataLoader: sampler -> windows -> batches, produced on a background thread into a bounded
// queue. Each queued batch carries the sampler state *after* it, so state() is exact however
// far the producer has run ahead, and restore() just restarts the producer from a state.
#include "mpitron/data/loader.hpp"


#include <fmt/format.h>
#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <tuple>

#include "mpitron/core/error.hpp"
#include "mpitron/data/blend.hpp"
#include "mpitron/data/sampler.hpp"
#include "mpitron/data/shard.hpp"

namespace mpitron {

// One corpus, or a blend of several (blend.hpp): what both loaders read samples from.
class Corpora {
 public:
  explicit Corpora(const LoaderOptions& opt) : seq_len_(opt.seq_len), document_mask_(opt.document_mask) {
    usage_check(opt.seq_len >= 1, "seq_len must be >= 1 (got {})", opt.seq_len);
    usage_check(opt.micro_batch >= 1, "micro_batch must be >= 1 (got {})", opt.micro_batch);
    std::vector<std::pair<std::string, double>> list = opt.blend;
    if (list.empty()) list.push_back({opt.dir, 1.0});
    std::vector<int64_t> n;
    std::vector<double> w;
    for (const auto& [dir, weight] : list) {
      auto ds = std::make_unique<TokenDataset>(dir, opt.split);
      usage_check(ds->num_tokens() >= static_cast<int64_t>(opt.seq_len) + 1,
                  "seq_len {} is larger than the data: {} holds fewer tokens than one sample of seq_len + 1 = {}",
                  opt.seq_len, ds->describe(), opt.seq_len + 1);
      if (!ds_.empty()) {
        const TokenDataset& a = *ds_.front();
        usage_check(a.vocab_size() == ds->vocab_size() && a.eot() == ds->eot() && a.tokenizer_json() == ds->tokenizer_json(),
                    "data.paths: {} and {} were made with different tokenizers (vocab {} / eot {} vs vocab {} / eot {}): "
                    "every corpus of a blend must use the same one",
                    a.describe(), ds->describe(), a.vocab_size(), a.eot(), ds->vocab_size(), ds->eot());
      }
      if (opt.document_mask) ds->load_doc_starts();
      usage_check(ds->packed_seq_len() == 0 || ds->packed_seq_len() == opt.seq_len,
                  "{} was packed for windows of {} + 1 tokens (prep --pack {}), but model.seq_len is {}: its windows "
                  "would cut documents and train on padding; set model.seq_len = {} or prep again with --pack {}",
                  ds->describe(), ds->packed_seq_len(), ds->packed_seq_len(), opt.seq_len, ds->packed_seq_len(),
                  opt.seq_len);
      n.push_back(ds->num_samples(opt.seq_len));
      w.push_back(weight);
      names_.push_back(dir);
      ds_.push_back(std::move(ds));
    }
    if (!opt.blend.empty()) blend_ = std::make_unique<BlendIndex>(n, w, opt.seed);
  }
  int64_t num_samples() const { return blend_ ? blend_->size() : ds_.front()->num_samples(seq_len_); }
  const TokenDataset& first() const { return *ds_.front(); }
  int64_t num_tokens() const {
    int64_t t = 0;
    for (const auto& d : ds_) t += d->num_tokens();
    return t;
  }
  std::string describe() const {
    if (!blend_) return ds_.front()->describe();
    std::string s = fmt::format("blend of {} corpora, {} samples per epoch:", ds_.size(), blend_->size());
    for (int k = 0; k < blend_->corpora(); ++k) {
      const int64_t n = ds_[k]->num_samples(seq_len_), d = blend_->draws(k);
      s += fmt::format("{} {} weight {:.3f} -> {:.3f} ({} draws from its {} samples: {:.2f} passes)", k ? "," : "", names_[k],
                       blend_->weight(k), static_cast<double>(d) / static_cast<double>(blend_->size()), d, n,
                       static_cast<double>(d) / static_cast<double>(n));
    }
    return s;
  }
  // Fills b with the windows of the given positions of `epoch` (seq_len + 1 tokens each).
  void fill(const std::vector<int64_t>& positions, uint64_t epoch, Batch& b) const {
    const size_t T = static_cast<size_t>(seq_len_);
    b.batch = static_cast<int>(positions.size());
    b.seq_len = seq_len_;
    b.inputs.resize(positions.size() * T);
    b.targets.resize(positions.size() * T);
    b.positions.resize(document_mask_ ? positions.size() * T : 0);
    std::vector<int32_t> win(T + 1);
    std::vector<uint8_t> mask(T);
    for (size_t i = 0; i < positions.size(); ++i) {
      int k = 0;
      int64_t s = positions[i];
      if (blend_) std::tie(k, s) = blend_->sample(s, epoch);
      const TokenDataset& ds = *ds_[k];
      const int64_t w = s * static_cast<int64_t>(seq_len_);
      ds.read(w, static_cast<int64_t>(T + 1), win.data());
      std::copy(win.begin(), win.end() - 1, b.inputs.begin() + i * T);
      std::copy(win.begin() + 1, win.end(), b.targets.begin() + i * T);
      if (ds.has_loss_mask()) {  // the targets' mask: tokens w + 1 .. w + T
        ds.read_loss_mask(w + 1, static_cast<int64_t>(T), mask.data());
        for (size_t t = 0; t < T; ++t)
          if (!mask[t]) b.targets[i * T + t] = -1;
      }
      if (document_mask_) document_positions(ds.doc_starts(), w, b.positions.data() + i * T);
    }
  }
  // Positions in their segments of tokens [w, w + T): a segment opens at the token before each
  // document's first (its predecessor's end-of-text), at the dataset's first token and at w.
  void document_positions(const std::vector<int64_t>& docs, int64_t w, int32_t* pos) const {
    auto next = std::upper_bound(docs.begin(), docs.end(), w + 1);  // first document opening after w
    int64_t open = w;
    for (int64_t t = 0; t < seq_len_; ++t) {
      const int64_t g = w + t;
      if (next != docs.end() && *next - 1 == g) {
        open = g;
        ++next;
      }
      pos[t] = static_cast<int32_t>(g - open);
    }
  }

 private:
  int seq_len_;
  bool document_mask_;
  std::vector<std::unique_ptr<TokenDataset>> ds_;
  std::vector<std::string> names_;
  std::unique_ptr<BlendIndex> blend_;
};

struct DataLoader::Impl {
  LoaderOptions opt;
  std::unique_ptr<Corpora> data;
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
    data->fill(samples, cursor.epoch, b);
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
  m.data = std::make_unique<Corpora>(opt);
  int64_t n = m.data->num_samples();
  usage_check(n >= opt.dp_size || !opt.drop_last,
              "{} gives {} samples of seq_len {}: fewer than the {} data-parallel ranks (use less DP or more data)",
              m.data->describe(), n, opt.seq_len, opt.dp_size);
  m.sampler = std::make_unique<DistributedSampler>(n, opt.dp_size, opt.dp_rank, opt.shuffle, opt.seed, opt.drop_last,
                                                   opt.global_batch > 0 ? opt.micro_batch : 1, opt.global_batch);
  m.batches_per_epoch = m.sampler->num_samples() / opt.micro_batch;
  usage_check(m.batches_per_epoch >= 1,
              "{} gives each of {} data-parallel ranks {} samples of seq_len {} per epoch: fewer than one micro-batch of {}",
              m.data->describe(), opt.dp_size, m.sampler->num_samples(), opt.seq_len, opt.micro_batch);
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
int64_t DataLoader::num_tokens() const { return impl_->data->num_tokens(); }
int DataLoader::vocab_size() const { return impl_->data->first().vocab_size(); }
int DataLoader::eot() const { return impl_->data->first().eot(); }
const std::string& DataLoader::tokenizer_json() const { return impl_->data->first().tokenizer_json(); }
std::string DataLoader::describe() const { return impl_->data->describe(); }

// ---- validation ----

ValidationLoader::ValidationLoader(const LoaderOptions& opt, int64_t max_batches) : opt_(opt) {
  data_ = std::make_unique<Corpora>(opt);
  int64_t per_round = static_cast<int64_t>(opt.micro_batch) * opt.dp_size;
  num_batches_ = data_->num_samples() / per_round;
  usage_check(num_batches_ >= 1, "{} gives {} samples of seq_len {}: fewer than one micro-batch of {} on each of {} DP ranks",
              data_->describe(), data_->num_samples(), opt.seq_len, opt.micro_batch, opt.dp_size);
  if (max_batches > 0 && max_batches < num_batches_) num_batches_ = max_batches;
}

ValidationLoader::~ValidationLoader() = default;

bool ValidationLoader::next(Batch& b) {
  if (next_ >= num_batches_) return false;
  std::vector<int64_t> samples(opt_.micro_batch);
  int64_t first = (next_ * opt_.dp_size + opt_.dp_rank) * opt_.micro_batch;
  for (int j = 0; j < opt_.micro_batch; ++j) samples[j] = first + j;
  data_->fill(samples, 0, b);  // validation: the blend's first epoch, unshuffled
  ++next_;
  return true;
}

void ValidationLoader::reset() { next_ = 0; }
int64_t ValidationLoader::num_batches() const { return num_batches_; }
int ValidationLoader::vocab_size() const { return data_->first().vocab_size(); }
int ValidationLoader::eot() const { return data_->first().eot(); }

}  // namespace mpitron
