// Machine profiles: lookups, TOML, and the datasheet profiles (plan/profile.hpp).
#include "mpitron/plan/profile.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "mpitron/config/toml_guard.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

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
  const std::vector<double>& v = bf16 && has_bf16() ? (backward ? rt.gemm_bwd_bf16 : rt.gemm_fwd_bf16)
                                                    : (backward ? rt.gemm_bwd_f32 : rt.gemm_fwd_f32);
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
  check(f != nullptr, "profile: no measurement of {} (calibrate measures all_reduce, all_gather, reduce_scatter, "
                      "broadcast, sendrecv, all_to_all)", op);
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
  o += fmt::format("m = {}\nn = {}\nk = {}\nattn_t = {}\nattn_hd = {}\n\n", arr(p.gemm_m), arr(p.gemm_n), arr(p.gemm_k),
                   arr(p.attn_t), p.attn_hd);
  o += "# one rank alone with `threads` threads: GEMM GFLOP/s flattened [m][n][k] (bwd: the two backward GEMMs,\n"
       "# 2x the forward FLOPs), attention GFLOP/s per attn_t, elementwise GB/s of the bytes read and written\n";
  for (const MachineProfile::Rates& r : p.rates) {
    o += fmt::format("[[rates]]\nthreads = {}\ngemm_fwd_f32 = {}\ngemm_bwd_f32 = {}\n", r.threads, arr(r.gemm_fwd_f32),
                     arr(r.gemm_bwd_f32));
    if (!r.gemm_fwd_bf16.empty())
      o += fmt::format("gemm_fwd_bf16 = {}\ngemm_bwd_bf16 = {}\n", arr(r.gemm_fwd_bf16), arr(r.gemm_bwd_bf16));
    o += fmt::format("attn_fwd = {}\nattn_bwd = {}\nstream_gbs = {:.6g}\n\n", arr(r.attn_fwd), arr(r.attn_bwd), r.stream_gbs);
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

struct Reader {
  const toml::table& t;
  std::string path;
  const toml::node& node(const char* section, const char* key) const {
    const toml::node* n = t.at_path(std::string(section) + "." + key).node();
    if (!n) fail("{}: [{}] {} is missing (write the file with `mpitron calibrate`)", path, section, key);
    return *n;
  }
  double num(const char* s, const char* k) const {
    auto v = node(s, k).value<double>();
    if (!v) fail("{}: [{}] {} must be a number", path, s, k);
    return *v;
  }
  std::string text(const char* s, const char* k, bool required = false) const {
    const toml::node* n = t.at_path(std::string(s) + "." + k).node();
    if (!n) {
      if (required) fail("{}: [{}] {} is missing", path, s, k);
      return "";
    }
    auto v = n->value<std::string>();
    if (!v) fail("{}: [{}] {} must be a string", path, s, k);
    return *v;
  }
  std::vector<double> nums(const char* s, const char* k, bool required = true) const {
    const toml::node* n = t.at_path(std::string(s) + "." + k).node();
    if (!n) {
      if (required) fail("{}: [{}] {} is missing", path, s, k);
      return {};
    }
    const toml::array* a = n->as_array();
    if (!a) fail("{}: [{}] {} must be an array of numbers", path, s, k);
    std::vector<double> v;
    for (const auto& e : *a) {
      auto x = e.value<double>();
      if (!x || !(*x > 0) || !std::isfinite(*x)) fail("{}: [{}] {} holds '{}': every entry must be a positive number", path, s, k,
                                                      fmt::format("{}", e.value_or(0.0)));
      v.push_back(*x);
    }
    return v;
  }
};

void check_axis(const std::vector<double>& a, const std::string& path, const char* what) {
  check(!a.empty(), "{}: {} is empty", path, what);
  for (size_t i = 1; i < a.size(); ++i) check(a[i] > a[i - 1], "{}: {} must be increasing", path, what);
}

}  // namespace

MachineProfile read_profile(const std::string& path) {
  std::ifstream in(path);
  usage_check(static_cast<bool>(in), "cannot read the profile {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  check_toml_text(text, path);  // toml++'s undefined behaviour on some inputs (toml_guard.hpp)
  toml::table t;
  try {
    t = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    fail("{}: not a profile TOML file: {}", path, std::string(e.description()));
  }
  Reader r{t, path};
  MachineProfile p;
  p.source = r.text("machine", "source");
  p.device = r.text("machine", "device", true);
  p.backend = r.text("machine", "backend");
  p.mpi = r.text("machine", "mpi");
  p.transports = r.text("machine", "transports");
  p.date = r.text("machine", "date");
  p.note = r.text("machine", "note");
  p.cores_per_node = static_cast<int>(r.num("machine", "cores_per_node"));
  p.nodes = static_cast<int>(r.num("machine", "nodes"));
  p.ranks = static_cast<int>(r.num("machine", "ranks"));
  p.seconds = r.num("machine", "seconds");
  if (const toml::node* pk = t.at_path("machine.peak_gflops").node()) p.datasheet_peak_gflops = pk->value_or(0.0);
  p.gemm_m = r.nums("grid", "m");
  p.gemm_n = r.nums("grid", "n");
  p.gemm_k = r.nums("grid", "k");
  p.attn_t = r.nums("grid", "attn_t");
  p.attn_hd = r.num("grid", "attn_hd");
  check_axis(p.gemm_m, path, "[grid] m");
  check_axis(p.gemm_n, path, "[grid] n");
  check_axis(p.gemm_k, path, "[grid] k");
  check_axis(p.attn_t, path, "[grid] attn_t");
  const size_t cells = p.gemm_m.size() * p.gemm_n.size() * p.gemm_k.size();
  const toml::array* rates = t["rates"].as_array();
  check(rates && !rates->empty(), "{}: no [[rates]] tables (write the file with `mpitron calibrate`)", path);
  for (size_t i = 0; i < rates->size(); ++i) {
    const toml::table* rt = (*rates)[i].as_table();
    check(rt != nullptr, "{}: [[rates]] entries must be tables", path);
    const toml::table wrap{{"rates", *rt}};
    Reader rr{wrap, path};
    MachineProfile::Rates x;
    x.threads = static_cast<int>(rr.num("rates", "threads"));
    check(x.threads >= 1, "{}: [[rates]] {}: threads must be >= 1", path, i + 1);
    x.gemm_fwd_f32 = rr.nums("rates", "gemm_fwd_f32");
    x.gemm_bwd_f32 = rr.nums("rates", "gemm_bwd_f32");
    x.gemm_fwd_bf16 = rr.nums("rates", "gemm_fwd_bf16", false);
    x.gemm_bwd_bf16 = rr.nums("rates", "gemm_bwd_bf16", false);
    for (auto [v, name] : {std::pair{&x.gemm_fwd_f32, "gemm_fwd_f32"}, {&x.gemm_bwd_f32, "gemm_bwd_f32"}})
      check(v->size() == cells, "{}: [[rates]] {}: {} has {} entries, the grid m x n x k has {}", path, i + 1, name, v->size(), cells);
    for (auto [v, name] : {std::pair{&x.gemm_fwd_bf16, "gemm_fwd_bf16"}, {&x.gemm_bwd_bf16, "gemm_bwd_bf16"}})
      check(v->empty() || v->size() == cells, "{}: [[rates]] {}: {} has {} entries, the grid m x n x k has {}", path, i + 1, name,
            v->size(), cells);
    check(x.gemm_fwd_bf16.size() == x.gemm_bwd_bf16.size(), "{}: [[rates]] {}: gemm_fwd_bf16 and gemm_bwd_bf16 come together", path, i + 1);
    x.attn_fwd = rr.nums("rates", "attn_fwd");
    x.attn_bwd = rr.nums("rates", "attn_bwd");
    check(x.attn_fwd.size() == p.attn_t.size() && x.attn_bwd.size() == p.attn_t.size(),
          "{}: [[rates]] {}: attn_fwd and attn_bwd need one entry per attn_t ({})", path, i + 1, p.attn_t.size());
    x.stream_gbs = rr.num("rates", "stream_gbs");
    check(x.stream_gbs > 0, "{}: [[rates]] {}: stream_gbs must be positive", path, i + 1);
    p.rates.push_back(std::move(x));
  }
  check(p.rates.front().gemm_fwd_bf16.empty() ==
            std::all_of(p.rates.begin(), p.rates.end(), [](const MachineProfile::Rates& x) { return x.gemm_fwd_bf16.empty(); }),
        "{}: bf16 GEMM rates in some [[rates]] tables but not in others", path);
  p.active.clear();
  for (double a : r.nums("concurrency", "active")) p.active.push_back(static_cast<int>(a));
  p.compute_scale = r.nums("concurrency", "compute_scale");
  p.stream_scale = r.nums("concurrency", "stream_scale");
  check(p.compute_scale.size() == p.active.size() && p.stream_scale.size() == p.active.size(),
        "{}: [concurrency] compute_scale and stream_scale need one entry per active ({})", path, p.active.size());
  for (size_t i = 1; i < p.active.size(); ++i) check(p.active[i] > p.active[i - 1], "{}: [concurrency] active must be increasing", path);
  p.overlap_slowdown = r.nums("concurrency", "overlap_slowdown");
  check(p.overlap_slowdown.size() == p.active.size(), "{}: [concurrency] overlap_slowdown needs one entry per active ({})", path,
        p.active.size());
  if (const toml::array* comm = t["comm"].as_array()) {
    for (const auto& e : *comm) {
      const toml::table* ct = e.as_table();
      check(ct != nullptr, "{}: [[comm]] entries must be tables", path);
      CollectiveFit f;
      f.op = (*ct)["op"].value_or(std::string());
      f.group = static_cast<int>((*ct)["group"].value_or(int64_t{0}));
      f.active = static_cast<int>((*ct)["active"].value_or(int64_t{1}));
      f.inter_node = (*ct)["inter_node"].value_or(false);
      f.alpha_s = (*ct)["alpha_us"].value_or(-1.0) * 1e-6;
      f.busbw_gbs = (*ct)["busbw_gbs"].value_or(0.0);
      check(!f.op.empty() && f.group >= 2 && f.alpha_s >= 0 && f.busbw_gbs > 0,
            "{}: a [[comm]] entry needs op, group >= 2, alpha_us >= 0 and busbw_gbs > 0 (entry {} of {})", path,
            p.comm.size() + 1, comm->size());
      p.comm.push_back(f);
    }
  }
  return p;
}

void write_profile(const MachineProfile& p, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    usage_check(static_cast<bool>(f), "cannot write {}", tmp);
    f << profile_to_toml(p);
    f.flush();
    usage_check(static_cast<bool>(f), "cannot write {}", tmp);
  }
  usage_check(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}", tmp, path);
}

// ---- datasheet profiles ----

namespace {

struct Sheet {
  const char* name;
  const char* device;
  double peak_tflops;   // dense bf16
  double hbm_gbs;       // HBM bandwidth, datasheet
  double nvlink_busbw;  // nccl-tests all_reduce busbw on 8 GPUs of a node, large messages
  double ib_busbw;      // per GPU across nodes (one 400 or 200 Gb/s NIC per GPU)
};

MachineProfile datasheet(const Sheet& s) {
  MachineProfile p;
  p.source = "datasheet";
  p.device = s.device;
  p.backend = "nccl";
  p.transports = "NVLink inside a node, InfiniBand (one NIC per GPU) across";
  p.note = fmt::format(
      "not measured: dense bf16 peak {} TFLOP/s x GEMM efficiency 0.78*x/(x+384) (x = the smallest GEMM dimension: 57% at "
      "1024, 71% at 4096), attention at 45%/35% of peak (forward/backward, flash kernels), elementwise at 80% of {} GB/s "
      "HBM, NVLink all_reduce busbw {} GB/s and {} GB/s per GPU across nodes (published nccl-tests figures); run "
      "`mpitron calibrate` on the machine to replace them",
      s.peak_tflops, s.hbm_gbs, s.nvlink_busbw, s.ib_busbw);
  p.cores_per_node = 8;
  p.datasheet_peak_gflops = s.peak_tflops * 1e3;
  p.gemm_m = p.gemm_n = p.gemm_k = {256, 1024, 4096, 16384};
  MachineProfile::Rates r;
  r.threads = 1;
  for (double m : p.gemm_m)
    for (double n : p.gemm_n)
      for (double k : p.gemm_k) {
        const double x = std::min({m, n, k});
        const double g = s.peak_tflops * 1e3 * 0.78 * x / (x + 384);
        r.gemm_fwd_bf16.push_back(g);
        r.gemm_bwd_bf16.push_back(g);
        r.gemm_fwd_f32.push_back(g / 2);  // TF32 tensor cores
        r.gemm_bwd_f32.push_back(g / 2);
      }
  p.attn_hd = 128;
  p.attn_t = {512, 2048, 8192};
  r.attn_fwd = {s.peak_tflops * 1e3 * 0.30, s.peak_tflops * 1e3 * 0.42, s.peak_tflops * 1e3 * 0.45};
  r.attn_bwd = {s.peak_tflops * 1e3 * 0.22, s.peak_tflops * 1e3 * 0.32, s.peak_tflops * 1e3 * 0.35};
  r.stream_gbs = 0.8 * s.hbm_gbs;
  p.rates = {r};
  // One rank per GPU: no sharing between the GPUs of a node; NCCL's kernels take SMs from the
  // compute they overlap (~5%).
  p.active = {1, 8};
  p.compute_scale = p.stream_scale = {1.0, 1.0};
  p.overlap_slowdown = {1.0, 1.05};
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"})
    for (int n : {2, 8}) {
      p.comm.push_back({op, n, 8, false, n == 2 ? 8e-6 : 15e-6, s.nvlink_busbw});
      p.comm.push_back({op, n, 8, true, n == 2 ? 20e-6 : 35e-6, s.ib_busbw});
    }
  p.comm.push_back({"sendrecv", 2, 8, false, 8e-6, s.nvlink_busbw / 2});
  p.comm.push_back({"sendrecv", 2, 8, true, 15e-6, s.ib_busbw});
  return p;
}

const Sheet kSheets[] = {
    {"h100", "NVIDIA H100 SXM5 80GB (datasheet)", 989, 3350, 450, 45},
    {"h200", "NVIDIA H200 SXM 141GB (datasheet)", 989, 4800, 450, 45},
    {"a100", "NVIDIA A100 SXM4 80GB (datasheet)", 312, 2039, 230, 22},
};

}  // namespace

std::vector<std::string> builtin_profile_names() {
  std::vector<std::string> v;
  for (const Sheet& s : kSheets) v.push_back(s.name);
  return v;
}

MachineProfile load_profile(const std::string& name) {
  for (const Sheet& s : kSheets)
    if (name == s.name) return datasheet(s);
  std::ifstream f(name);
  usage_check(static_cast<bool>(f), "--profile {}: neither a built-in profile (h100, h200, a100) nor a readable file "
                                    "(write one with `mpirun -np N mpitron calibrate --out FILE`)", name);
  return read_profile(name);
}

}  // namespace mpitron
