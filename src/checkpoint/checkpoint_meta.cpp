#include "checkpoint_meta.hpp"

#include <hdf5.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/core/version.hpp"
#include "mpitron/model/rope_scaling.hpp"

namespace mpitron::ckpt_meta {
namespace {
using json = nlohmann::json;
using h5::Id;
}  // namespace

const char* const kFormat = "mpitron-checkpoint";

// ---- metadata as JSON (broadcast from rank 0 so every rank writes identical attributes) ----

static json meta_to_json_dense(const CheckpointMeta& m);  // every key but the MoE ones

json meta_to_json(const CheckpointMeta& m) {
  json j = meta_to_json_dense(m);
  const ModelConfig& c = m.model;
  const RopeScaling& r = c.rope_scaling;
  if (r.enabled())  // only then, as the MoE keys: a plain RoPE checkpoint's checksum stays what it was
    j["model"]["rope_scaling"] = {{"type", rope_scaling_name(r.type)},
                                  {"factor", r.factor},
                                  {"original_max_pos", r.original_max_pos},
                                  {"low_freq_factor", r.low_freq_factor},
                                  {"high_freq_factor", r.high_freq_factor},
                                  {"beta_fast", r.beta_fast},
                                  {"beta_slow", r.beta_slow},
                                  {"attention_factor", r.attention_factor}};
  if (c.moe.enabled())  // only then: a dense checkpoint's checksum (checkpoint_verify.cpp) stays what it was
    j["model"]["moe"] = {{"n_experts", c.moe.n_experts},
                         {"top_k", c.moe.top_k},
                         {"expert_d_ff", c.moe.d_ff},
                         {"n_shared_experts", c.moe.n_shared},
                         {"layer_freq", c.moe.layer_freq},
                         {"router", c.moe.router == MoeRouter::softmax_topk ? "softmax_topk" : "topk_softmax"},
                         {"norm_topk_prob", c.moe.norm_topk_prob},
                         {"aux_loss_coef", c.moe.aux_loss_coef},
                         {"z_loss_coef", c.moe.z_loss_coef},
                         {"capacity_factor", c.moe.capacity_factor}};
  return j;
}

static json meta_to_json_dense(const CheckpointMeta& m) {
  const ModelConfig& c = m.model;
  return json{{"step", m.step},
              {"optimizer_steps", m.optimizer_steps},
              {"epoch", m.sampler.epoch},
              {"position", m.sampler.position},
              {"sampler_dp", m.sampler_dp},
              {"train_seed", m.train_seed},
              {"data_seed", m.data_seed},
              {"loss", m.loss},
              {"model",
               {{"name", c.name},
                {"arch", c.arch == Arch::gpt2 ? "gpt2" : "llama"},
                {"n_layer", c.n_layer},
                {"n_head", c.n_head},
                {"n_kv_head", c.n_kv_head},
                {"d_model", c.d_model},
                {"d_ff", c.d_ff},
                {"vocab_size", c.vocab_size},
                {"seq_len", c.seq_len},
                {"tied_embeddings", c.tied_embeddings},
                {"norm_eps", c.norm_eps},
                {"rope_theta", c.rope_theta},
                {"qkv_bias", c.qkv_bias},
                {"qk_norm", c.qk_norm},
                {"head_dim", c.head_size},
                {"rope_pairing", c.arch == Arch::llama ? kRopePairing : "none"}}},
              {"layout", {{"tp", m.layout.tp}, {"cp", m.layout.cp}, {"dp", m.layout.dp}, {"pp", m.layout.pp}}},
              {"zero", m.zero},
              {"pp_layers", m.pp_layers},
              {"job_toml", m.job_toml},
              {"tokenizer_json", m.tokenizer_json},
              {"version", m.version},
              {"created", m.created}};
}

CheckpointMeta meta_from_json(const json& j) {
  CheckpointMeta m;
  m.step = j.at("step");
  m.optimizer_steps = j.at("optimizer_steps");
  m.sampler.epoch = j.at("epoch");
  m.sampler.position = j.at("position");
  m.sampler_dp = j.at("sampler_dp");
  m.train_seed = j.at("train_seed");
  m.data_seed = j.at("data_seed");
  m.loss = j.at("loss");
  const json& c = j.at("model");
  m.model.name = c.at("name");
  m.model.arch = c.at("arch") == "llama" ? Arch::llama : Arch::gpt2;
  m.model.n_layer = c.at("n_layer");
  m.model.n_head = c.at("n_head");
  m.model.n_kv_head = c.at("n_kv_head");
  m.model.d_model = c.at("d_model");
  m.model.d_ff = c.at("d_ff");
  m.model.vocab_size = c.at("vocab_size");
  m.model.seq_len = c.at("seq_len");
  m.model.tied_embeddings = c.at("tied_embeddings");
  if (c.contains("norm_eps")) m.model.norm_eps = c.at("norm_eps");  // absent before LLaMA
  if (c.contains("rope_theta")) m.model.rope_theta = c.at("rope_theta");
  if (c.contains("qkv_bias")) m.model.qkv_bias = c.at("qkv_bias");  // absent before Qwen
  if (c.contains("qk_norm")) m.model.qk_norm = c.at("qk_norm");
  if (c.contains("head_dim")) m.model.head_size = c.at("head_dim");  // 0: d_model / n_head
  if (c.contains("rope_scaling")) {  // absent: plain RoPE
    const json& e = c.at("rope_scaling");
    RopeScaling& r = m.model.rope_scaling;
    r.type = rope_scaling_type(e.at("type").get<std::string>()).value_or(RopeScalingType::none);
    r.factor = e.at("factor"), r.original_max_pos = e.at("original_max_pos");
    r.low_freq_factor = e.at("low_freq_factor"), r.high_freq_factor = e.at("high_freq_factor");
    r.beta_fast = e.at("beta_fast"), r.beta_slow = e.at("beta_slow"), r.attention_factor = e.at("attention_factor");
  }
  if (c.contains("moe")) {  // absent before mixture of experts
    const json& e = c.at("moe");
    MoeConfig& x = m.model.moe;
    x.n_experts = e.at("n_experts"), x.top_k = e.at("top_k"), x.d_ff = e.at("expert_d_ff");
    x.n_shared = e.at("n_shared_experts"), x.layer_freq = e.at("layer_freq");
    x.router = e.at("router") == "topk_softmax" ? MoeRouter::topk_softmax : MoeRouter::softmax_topk;
    x.norm_topk_prob = e.at("norm_topk_prob"), x.aux_loss_coef = e.at("aux_loss_coef");
    x.z_loss_coef = e.at("z_loss_coef"), x.capacity_factor = e.at("capacity_factor");
  }
  const json& l = j.at("layout");
  m.layout = GridShape{l.at("tp"), l.at("cp"), l.at("dp"), l.at("pp")};
  m.zero = j.at("zero");
  m.pp_layers = j.at("pp_layers").get<std::vector<int>>();
  m.job_toml = j.at("job_toml");
  m.tokenizer_json = j.at("tokenizer_json");
  m.version = j.at("version");
  m.created = j.at("created");
  return m;
}

static void write_attr_f64(hid_t obj, const char* name, double v) {
  Id space(H5Screate(H5S_SCALAR));
  Id a(H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT));
  check(a.valid() && H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0, "HDF5: cannot write attribute '{}'", name);
}
void write_attr_u64(hid_t obj, const char* name, uint64_t v) {
  Id space(H5Screate(H5S_SCALAR));
  Id a(H5Acreate2(obj, name, H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT));
  check(a.valid() && H5Awrite(a, H5T_NATIVE_UINT64, &v) >= 0, "HDF5: cannot write attribute '{}'", name);
}
static void write_attr_i64s(hid_t obj, const char* name, const std::vector<int64_t>& v) {
  hsize_t n = v.size();
  Id space(H5Screate_simple(1, &n, nullptr));
  Id a(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT));
  check(a.valid() && H5Awrite(a, H5T_NATIVE_INT64, v.data()) >= 0, "HDF5: cannot write attribute '{}'", name);
}
static double read_attr_f64(hid_t obj, const char* name, const std::string& file) {
  check(h5::has_attr(obj, name), "{}: missing attribute '{}'", file, name);
  Id a(H5Aopen(obj, name, H5P_DEFAULT));
  double v = 0;
  check(a.valid() && h5::attr_is_single(a) && H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0, "{}: cannot read attribute '{}'",
        file, name);
  return v;
}
uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& file) {
  check(h5::has_attr(obj, name), "{}: missing attribute '{}'", file, name);
  Id a(H5Aopen(obj, name, H5P_DEFAULT));
  uint64_t v = 0;
  check(a.valid() && h5::attr_is_single(a) && H5Aread(a, H5T_NATIVE_UINT64, &v) >= 0, "{}: cannot read attribute '{}'",
        file, name);
  return v;
}

void set_compact_storage(hid_t gcpl) {
  // Links and attributes stay in the object header (v2, checksummed) however many there are.
  // Past 8 of them HDF5 would move them to "dense" storage, a fractal heap whose blocks carry no
  // checksum: a flipped bit there crashes HDF5 1.10 (free() of a bad pointer) instead of failing.
  check(H5Pset_link_phase_change(gcpl, kMaxCompact, 0) >= 0 && H5Pset_attr_phase_change(gcpl, kMaxCompact, 0) >= 0,
        "HDF5: cannot set compact link and attribute storage");
}

Id make_group(hid_t f, const char* name) {
  Id gcpl(H5Pcreate(H5P_GROUP_CREATE));
  set_compact_storage(gcpl);
  Id g(H5Gcreate2(f, name, H5P_DEFAULT, gcpl, H5P_DEFAULT));
  check(g.valid(), "HDF5: cannot create group '{}'", name);
  return g;
}

// A fixed-length string as a scalar dataset (h5py: f[name][()] -> bytes); collective create,
// rank 0 writes.
static void write_text(hid_t f, const char* name, const std::string& text, bool writer, hid_t dxpl) {
  Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, std::max<size_t>(1, text.size()));
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Id space(H5Screate(H5S_SCALAR));
  Id ds(H5Dcreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  check(ds.valid(), "HDF5: cannot create dataset '{}'", name);
  Id sel(H5Screate(H5S_SCALAR));
  if (!writer) H5Sselect_none(sel);
  std::string buf = text.empty() ? std::string(1, '\0') : text;
  check(H5Dwrite(ds, type, sel, sel, dxpl, buf.data()) >= 0, "HDF5: cannot write dataset '{}'", name);
}

static std::string read_text(hid_t f, const char* name, const std::string& file) {
  check(H5Lexists(f, name, H5P_DEFAULT) > 0, "{}: missing dataset '{}'", file, name);
  Id ds(H5Dopen2(f, name, H5P_DEFAULT));
  Id type(H5Dget_type(ds));
  check(ds.valid() && H5Tget_class(type) == H5T_STRING, "{}: '{}' is not a string dataset", file, name);
  // One fixed-length string no longer than the file (as write_text makes it): H5Dread writes
  // every element into the buffer, a variable-length one as a pointer, and the size is the file's.
  Id space(H5Dget_space(ds)), fid(H5Iget_file_id(ds));
  hsize_t file_size = 0;
  check(H5Tis_variable_str(type) == 0 && H5Sget_simple_extent_npoints(space) == 1 &&
            H5Fget_filesize(fid, &file_size) >= 0 && H5Tget_size(type) <= file_size,
        "{}: '{}' is not one fixed-length string (corrupted file?)", file, name);
  std::string s(H5Tget_size(type), '\0');
  check(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data()) >= 0, "{}: cannot read '{}'", file, name);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// A stored model size, range-checked before it becomes an int: inspect and generate build a model
// from these, so a corrupted file must not ask for 2^40 parameters (or wrap 2^32 + 1 to 1).
static int read_model_size(hid_t g, const char* name, const std::string& path, int64_t hi) {
  int64_t v = h5::read_attr_i64(g, name, path);
  usage_check(v >= 1 && v <= hi, "checkpoint '{}': config/{} = {} is outside [1, {}] (corrupted file?)", path, name, v,
              hi);
  return static_cast<int>(v);
}

void check_tensor_shape(hid_t f, hid_t ds, const std::string& path, const std::string& dataset) {
  Id sp(H5Dget_space(ds)), type(H5Dget_type(ds));
  hsize_t dims[2] = {0, 0}, file_size = 0;
  int nd = sp.valid() ? H5Sget_simple_extent_ndims(sp) : -1;
  bool ok = nd >= 1 && nd <= 2 && H5Sget_simple_extent_dims(sp, dims, nullptr) == nd &&
            H5Tget_class(type) == H5T_FLOAT && H5Fget_filesize(f, &file_size) >= 0;
  const hsize_t most = file_size / 4;
  ok = ok && dims[0] <= most && (nd == 1 || (dims[1] <= most && (dims[1] == 0 || dims[0] <= most / dims[1])));
  usage_check(ok, "checkpoint '{}': dataset '{}' is not a 1-D or 2-D float tensor that fits in the file (corrupted?)",
              path, dataset);
}

// RoPE scaling in config/ (a scaled model only; a file without rope_scaling is plain RoPE).
static void write_rope_scaling(hid_t g, const RopeScaling& r) {
  if (!r.enabled()) return;
  h5::write_attr_str(g, "rope_scaling", rope_scaling_name(r.type));
  write_attr_f64(g, "rope_factor", r.factor);
  h5::write_attr_i64(g, "rope_original_max_pos", r.original_max_pos);
  write_attr_f64(g, "rope_low_freq_factor", r.low_freq_factor);
  write_attr_f64(g, "rope_high_freq_factor", r.high_freq_factor);
  write_attr_f64(g, "rope_beta_fast", r.beta_fast);
  write_attr_f64(g, "rope_beta_slow", r.beta_slow);
  write_attr_f64(g, "rope_attention_factor", r.attention_factor);
}

static RopeScaling read_rope_scaling(hid_t g, const std::string& path) {
  RopeScaling r;
  if (!h5::has_attr(g, "rope_scaling")) return r;
  const std::string type = h5::read_attr_str(g, "rope_scaling", path);
  const auto t = rope_scaling_type(type);
  usage_check(t && *t != RopeScalingType::none, "checkpoint '{}': config/rope_scaling '{}' is not llama3 or yarn", path,
              type);
  r.type = *t;
  r.factor = read_attr_f64(g, "rope_factor", path);
  r.original_max_pos = read_model_size(g, "rope_original_max_pos", path, 1 << 30);
  r.low_freq_factor = read_attr_f64(g, "rope_low_freq_factor", path);
  r.high_freq_factor = read_attr_f64(g, "rope_high_freq_factor", path);
  r.beta_fast = read_attr_f64(g, "rope_beta_fast", path);
  r.beta_slow = read_attr_f64(g, "rope_beta_slow", path);
  r.attention_factor = read_attr_f64(g, "rope_attention_factor", path);
  check_rope_scaling(r, fmt::format("checkpoint '{}' (corrupted file?)", path));
  return r;
}

int read_format_version(hid_t f, const std::string& path) {
  const int64_t fv = h5::read_attr_i64(f, "format_version", path);
  usage_check(fv >= 1 && fv <= kCheckpointFormatVersion,
              "'{}': checkpoint format version {} (this mpitron reads 1 to {}: a newer mpitron wrote it)", path, fv,
              kCheckpointFormatVersion);
  return static_cast<int>(fv);
}

// Metadata from an open file (any access mode; every read here is independent).
CheckpointMeta read_meta(hid_t f, const std::string& path) {
  using h5::read_attr_i64;
  using h5::read_attr_str;
  usage_check(h5::has_attr(f, "format") && read_attr_str(f, "format", path) == kFormat,
              "'{}' is an HDF5 file but not an mpitron checkpoint (no format = \"{}\" attribute)", path, kFormat);
  read_format_version(f, path);
  CheckpointMeta m;
  m.version = read_attr_str(f, "mpitron_version", path);
  m.created = read_attr_str(f, "created", path);
  m.step = read_attr_i64(f, "step", path);
  m.optimizer_steps = read_attr_i64(f, "optimizer_steps", path);
  m.loss = read_attr_f64(f, "loss", path);
  {
    Id g(H5Gopen2(f, "config", H5P_DEFAULT));
    check(g.valid(), "{}: missing group 'config'", path);
    ModelConfig& c = m.model;
    c.name = read_attr_str(g, "name", path);
    std::string arch = read_attr_str(g, "arch", path);
    usage_check(arch == "gpt2" || arch == "llama", "checkpoint '{}': config/arch '{}' is not gpt2 or llama", path, arch);
    c.arch = arch == "llama" ? Arch::llama : Arch::gpt2;
    // Generous limits (llama3-405b: 126 layers, d_model 16384, d_ff 53248, vocab 128256).
    c.n_layer = read_model_size(g, "n_layer", path, 4096);
    c.n_head = read_model_size(g, "n_head", path, 4096);
    c.n_kv_head = read_model_size(g, "n_kv_head", path, c.n_head);
    c.d_model = read_model_size(g, "d_model", path, 1 << 18);
    c.d_ff = read_model_size(g, "d_ff", path, 1 << 20);
    c.vocab_size = read_model_size(g, "vocab_size", path, 1 << 24);
    c.seq_len = read_model_size(g, "seq_len", path, 1 << 22);
    // The head size where it is not d_model / n_head (absent: it is).
    if (h5::has_attr(g, "head_dim")) c.head_size = read_model_size(g, "head_dim", path, 1 << 16);
    usage_check((c.head_size > 0 || c.d_model % c.n_head == 0) && c.n_head % c.n_kv_head == 0,
                "checkpoint '{}': config d_model {}, n_head {}, n_kv_head {} do not divide (corrupted file?)", path,
                c.d_model, c.n_head, c.n_kv_head);
    c.tied_embeddings = read_attr_i64(g, "tied_embeddings", path) != 0;
    if (c.arch == Arch::llama) {
      c.norm_eps = static_cast<float>(read_attr_f64(g, "norm_eps", path));
      c.rope_theta = read_attr_f64(g, "rope_theta", path);
      const std::string pairing = read_attr_str(g, "rope_pairing", path);
      usage_check(pairing == kRopePairing, "checkpoint '{}': config/rope_pairing '{}' (this build rotates '{}' pairs)",
                  path, pairing, kRopePairing);
      c.rope_scaling = read_rope_scaling(g, path);
      // Qwen's additions (absent before them: plain LLaMA).
      c.qkv_bias = h5::has_attr(g, "qkv_bias") && read_attr_i64(g, "qkv_bias", path) != 0;
      c.qk_norm = h5::has_attr(g, "qk_norm") && read_attr_i64(g, "qk_norm", path) != 0;
    }
    if (h5::has_attr(g, "moe_n_experts")) {
      MoeConfig& e = c.moe;
      e.n_experts = read_model_size(g, "moe_n_experts", path, 1 << 16);
      e.top_k = read_model_size(g, "moe_top_k", path, e.n_experts);
      e.d_ff = read_model_size(g, "moe_expert_d_ff", path, 1 << 20);
      e.n_shared = static_cast<int>(read_attr_i64(g, "moe_n_shared_experts", path));
      e.layer_freq = read_model_size(g, "moe_layer_freq", path, 1 << 12);
      const std::string router = read_attr_str(g, "moe_router", path);
      usage_check(router == "softmax_topk" || router == "topk_softmax",
                  "checkpoint '{}': config/moe_router '{}' is not softmax_topk or topk_softmax", path, router);
      e.router = router == "softmax_topk" ? MoeRouter::softmax_topk : MoeRouter::topk_softmax;
      e.norm_topk_prob = read_attr_i64(g, "moe_norm_topk_prob", path) != 0;
      e.aux_loss_coef = read_attr_f64(g, "moe_aux_loss_coef", path);
      e.z_loss_coef = read_attr_f64(g, "moe_z_loss_coef", path);
      e.capacity_factor = read_attr_f64(g, "moe_capacity_factor", path);
      usage_check(e.n_shared >= 0 && e.n_shared <= 1 << 12, "checkpoint '{}': config/moe_n_shared_experts {} (corrupted file?)",
                  path, e.n_shared);
    }
    m.job_toml = read_text(g, "job_toml", path);
  }
  {
    Id g(H5Gopen2(f, "layout", H5P_DEFAULT));
    check(g.valid(), "{}: missing group 'layout'", path);
    m.layout.tp = static_cast<int>(read_attr_i64(g, "tp", path));
    m.layout.cp = static_cast<int>(read_attr_i64(g, "cp", path));
    m.layout.dp = static_cast<int>(read_attr_i64(g, "dp", path));
    m.layout.pp = static_cast<int>(read_attr_i64(g, "pp", path));
    m.zero = static_cast<int>(read_attr_i64(g, "zero", path));
    if (h5::has_attr(g, "pp_layers")) {
      Id a(H5Aopen(g, "pp_layers", H5P_DEFAULT));
      Id sp(H5Aget_space(a));
      hssize_t np = H5Sget_simple_extent_npoints(sp);  // one entry per (virtual) stage
      check(np >= 0 && np <= 65536, "{}: layout/pp_layers has {} entries (corrupted file?)", path, np);
      std::vector<int64_t> v(static_cast<size_t>(np));
      check(np == 0 || H5Aread(a, H5T_NATIVE_INT64, v.data()) >= 0, "{}: cannot read layout/pp_layers", path);
      m.pp_layers.assign(v.begin(), v.end());
    }
  }
  {
    Id g(H5Gopen2(f, "sampler", H5P_DEFAULT));
    check(g.valid(), "{}: missing group 'sampler'", path);
    m.sampler.epoch = read_attr_u64(g, "epoch", path);
    m.sampler.position = read_attr_u64(g, "position", path);
    m.sampler_dp = static_cast<int>(read_attr_i64(g, "dp", path));
    m.data_seed = read_attr_u64(g, "seed", path);
  }
  {
    Id g(H5Gopen2(f, "rng", H5P_DEFAULT));
    check(g.valid(), "{}: missing group 'rng'", path);
    m.train_seed = read_attr_u64(g, "train_seed", path);
  }
  m.tokenizer_json = read_text(f, "tokenizer_json", path);
  return m;
}

void write_meta(hid_t f, const CheckpointMeta& m, bool writer, hid_t dxpl) {
  h5::write_attr_str(f, "format", kFormat);
  h5::write_attr_i64(f, "format_version", kCheckpointFormatVersion);
  h5::write_attr_str(f, "mpitron_version", m.version);
  h5::write_attr_str(f, "created", m.created);
  h5::write_attr_i64(f, "step", m.step);
  h5::write_attr_i64(f, "optimizer_steps", m.optimizer_steps);
  write_attr_f64(f, "loss", m.loss);
  {
    Id g = make_group(f, "config");
    const ModelConfig& c = m.model;
    h5::write_attr_str(g, "name", c.name);
    h5::write_attr_str(g, "arch", c.arch == Arch::llama ? "llama" : "gpt2");
    h5::write_attr_i64(g, "n_layer", c.n_layer);
    h5::write_attr_i64(g, "n_head", c.n_head);
    h5::write_attr_i64(g, "n_kv_head", c.n_kv_head);
    h5::write_attr_i64(g, "d_model", c.d_model);
    h5::write_attr_i64(g, "d_ff", c.d_ff);
    h5::write_attr_i64(g, "vocab_size", c.vocab_size);
    h5::write_attr_i64(g, "padded_vocab_tp1", c.padded_vocab(1));
    h5::write_attr_i64(g, "seq_len", c.seq_len);
    h5::write_attr_i64(g, "tied_embeddings", c.tied_embeddings ? 1 : 0);
    if (c.arch == Arch::llama) {  // see kRopePairing (config.hpp): what an exporter needs to map q/k
      write_attr_f64(g, "norm_eps", c.norm_eps);
      write_attr_f64(g, "rope_theta", c.rope_theta);
      h5::write_attr_str(g, "rope_pairing", kRopePairing);
      write_rope_scaling(g, c.rope_scaling);
      h5::write_attr_i64(g, "qkv_bias", c.qkv_bias ? 1 : 0);
      h5::write_attr_i64(g, "qk_norm", c.qk_norm ? 1 : 0);
      if (c.head_size > 0) h5::write_attr_i64(g, "head_dim", c.head_size);
    }
    if (c.moe.enabled()) {  // mixture of experts (absent: dense)
      const MoeConfig& e = c.moe;
      h5::write_attr_i64(g, "moe_n_experts", e.n_experts);
      h5::write_attr_i64(g, "moe_top_k", e.top_k);
      h5::write_attr_i64(g, "moe_expert_d_ff", e.d_ff);
      h5::write_attr_i64(g, "moe_n_shared_experts", e.n_shared);
      h5::write_attr_i64(g, "moe_layer_freq", e.layer_freq);
      h5::write_attr_str(g, "moe_router", e.router == MoeRouter::softmax_topk ? "softmax_topk" : "topk_softmax");
      h5::write_attr_i64(g, "moe_norm_topk_prob", e.norm_topk_prob ? 1 : 0);
      write_attr_f64(g, "moe_aux_loss_coef", e.aux_loss_coef);
      write_attr_f64(g, "moe_z_loss_coef", e.z_loss_coef);
      write_attr_f64(g, "moe_capacity_factor", e.capacity_factor);
    }
    write_text(g, "job_toml", m.job_toml, writer, dxpl);
  }
  {
    Id g = make_group(f, "layout");
    h5::write_attr_i64(g, "world", int64_t{m.layout.tp} * m.layout.cp * m.layout.dp * m.layout.pp);
    h5::write_attr_i64(g, "tp", m.layout.tp);
    h5::write_attr_i64(g, "cp", m.layout.cp);
    h5::write_attr_i64(g, "dp", m.layout.dp);
    h5::write_attr_i64(g, "pp", m.layout.pp);
    h5::write_attr_i64(g, "zero", m.zero);
    if (!m.pp_layers.empty()) write_attr_i64s(g, "pp_layers", {m.pp_layers.begin(), m.pp_layers.end()});
  }
  {
    Id g = make_group(f, "sampler");
    write_attr_u64(g, "epoch", m.sampler.epoch);
    write_attr_u64(g, "position", m.sampler.position);
    h5::write_attr_i64(g, "dp", m.sampler_dp);
    write_attr_u64(g, "global_position", m.sampler.position * static_cast<uint64_t>(m.sampler_dp));
    write_attr_u64(g, "seed", m.data_seed);
  }
  {
    Id g = make_group(f, "rng");
    write_attr_u64(g, "train_seed", m.train_seed);
    h5::write_attr_str(g, "note",
                       "initialisation is counter-based from train_seed (no other RNG state); the data "
                       "order is the sampler's (seed, epoch) permutation");
  }
  write_text(f, "tokenizer_json", m.tokenizer_json, writer, dxpl);
}

}  // namespace mpitron::ckpt_meta

namespace mpitron {
namespace {

// The first number in j that is NaN or inf: its dotted path ("model.rope_theta") and value.
std::optional<std::pair<std::string, double>> non_finite_field(const nlohmann::json& j, const std::string& at) {
  if (j.is_number_float() && !std::isfinite(j.get<double>())) return std::pair{at, j.get<double>()};
  if (j.is_object() || j.is_array()) {
    size_t i = 0;
    for (auto it = j.begin(); it != j.end(); ++it, ++i) {
      const std::string key = j.is_object() ? it.key() : std::to_string(i);
      if (auto f = non_finite_field(*it, at.empty() ? key : at + "." + key)) return f;
    }
  }
  return std::nullopt;
}

}  // namespace

void check_meta_savable(const CheckpointMeta& meta) {
  const nlohmann::json j = ckpt_meta::meta_to_json(meta);
  if (const auto f = non_finite_field(j, ""))
    usage_fail("this run's checkpoints could not be saved: their metadata field '{}' would be {}, and the metadata "
               "is JSON, which has no NaN or inf (for a model field, set the job key of that name to a finite value)",
               f->first, f->second);
  try {
    const CheckpointMeta back = ckpt_meta::meta_from_json(nlohmann::json::parse(j.dump()));
    (void)back;
  } catch (const nlohmann::json::exception& e) {
    usage_fail("this run's checkpoints could not be saved: their metadata does not read back ({})", e.what());
  }
}

}  // namespace mpitron
