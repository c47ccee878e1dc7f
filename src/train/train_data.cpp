#include "mpitron/train/train_data.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>

#include "mpitron/checkpoint/hf_import.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/shard.hpp"
#include "mpitron/parallel/layout_rules.hpp"

namespace mpitron {

BatchPlan plan_batches(const JobConfig& cfg, int dp) {
  GridShape only_dp;  // of the grid, only dp splits the batch
  only_dp.dp = dp;
  const LayoutRequest l = layout_request(cfg, only_dp);
  return BatchPlan{l.micro_batch, layout_global_batch(l), layout_accumulation(l)};
}

ModelConfig job_model_config(const JobConfig& cfg) {
  const bool from_hf = cfg.train.init_from.rfind("hf:", 0) == 0;
  return from_hf ? model_for_hf_init(cfg.model, cfg.train.init_from.substr(3)) : resolve_model_config(cfg.model);
}

TrainData open_train_data(const JobConfig& cfg, const BatchPlan& bp, int dp, int dp_rank, bool print_notes) {
  TrainData d;
  const bool from_hf = cfg.train.init_from.rfind("hf:", 0) == 0;
  d.model = job_model_config(cfg);
  LoaderOptions lo;
  lo.dir = cfg.data.path;
  for (const auto& e : cfg.data.paths) lo.blend.push_back({e.path, e.weight});  // data.paths replaces data.path
  const std::string where = cfg.data.paths.empty() ? cfg.data.path : "data.paths";
  lo.split = "train";
  lo.seq_len = d.model.seq_len;
  lo.micro_batch = bp.micro;
  lo.dp_size = dp;
  lo.dp_rank = dp_rank;
  lo.seed = cfg.data.seed;
  lo.shuffle = true;
  lo.drop_last = cfg.data.drop_last;
  lo.prefetch = cfg.data.prefetch;
  lo.document_mask = cfg.data.document_mask;
  if (cfg.train.reproducible) lo.global_batch = bp.global;
  d.train = std::make_unique<DataLoader>(lo);
  // The data's tokenizer decides the vocabulary unless the job sets it.
  if (cfg.model.vocab_size == 0 && !from_hf) {
    d.model.vocab_size = d.train->vocab_size();
  } else {
    usage_check(d.model.vocab_size >= d.train->vocab_size(),
                "model.vocab_size ({}) is smaller than the data's vocabulary ({}, from {})", d.model.vocab_size,
                d.train->vocab_size(), where);
  }
  // Validation: the val split, or the blend of the corpora's val splits with their weights
  // (those without one are left out, and named).
  LoaderOptions vo = lo;
  vo.split = "val";
  vo.shuffle = false;
  vo.blend.clear();
  vo.global_batch = 0;
  std::vector<std::string> no_val;
  for (const auto& e : cfg.data.paths) {
    if (list_shards(e.path, "val").empty()) no_val.push_back(e.path);
    else vo.blend.push_back({e.path, e.weight});
  }
  const bool have_val = cfg.data.paths.empty() ? !list_shards(cfg.data.path, "val").empty() : !vo.blend.empty();
  if (cfg.eval.batches > 0 && have_val) {
    d.val = std::make_unique<ValidationLoader>(vo, int64_t{cfg.eval.batches} * bp.accum);
    if (print_notes && !no_val.empty())
      std::printf("note: no val_*.h5 in %s: validation blends the other corpora\n", fmt::format("{}", fmt::join(no_val, ", ")).c_str());
  } else if (print_notes && cfg.eval.batches > 0) {
    std::printf("note: no val_*.h5 in %s: validation loss is not computed\n", where.c_str());
  }
  return d;
}

StepTokenCounts fetch_step_batches(DataLoader& data, std::vector<Batch>& batches) {
  StepTokenCounts c;
  for (auto& b : batches) {
    data.next(b);
    for (int32_t t : b.targets) c.targets += t >= 0;
    for (size_t i = 0; i < b.positions.size(); ++i) {
      c.keys_seen += b.positions[i] + 1.0;
      c.keys_causal += static_cast<double>(i % static_cast<size_t>(b.seq_len)) + 1.0;
    }
  }
  return c;
}

}  // namespace mpitron
