// Machine profiles: lookups and their TOML (plan/profile.hpp); the datasheet profiles are in
// datasheet_profiles.cpp.
#include "mpitron/plan/profile.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "mpitron/config/toml_parse.hpp"
#include "mpitron/config/value_rules.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

// The collectives the step-time model prices (collective_factor) and `mpitron calibrate` measures.
constexpr std::string_view kCollectives[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv",
                                             "all_to_all"};
// The top-level tables of a profile file.
constexpr std::string_view kProfileTables[] = {"machine", "grid", "rates", "concurrency", "comm"};

// Position of x on a sorted axis in log space: index i and weight w of axis[i+1] (clamped).
std::pair<size_t, double> locate(const std::vector<double>& axis, double x) {
  if (axis.size() < 2 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  size_t i = 0;
  while (axis[i + 1] < x) ++i;
  return {i, std::log(x / axis[i]) / std::log(axis[i + 1] / axis[i])};
}

double lerp_log(double a, double b, double w) { return std::exp((1 - w) * std::log(a) + w * std::log(b)); }

double interp1(const std::vector<double>& axis, const std::vector<double>& v, double x) {
  if (v.size() == 1) return v[0];
  auto [i, w] = locate(axis, x);
  return lerp_log(v[i], v[i + 1], w);
}

double nearest_scale(const std::vector<int>& active, const std::vector<double>& scale, int k) {
  // Linear in k between measured points; beyond the last, the rate shrinks as k grows (each rank's
  // share of the node).
  if (active.empty()) return 1.0;
  if (k <= active.front()) return scale.front();
  for (size_t i = 0; i + 1 < active.size(); ++i)
    if (k <= active[i + 1]) {
      double w = double(k - active[i]) / (active[i + 1] - active[i]);
      return (1 - w) * scale[i] + w * scale[i + 1];
    }
  return scale.back() * active.back() / k;
}

}  // namespace

double collective_factor(const std::string& op, int n) {
  if (n <= 1) return 0.0;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return double(n - 1) / n;
  return 1.0;
}

const MachineProfile::Rates& MachineProfile::rates_for(int threads) const {
  check(!rates.empty(), "profile: no compute rates");
  if (threads <= 0) return rates.front();
  const Rates* best = &rates.front();
  for (const Rates& r : rates)
    if (std::abs(std::log2(double(r.threads) / threads)) < std::abs(std::log2(double(best->threads) / threads))) best = &r;
  return *best;
}

double MachineProfile::gemm_gflops(double M, double N, double K, bool backward, bool bf16, int threads) const {
  const Rates& rt = rates_for(threads);
  return gemm_interp(bf16 && has_bf16() ? (backward ? rt.gemm_bwd_bf16 : rt.gemm_fwd_bf16)
                                        : (backward ? rt.gemm_bwd_f32 : rt.gemm_fwd_f32),
                     M, N, K);
}

double MachineProfile::fp8_gemm_gflops(double M, double N, double K, bool backward) const {
  check(has_fp8(), "profile of {}: no FP8 GEMM rates", device);
  const Rates& rt = rates.front();
  return gemm_interp(backward ? rt.gemm_bwd_fp8 : rt.gemm_fwd_fp8, M, N, K);
}

double MachineProfile::gemm_interp(const std::vector<double>& v, double M, double N, double K) const {
  check(!v.empty() && v.size() == gemm_m.size() * gemm_n.size() * gemm_k.size(), "profile: the GEMM grid is empty or malformed");
  auto [im, wm] = locate(gemm_m, M);
  auto [in, wn] = locate(gemm_n, N);
  auto [ik, wk] = locate(gemm_k, K);
  const size_t nn = gemm_n.size(), nk = gemm_k.size();
  auto at = [&](size_t a, size_t b, size_t c) {
    a = std::min(a, gemm_m.size() - 1), b = std::min(b, nn - 1), c = std::min(c, nk - 1);
    return std::log(v[(a * nn + b) * nk + c]);
  };
  double r = 0;
  for (int da = 0; da < 2; ++da)
    for (int db = 0; db < 2; ++db)
      for (int dc = 0; dc < 2; ++dc)
        r += (da ? wm : 1 - wm) * (db ? wn : 1 - wn) * (dc ? wk : 1 - wk) * at(im + da, in + db, ik + dc);
  return std::exp(r);
}

double MachineProfile::attention_gflops(double T, bool backward, int threads) const {
  const Rates& rt = rates_for(threads);
  check(!attn_t.empty(), "profile: no attention rates");
  return interp1(attn_t, backward ? rt.attn_bwd : rt.attn_fwd, T);
}

double MachineProfile::stream_gbs(int threads, double act_bytes) const {
  const Rates& rt = rates_for(threads);
  if (act_bytes <= 0 || rt.stream_gbs_by_size.empty()) return rt.stream_gbs;
  return interp1(stream_bytes, rt.stream_gbs_by_size, act_bytes);
}

double MachineProfile::adamw_seconds(double elements, int threads) const {
  const Rates& rt = rates_for(threads);
  return rt.adamw_gbs > 0 ? elements * Rates::kAdamwBytesPerParam / (rt.adamw_gbs * 1e9)
                          : elements * 32 / (rt.stream_gbs * 1e9);
}

double MachineProfile::flat_gbs(int threads) const {
  const Rates& rt = rates_for(threads);
  return rt.flat_gbs > 0 ? rt.flat_gbs : rt.stream_gbs;
}

double MachineProfile::peak_gflops() const {
  if (datasheet_peak_gflops > 0) return datasheet_peak_gflops;
  double best = 0;
  for (const Rates& r : rates)
    for (const auto* v : {&r.gemm_fwd_f32, &r.gemm_bwd_f32, &r.gemm_fwd_bf16, &r.gemm_bwd_bf16})
      for (double x : *v) best = std::max(best, x);
  return best;
}

double MachineProfile::compute_factor(int k) const { return nearest_scale(active, compute_scale, k); }
double MachineProfile::stream_factor(int k) const { return nearest_scale(active, stream_scale, k); }
double MachineProfile::overlap_factor(int k) const {
  // Beyond the measured counts it stays at the last (the scale-down rule is for rates).
  return k >= active.back() ? overlap_slowdown.back() : nearest_scale(active, overlap_slowdown, k);
}

bool MachineProfile::has_inter_node() const {
  return std::any_of(comm.begin(), comm.end(), [](const CollectiveFit& f) { return f.inter_node; });
}

const CollectiveFit* MachineProfile::nearest_fit(const std::string& op, int n, int k, bool inter) const {
  const bool want_inter = inter && has_inter_node();
  const CollectiveFit* best = nullptr;
  double best_d = 1e300;
  for (const CollectiveFit& f : comm) {
    if (f.op != op || f.inter_node != want_inter) continue;
    // Group size first (log distance), then how busy the node was.
    double d = std::abs(std::log2(double(f.group) / n)) * 100 + std::abs(std::log2(double(f.active) / std::max(1, k)));
    if (d < best_d) best_d = d, best = &f;
  }
  return best;
}

double MachineProfile::collective_s(const std::string& op, int n, double bytes, int k, bool inter) const {
  if (n <= 1 || bytes <= 0) return 0.0;
  const CollectiveFit* f = nearest_fit(op, n, k, inter);
  if (!f && op == "all_to_all") f = nearest_fit("all_gather", n, k, inter);
  check(f != nullptr, "profile: no measurement of {} (calibrate measures {})", op, fmt::join(kCollectives, ", "));
  const double fac = op == "sendrecv" || op == "broadcast" ? 1.0 : collective_factor(op, n);
  return f->alpha_s + fac * bytes / (f->busbw_gbs * 1e9);
}

// ---- TOML ----

namespace {

std::string arr(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.6g}", i ? ", " : "", v[i]);
  return s + "]";
}
std::string arr(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", v[i]);
  return s + "]";
}
std::string str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o + "\"";
}

}  // namespace

std::string profile_to_toml(const MachineProfile& p) {
  std::string o = "# mpitron machine profile (`mpitron calibrate`; read by `plan --profile` and train.profile)\n";
  o += "# rates are per rank; GFLOP/s and GB/s are 1e9\n\n[machine]\n";
  o += fmt::format("source = {}\ndevice = {}\nbackend = {}\nmpi = {}\ntransports = {}\ndate = {}\nnote = {}\n",
                   str(p.source), str(p.device), str(p.backend), str(p.mpi), str(p.transports), str(p.date), str(p.note));
  o += fmt::format("cores_per_node = {}\nnodes = {}\nranks = {}\nseconds = {:.1f}\n", p.cores_per_node, p.nodes,
                   p.ranks, p.seconds);
  if (p.datasheet_peak_gflops > 0) o += fmt::format("peak_gflops = {:.6g}\n", p.datasheet_peak_gflops);
  o += "\n";
  o += "# the grids: GEMM out[m,n] = in[m,k] w[n,k]^T; causal attention by sequence length t (4*t*t*hd FLOPs per\n"
       "# head and sequence forward)\n[grid]\n";
  o += fmt::format("m = {}\nn = {}\nk = {}\nattn_t = {}\nattn_hd = {}\n", arr(p.gemm_m), arr(p.gemm_n), arr(p.gemm_k),
                   arr(p.attn_t), p.attn_hd);
  if (!p.stream_bytes.empty()) o += fmt::format("stream_bytes = {}\n", arr(p.stream_bytes));
  o += "\n";
  o += "# one rank alone with `threads` threads: GEMM GFLOP/s flattened [m][n][k] (bwd: the two backward GEMMs,\n"
       "# 2x the forward FLOPs), attention GFLOP/s per attn_t, elementwise GB/s of the bytes read and written\n"
       "# (stream_gbs on activations larger than the caches, stream_gbs_by_size per [grid] stream_bytes); the\n"
       "# optimizer's kernels over arrays larger than the caches: adamw_gbs of its 7 fp32 arrays, flat_gbs of the\n"
       "# one-pass ones (zeroing, sum of squares, axpy)\n";
  for (const MachineProfile::Rates& r : p.rates) {
    o += fmt::format("[[rates]]\nthreads = {}\ngemm_fwd_f32 = {}\ngemm_bwd_f32 = {}\n", r.threads, arr(r.gemm_fwd_f32),
                     arr(r.gemm_bwd_f32));
    if (!r.gemm_fwd_bf16.empty())
      o += fmt::format("gemm_fwd_bf16 = {}\ngemm_bwd_bf16 = {}\n", arr(r.gemm_fwd_bf16), arr(r.gemm_bwd_bf16));
    if (!r.gemm_fwd_fp8.empty())
      o += fmt::format("gemm_fwd_fp8 = {}\ngemm_bwd_fp8 = {}\n", arr(r.gemm_fwd_fp8), arr(r.gemm_bwd_fp8));
    o += fmt::format("attn_fwd = {}\nattn_bwd = {}\nstream_gbs = {:.6g}\n", arr(r.attn_fwd), arr(r.attn_bwd), r.stream_gbs);
    if (!r.stream_gbs_by_size.empty()) o += fmt::format("stream_gbs_by_size = {}\n", arr(r.stream_gbs_by_size));
    if (r.adamw_gbs > 0) o += fmt::format("adamw_gbs = {:.6g}\n", r.adamw_gbs);
    if (r.flat_gbs > 0) o += fmt::format("flat_gbs = {:.6g}\n", r.flat_gbs);
    o += "\n";
  }
  o += "# k ranks of a node computing at once (each with cores/k threads): per-rank rate vs one such rank alone\n[concurrency]\n";
  o += fmt::format("active = {}\ncompute_scale = {}\nstream_scale = {}\noverlap_slowdown = {}\n", arr(p.active),
                   arr(p.compute_scale), arr(p.stream_scale), arr(p.overlap_slowdown));
  o += "\n# one call of S bytes: alpha + factor(op, group) * S / busbw (nccl-tests' busbw factors)\n";
  for (const CollectiveFit& f : p.comm)
    o += fmt::format("[[comm]]\nop = {}\ngroup = {}\nactive = {}\ninter_node = {}\nalpha_us = {:.4g}\nbusbw_gbs = {:.6g}\n",
                     str(f.op), f.group, f.active, f.inter_node ? "true" : "false", f.alpha_s * 1e6, f.busbw_gbs);
  return o;
}

namespace {

// A profile's values, each checked where it is read with the rules every value from outside meets
// (config/value_rules.hpp). Messages start "FILE:LINE: " (the line of the value, or of its table
// when the key is missing) and name the table and key: "[grid] m[2]", "[[rates]] entry 1: threads".
class ProfileReader {
 public:
  explicit ProfileReader(std::string path) : path_(std::move(path)) {}

  // "FILE:LINE" of a node (the line where it starts), "FILE" when toml++ does not know it.
  std::string where(const toml::node& n) const {
    const toml::source_position& b = n.source().begin;
    return b.line ? fmt::format("{}:{}", path_, b.line) : path_;
  }
  std::string at(const toml::node& n, const std::string& what) const { return where(n) + ": " + what; }
  const std::string& path() const { return path_; }

  // Keys of a table outside `allowed`: refused, naming the first one and those allowed.
  void only_keys(const toml::table& t, const std::string& table,
                 std::initializer_list<std::string_view> allowed) const {
    for (const auto& [k, v] : t)
      if (std::find(allowed.begin(), allowed.end(), k.str()) == allowed.end())
        usage_fail("{}: unknown key '{}' (allowed: {})", at(v, table), k.str(), fmt::join(allowed, ", "));
  }

  const toml::node* find(const toml::table& t, const std::string& table, std::string_view key, bool required) const {
    const toml::node* n = t.get(key);
    if (!n && required)
      usage_fail("{}: {} is missing (write the file with `mpitron calibrate`)", where(t), label(table, key));
    return n;
  }

  double number(const toml::table& t, const std::string& table, std::string_view key, const Range& r) const {
    const toml::node& n = *find(t, table, key, true);
    return number_at(n, at(n, label(table, key)), r);
  }
  int integer(const toml::table& t, const std::string& table, std::string_view key, const Range& r,
              std::optional<int> otherwise = {}) const {
    const toml::node* n = find(t, table, key, !otherwise);
    return n ? integer_at(*n, at(*n, label(table, key)), r) : *otherwise;
  }
  std::string text(const toml::table& t, const std::string& table, std::string_view key, bool required = false,
                   const std::string& otherwise = "") const {
    const toml::node* n = find(t, table, key, required);
    if (!n) return otherwise;
    if (const auto* s = n->as_string()) return s->get();
    value_refused(at(*n, label(table, key)), shown(*n), "a string");
  }
  bool flag(const toml::table& t, const std::string& table, std::string_view key, bool otherwise) const {
    const toml::node* n = find(t, table, key, false);
    if (!n) return otherwise;
    if (const auto* b = n->as_boolean()) return b->get();
    value_refused(at(*n, label(table, key)), shown(*n), "true or false");
  }
  // An array of numbers, each in the range; empty when optional and absent.
  std::vector<double> numbers(const toml::table& t, const std::string& table, std::string_view key, const Range& r,
                              bool required = true) const {
    std::vector<double> v;
    for_each_item(t, table, key, required, [&](const toml::node& e, const std::string& what) {
      v.push_back(number_at(e, what, r));
    });
    return v;
  }
  std::vector<int> integers(const toml::table& t, const std::string& table, std::string_view key,
                            const Range& r) const {
    std::vector<int> v;
    for_each_item(t, table, key, true, [&](const toml::node& e, const std::string& what) {
      v.push_back(integer_at(e, what, r));
    });
    return v;
  }

  // "[grid] m", "[[rates]] entry 2: stream_gbs".
  static std::string label(const std::string& table, std::string_view key) {
    return fmt::format("{}{}{}", table, table.back() == ']' ? " " : ": ", key);
  }

  // A value as TOML writes it, for messages (long strings cut).
  static std::string shown(const toml::node& n) {
    if (n.is_array()) return "[...]";
    if (n.is_table()) return "{...}";
    std::string s;
    if (const auto* str = n.as_string()) {
      s = "\"" + str->get() + "\"";
    } else {
      std::ostringstream o;
      n.visit([&](const auto& v) { o << v; });
      s = o.str();
    }
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
  }

 private:
  std::string path_;

  static std::optional<double> as_number(const toml::node& n) {
    if (const auto* i = n.as_integer()) return static_cast<double>(i->get());
    if (const auto* f = n.as_floating_point()) return f->get();
    return std::nullopt;
  }
  static double number_at(const toml::node& n, const std::string& what, const Range& r) {
    const std::optional<double> v = as_number(n);
    if (!v) value_refused(what, shown(n), r.text(false));
    return checked_float(what, *v, r, shown(n));
  }
  static int integer_at(const toml::node& n, const std::string& what, const Range& r) {
    const std::optional<double> v = as_number(n);
    if (!v) value_refused(what, shown(n), integer_rule(r.within<int>()));
    return checked_int<int>(what, *v, r, shown(n));
  }
  template <class F>
  void for_each_item(const toml::table& t, const std::string& table, std::string_view key, bool required, F&& f) const {
    const toml::node* n = find(t, table, key, required);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a) value_refused(at(*n, label(table, key)), shown(*n), "an array of numbers");
    for (size_t i = 0; i < a->size(); ++i)
      f((*a)[i], at((*a)[i], fmt::format("{}[{}]", label(table, key), i)));
  }
};

// A grid axis: one value at least, increasing (the lookups interpolate between neighbours).
void check_axis(const ProfileReader& r, const toml::table& t, const std::string& table, std::string_view key,
                const std::vector<double>& a) {
  const toml::node& n = *t.get(key);
  usage_check(!a.empty(), "{}: is empty (one value at least)", r.at(n, ProfileReader::label(table, key)));
  for (size_t i = 1; i < a.size(); ++i)
    usage_check(a[i] > a[i - 1], "{}: must be increasing ({} after {})", r.at(n, ProfileReader::label(table, key)),
                a[i], a[i - 1]);
}

// An array that needs one entry per entry of another.
void check_size(const ProfileReader& r, const toml::table& t, const std::string& table, std::string_view key,
                size_t have, size_t want, const std::string& per) {
  if (have != want)
    usage_fail("{}: has {} entries, needs {} (one per {})", r.at(*t.get(key), ProfileReader::label(table, key)), have,
               want, per);
}

// A top-level table of the profile: refused when it is another kind of value.
const toml::table& section(const ProfileReader& r, const toml::table& root, std::string_view name) {
  const toml::node* n = root.get(name);
  if (!n) usage_fail("{}: [{}] is missing (write the file with `mpitron calibrate`)", r.path(), name);
  const toml::table* t = n->as_table();
  if (!t) usage_fail("{}: {} must be a table ([{}])", r.where(*n), name, name);
  return *t;
}

// [[rates]] and [[comm]]: an array of tables (absent: empty when optional).
const toml::array* entries(const ProfileReader& r, const toml::table& root, std::string_view name, bool required) {
  const toml::node* n = root.get(name);
  const toml::array* a = n ? n->as_array() : nullptr;
  if (n && (!a || !(a->empty() || a->is_array_of_tables())))
    usage_fail("{}: {} must be [[{}]] tables (an array of tables)", r.where(*n), name, name);
  if (required && (!a || a->empty()))
    usage_fail("{}: no [[{}]] tables (write the file with `mpitron calibrate`)", r.path(), name);
  return a;
}

}  // namespace

MachineProfile read_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  usage_check(static_cast<bool>(in), "cannot read the profile {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  usage_check(!in.bad(), "cannot read the profile {}", path);
  const toml::table root = parse_toml(ss.str(), path);
  const ProfileReader r(path);

  for (const auto& [k, v] : root)
    if (std::find(std::begin(kProfileTables), std::end(kProfileTables), k.str()) == std::end(kProfileTables))
      usage_fail("{}: unknown {} (allowed: [machine], [grid], [[rates]], [concurrency], [[comm]])", r.where(v),
                 v.is_table() || v.is_array_of_tables() ? fmt::format("table [{}]", k.str())
                                                        : fmt::format("top-level key '{}'", k.str()));

  MachineProfile p;
  const std::string mach = "[machine]";
  const toml::table& m = section(r, root, "machine");
  r.only_keys(m, mach, {"source", "device", "backend", "mpi", "transports", "date", "note", "cores_per_node", "nodes",
                        "ranks", "seconds", "peak_gflops"});
  p.source = r.text(m, mach, "source", false, p.source);
  p.device = r.text(m, mach, "device", true);
  p.backend = r.text(m, mach, "backend", false, p.backend);
  p.mpi = r.text(m, mach, "mpi");
  p.transports = r.text(m, mach, "transports");
  p.date = r.text(m, mach, "date");
  p.note = r.text(m, mach, "note");
  p.cores_per_node = r.integer(m, mach, "cores_per_node", at_least(1));
  p.nodes = r.integer(m, mach, "nodes", at_least(1));
  p.ranks = r.integer(m, mach, "ranks", at_least(1));
  p.seconds = r.number(m, mach, "seconds", at_least(0));
  if (m.get("peak_gflops")) p.datasheet_peak_gflops = r.number(m, mach, "peak_gflops", above(0));

  // Rates and sizes are divided by and their logarithms taken: finite and > 0.
  const Range positive = above(0);
  const std::string grid = "[grid]";
  const toml::table& g = section(r, root, "grid");
  r.only_keys(g, grid, {"m", "n", "k", "attn_t", "attn_hd", "stream_bytes"});
  p.gemm_m = r.numbers(g, grid, "m", positive);
  p.gemm_n = r.numbers(g, grid, "n", positive);
  p.gemm_k = r.numbers(g, grid, "k", positive);
  p.attn_t = r.numbers(g, grid, "attn_t", positive);
  p.attn_hd = r.number(g, grid, "attn_hd", positive);
  check_axis(r, g, grid, "m", p.gemm_m);
  check_axis(r, g, grid, "n", p.gemm_n);
  check_axis(r, g, grid, "k", p.gemm_k);
  check_axis(r, g, grid, "attn_t", p.attn_t);
  if (g.contains("stream_bytes")) {
    p.stream_bytes = r.numbers(g, grid, "stream_bytes", positive);
    check_axis(r, g, grid, "stream_bytes", p.stream_bytes);
  }
  // One GEMM rate per cell: a grid with more cells than any file lists is refused before the
  // product could overflow.
  const double cells_limit = 1e9;
  usage_check(double(p.gemm_m.size()) * double(p.gemm_n.size()) * double(p.gemm_k.size()) <= cells_limit,
              "{}: the grid m x n x k has {} x {} x {} cells (at most {:g})", r.where(g), p.gemm_m.size(),
              p.gemm_n.size(), p.gemm_k.size(), cells_limit);
  const size_t cells = p.gemm_m.size() * p.gemm_n.size() * p.gemm_k.size();
  const std::string cells_per = fmt::format("cell of the grid m x n x k, {} x {} x {}", p.gemm_m.size(),
                                            p.gemm_n.size(), p.gemm_k.size());

  const toml::array& rates = *entries(r, root, "rates", true);
  for (size_t i = 0; i < rates.size(); ++i) {
    const toml::table& t = *rates[i].as_table();
    const std::string e = fmt::format("[[rates]] entry {}", i + 1);
    r.only_keys(t, e, {"threads", "gemm_fwd_f32", "gemm_bwd_f32", "gemm_fwd_bf16", "gemm_bwd_bf16", "gemm_fwd_fp8",
                       "gemm_bwd_fp8", "attn_fwd", "attn_bwd", "stream_gbs", "stream_gbs_by_size", "adamw_gbs", "flat_gbs"});
    MachineProfile::Rates x;
    x.threads = r.integer(t, e, "threads", at_least(1));
    x.gemm_fwd_f32 = r.numbers(t, e, "gemm_fwd_f32", positive);
    x.gemm_bwd_f32 = r.numbers(t, e, "gemm_bwd_f32", positive);
    x.gemm_fwd_bf16 = r.numbers(t, e, "gemm_fwd_bf16", positive, false);
    x.gemm_bwd_bf16 = r.numbers(t, e, "gemm_bwd_bf16", positive, false);
    check_size(r, t, e, "gemm_fwd_f32", x.gemm_fwd_f32.size(), cells, cells_per);
    check_size(r, t, e, "gemm_bwd_f32", x.gemm_bwd_f32.size(), cells, cells_per);
    usage_check(t.contains("gemm_fwd_bf16") == t.contains("gemm_bwd_bf16"),
                "{}: gemm_fwd_bf16 and gemm_bwd_bf16 come together", r.at(t, e));
    if (t.contains("gemm_fwd_bf16")) {
      check_size(r, t, e, "gemm_fwd_bf16", x.gemm_fwd_bf16.size(), cells, cells_per);
      check_size(r, t, e, "gemm_bwd_bf16", x.gemm_bwd_bf16.size(), cells, cells_per);
    }
    x.gemm_fwd_fp8 = r.numbers(t, e, "gemm_fwd_fp8", positive, false);
    x.gemm_bwd_fp8 = r.numbers(t, e, "gemm_bwd_fp8", positive, false);
    usage_check(t.contains("gemm_fwd_fp8") == t.contains("gemm_bwd_fp8"),
                "{}: gemm_fwd_fp8 and gemm_bwd_fp8 come together", r.at(t, e));
    if (t.contains("gemm_fwd_fp8")) {
      check_size(r, t, e, "gemm_fwd_fp8", x.gemm_fwd_fp8.size(), cells, cells_per);
      check_size(r, t, e, "gemm_bwd_fp8", x.gemm_bwd_fp8.size(), cells, cells_per);
    }
    x.attn_fwd = r.numbers(t, e, "attn_fwd", positive);
    x.attn_bwd = r.numbers(t, e, "attn_bwd", positive);
    check_size(r, t, e, "attn_fwd", x.attn_fwd.size(), p.attn_t.size(), "[grid] attn_t");
    check_size(r, t, e, "attn_bwd", x.attn_bwd.size(), p.attn_t.size(), "[grid] attn_t");
    x.stream_gbs = r.number(t, e, "stream_gbs", positive);
    // One rate per [grid] stream_bytes, both or neither.
    x.stream_gbs_by_size = r.numbers(t, e, "stream_gbs_by_size", positive, false);
    usage_check(t.contains("stream_gbs_by_size") == !p.stream_bytes.empty(), "{}: {}", r.at(t, e),
                p.stream_bytes.empty() ? "stream_gbs_by_size needs [grid] stream_bytes (the sizes it is measured at)"
                                       : "stream_gbs_by_size is missing ([grid] has stream_bytes)");
    if (!p.stream_bytes.empty())
      check_size(r, t, e, "stream_gbs_by_size", x.stream_gbs_by_size.size(), p.stream_bytes.size(), "[grid] stream_bytes");
    // Optional (profiles written before they were measured): 0, the optimizer at stream_gbs.
    if (t.contains("adamw_gbs")) x.adamw_gbs = r.number(t, e, "adamw_gbs", positive);
    if (t.contains("flat_gbs")) x.flat_gbs = r.number(t, e, "flat_gbs", positive);
    usage_check(i == 0 || x.gemm_fwd_bf16.empty() == p.rates.front().gemm_fwd_bf16.empty(),
                "{}: bf16 GEMM rates in some [[rates]] tables but not in others (entry 1 {} them)", r.at(t, e),
                i > 0 && p.rates.front().gemm_fwd_bf16.empty() ? "lacks" : "has");
    p.rates.push_back(std::move(x));
  }

  const std::string conc = "[concurrency]";
  const toml::table& c = section(r, root, "concurrency");
  r.only_keys(c, conc, {"active", "compute_scale", "stream_scale", "overlap_slowdown"});
  p.active = r.integers(c, conc, "active", at_least(1));
  usage_check(!p.active.empty(), "{}: is empty (one value at least)", r.at(*c.get("active"), conc + " active"));
  for (size_t i = 1; i < p.active.size(); ++i)
    usage_check(p.active[i] > p.active[i - 1], "{}: must be increasing ({} after {})",
                r.at(*c.get("active"), conc + " active"), p.active[i], p.active[i - 1]);
  p.compute_scale = r.numbers(c, conc, "compute_scale", positive);
  p.stream_scale = r.numbers(c, conc, "stream_scale", positive);
  p.overlap_slowdown = r.numbers(c, conc, "overlap_slowdown", positive);
  check_size(r, c, conc, "compute_scale", p.compute_scale.size(), p.active.size(), "[concurrency] active");
  check_size(r, c, conc, "stream_scale", p.stream_scale.size(), p.active.size(), "[concurrency] active");
  check_size(r, c, conc, "overlap_slowdown", p.overlap_slowdown.size(), p.active.size(), "[concurrency] active");

  if (const toml::array* comm = entries(r, root, "comm", false)) {
    for (size_t i = 0; i < comm->size(); ++i) {
      const toml::table& t = *(*comm)[i].as_table();
      const std::string e = fmt::format("[[comm]] entry {}", i + 1);
      r.only_keys(t, e, {"op", "group", "active", "inter_node", "alpha_us", "busbw_gbs"});
      CollectiveFit f;
      f.op = r.text(t, e, "op", true);
      if (std::find(std::begin(kCollectives), std::end(kCollectives), f.op) == std::end(kCollectives))
        value_refused(r.at(*t.get("op"), ProfileReader::label(e, "op")), f.op,
                      fmt::format("{}", fmt::join(kCollectives, ", ")));
      f.group = r.integer(t, e, "group", at_least(2));
      f.active = r.integer(t, e, "active", at_least(1), 1);
      f.inter_node = r.flag(t, e, "inter_node", false);
      f.alpha_s = r.number(t, e, "alpha_us", at_least(0)) * 1e-6;
      f.busbw_gbs = r.number(t, e, "busbw_gbs", positive);
      p.comm.push_back(f);
    }
  }
  return p;
}

void write_profile(const MachineProfile& p, const std::string& path) {
  // Whole or not at all: written beside, renamed; on any failure the .tmp goes too.
  const std::string tmp = path + ".tmp";
  bool ok = false;
  {
    std::ofstream f(tmp);
    usage_check(static_cast<bool>(f), "cannot write {}", tmp);
    f << profile_to_toml(p);
    f.flush();
    ok = static_cast<bool>(f);
  }
  const int err = ok && std::rename(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
  if (err) {
    std::remove(tmp.c_str());
    usage_fail("cannot write the profile {}: {}", path, ok ? std::strerror(err) : "write failed (disk full?)");
  }
}

}  // namespace mpitron
