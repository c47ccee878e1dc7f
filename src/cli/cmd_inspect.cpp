// `mpitron inspect FILE.h5|FOLDER` -- what an mpitron HDF5 file holds, readably:
//   checkpoint: step, loss, version, model config, the layout that wrote it, sampler state,
//               tensors with shapes (parameters; optimizer moments summarised);
//   data shard: vocabulary, eot, tokenizer type, token count and type;
//   anything else: every dataset with its shape and type, and the root attributes.
// One process, plain (non-MPI) HDF5.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mpitron/data/h5.hpp"
#include "mpitron/cli/commands.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"

namespace mpitron {
namespace {

const char* kHelp =
    "usage: mpitron inspect FILE.h5 | CKPT_FOLDER | RUN_FOLDER [--all] [--verify]\n\n"
    "Prints what an HDF5 file holds: for a checkpoint its step, model config, the layout that\n"
    "wrote it, the sampler state and every tensor with its shape; for a data shard its\n"
    "vocabulary and token count; for any other HDF5 file its datasets. --all also lists the\n"
    "optimizer tensors of a checkpoint one by one. --verify reads a whole checkpoint and checks\n"
    "its metadata and every tensor against their checksums (exit 2 naming the cause if not).\n";

struct Entry {
  std::string name, type;
  std::vector<hsize_t> dims;
};

herr_t visit(hid_t obj, const char* name, const H5O_info_t* info, void* out) {
  if (info->type != H5O_TYPE_DATASET) return 0;
  h5::Id ds(H5Dopen2(obj, name, H5P_DEFAULT));
  h5::Id sp(H5Dget_space(ds)), ty(H5Dget_type(ds));
  Entry e{name, "", {}};
  int nd = H5Sget_simple_extent_ndims(sp);
  e.dims.resize(static_cast<size_t>(std::max(nd, 0)));
  if (nd > 0) H5Sget_simple_extent_dims(sp, e.dims.data(), nullptr);
  switch (H5Tget_class(ty)) {
    case H5T_FLOAT: e.type = "float" + std::to_string(8 * H5Tget_size(ty)); break;
    case H5T_INTEGER:
      e.type = std::string(H5Tget_sign(ty) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(8 * H5Tget_size(ty));
      break;
    case H5T_STRING: e.type = "string[" + std::to_string(H5Tget_size(ty)) + "]"; break;
    default: e.type = "other";
  }
  static_cast<std::vector<Entry>*>(out)->push_back(std::move(e));
  return 0;
}

std::string shape_str(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::string join(const std::vector<int>& v) {
  return fmt::format("{}", fmt::join(v, ","));
}

void print_checkpoint(const std::string& path, const std::vector<Entry>& entries, bool all) {
  CheckpointMeta m = read_checkpoint_meta(path);
  const ModelConfig& c = m.model;
  std::printf("mpitron checkpoint %s\n", path.c_str());
  std::printf("  step            %lld (optimizer steps %lld), loss %.6f\n", static_cast<long long>(m.step),
              static_cast<long long>(m.optimizer_steps), m.loss);
  std::printf("  written by      mpitron %s at %s\n", m.version.c_str(), m.created.c_str());
  std::printf("  model           %s (%s): %d layers, %d heads, d_model %d, d_ff %d, vocab %d, seq_len %d\n",
              c.name.c_str(), c.arch == Arch::llama ? "llama" : "gpt2", c.n_layer, c.n_head, c.d_model, c.d_ff,
              c.vocab_size, c.seq_len);
  if (c.moe.enabled())
    std::printf("  moe             %d experts of d_ff %d, top %d, every %d block(s), %d shared, router %s%s\n",
                c.moe.n_experts, c.moe.d_ff, c.moe.top_k, c.moe.layer_freq, c.moe.n_shared,
                c.moe.router == MoeRouter::softmax_topk ? "softmax_topk" : "topk_softmax",
                c.moe.capacity_factor > 0 ? fmt::format(", capacity factor {}", c.moe.capacity_factor).c_str() : "");
  std::printf("  layout          world %d = tp %d x cp %d x dp %d x pp %d, zero %d%s%s\n",
              m.layout.tp * m.layout.cp * m.layout.dp * m.layout.pp, m.layout.tp, m.layout.cp, m.layout.dp,
              m.layout.pp, m.zero, m.pp_layers.empty() ? "" : ", pp_layers ", join(m.pp_layers).c_str());
  std::printf("  sampler         epoch %llu, position %llu per DP rank under dp %d (global %llu), data seed %llu\n",
              static_cast<unsigned long long>(m.sampler.epoch), static_cast<unsigned long long>(m.sampler.position),
              m.sampler_dp, static_cast<unsigned long long>(m.sampler.position * m.sampler_dp),
              static_cast<unsigned long long>(m.data_seed));
  std::printf("  rng             train seed %llu (counter-based init; no other RNG state)\n",
              static_cast<unsigned long long>(m.train_seed));
  std::string tok = "none";
  if (!m.tokenizer_json.empty()) {
    Tokenizer t = Tokenizer::from_json(m.tokenizer_json, path);
    tok = t.type() + ", vocab " + std::to_string(t.vocab_size()) + ", eot " + std::to_string(t.eot());
  }
  std::printf("  tokenizer       %s\n", tok.c_str());
  std::printf("  job             %zu bytes of TOML in config/job_toml\n", m.job_toml.size());
  size_t n_model = 0, n_opt = 0;
  long long floats = 0;
  for (const auto& e : entries) {
    if (e.name.rfind("model/", 0) == 0) {
      ++n_model;
      long long n = 1;
      for (auto d : e.dims) n *= static_cast<long long>(d);
      floats += n;
    } else if (e.name.rfind("optim/", 0) == 0) {
      ++n_opt;
    }
  }
  std::printf("  parameters      %zu tensors, %lld values (%.2fM)\n", n_model, floats, floats / 1e6);
  for (const auto& e : entries)
    if (e.name.rfind("model/", 0) == 0)
      std::printf("    %-40s %-8s %s\n", e.name.c_str(), e.type.c_str(), shape_str(e.dims).c_str());
  std::printf("  optimizer       %zu tensors (AdamW exp_avg, exp_avg_sq at the parameters' shapes)%s\n", n_opt,
              all ? "" : "; --all lists them");
  if (all)
    for (const auto& e : entries)
      if (e.name.rfind("optim/", 0) == 0)
        std::printf("    %-40s %-8s %s\n", e.name.c_str(), e.type.c_str(), shape_str(e.dims).c_str());
}

}  // namespace

int cmd_inspect(const Args& args) {
  std::string target;
  bool all = false, verify = false;
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", kHelp);
      return 0;
    } else if (a == "--all") {
      all = true;
    } else if (a == "--verify") {
      verify = true;
    } else if (a.rfind("--", 0) == 0) {
      usage_fail("inspect: unknown option '{}' (allowed: --all, --verify, --help)", a);
    } else {
      usage_check(target.empty(), "inspect: one file at a time (got '{}' and '{}')", target, a);
      target = a;
    }
  }
  usage_check(!target.empty(), "inspect: give an HDF5 file (checkpoint or data shard); see --help");
  const std::string path = resolve_checkpoint_path(target);
  h5::quiet();
  if (verify) {
    // Before anything else opens the file: a corrupted one is this command's answer, not a crash.
    CheckpointVerification v = verify_checkpoint_file(path);
    std::printf("verified %s: step %lld, metadata and %d tensors (%.2f MB) match their checksums; digest %016llx\n",
                path.c_str(), static_cast<long long>(v.meta.step), v.tensors, v.bytes / 1e6,
                static_cast<unsigned long long>(v.digest));
    return 0;
  }
  std::vector<Entry> entries;
  std::string format;
  bool shard = false;
  int64_t vocab = 0, eot = 0;
  std::string tok_json;
  {
    h5::Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    usage_check(f.valid(), "cannot open '{}': not a readable HDF5 file (truncated or corrupted?)", path);
    check(H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, visit, &entries) >= 0, "{}: cannot list its contents", path);
    if (h5::has_attr(f, "format")) format = h5::read_attr_str(f, "format", path);
    shard = H5Lexists(f, "tokens", H5P_DEFAULT) > 0 && h5::has_attr(f, "vocab_size");
    if (shard) {
      vocab = h5::read_attr_i64(f, "vocab_size", path);
      eot = h5::has_attr(f, "eot") ? h5::read_attr_i64(f, "eot", path) : -1;
      if (h5::has_attr(f, "tokenizer")) tok_json = h5::read_attr_str(f, "tokenizer", path);
    }
  }
  if (format == "mpitron-checkpoint") {
    print_checkpoint(path, entries, all);
    return 0;
  }
  if (shard) {
    std::printf("mpitron data shard %s\n", path.c_str());
    std::printf("  vocab_size      %lld, eot %lld\n", static_cast<long long>(vocab), static_cast<long long>(eot));
    if (!tok_json.empty()) {
      Tokenizer t = Tokenizer::from_json(tok_json, path);
      std::printf("  tokenizer       %s (%zu merges)\n", t.type().c_str(), t.merges().size());
    }
    for (const auto& e : entries)
      if (e.name == "tokens") std::printf("  tokens          %s %s\n", e.type.c_str(), shape_str(e.dims).c_str());
    return 0;
  }
  std::printf("HDF5 file %s (not an mpitron checkpoint or shard)\n", path.c_str());
  for (const auto& e : entries)
    std::printf("  %-40s %-10s %s\n", e.name.c_str(), e.type.c_str(), shape_str(e.dims).c_str());
  return 0;
}

}  // namespace mpitron
