// `mpitron bench-comm`: collective bandwidth through the Comm layer, printed like nccl-tests
// (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
//   algbw = size / time;  busbw = algbw * factor, factor = 2(n-1)/n for all_reduce,
//   (n-1)/n for all_gather and reduce_scatter, 1 for broadcast and sendrecv.
// size is the full buffer (all_gather: the gathered output; reduce_scatter: the input), count
// the elements each rank contributes (all_gather) or keeps (reduce_scatter), else the buffer's.
// time = mean over --iters calls, the slowest rank's (max over the world).
#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "mpitron/cli/commands.hpp"
#include "option_values.hpp"
#include "mpitron/cli/job_args.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/distributed/mpi_comm.hpp"

namespace mpitron {
namespace {

constexpr const char* kBenchHelp =
    "usage: mpirun -np N mpitron bench-comm [job.toml] [options] [--section.key=value ...]\n\n"
    "Times collectives on one group of the process grid and prints an nccl-tests style table\n"
    "(size, count, type, redop, root, time, algbw, busbw) and '# Avg bus bandwidth'.\n\n"
    "options:\n"
    "  --op OP          all_reduce | all_gather | reduce_scatter | broadcast | sendrecv | all_to_all | all\n"
    "                   (default all_reduce)\n"
    "  --group G        world | tp | dp | pp | cp | dp_cp | model_parallel | embedding (default world)\n"
    "  --min SIZE       smallest message in bytes, K/M/G suffixes = 2^10/2^20/2^30 (default 8)\n"
    "  --max SIZE       largest message in bytes (default 64M)\n"
    "  --factor F       size multiplier between rows (default 2)\n"
    "  --iters N        timed calls per size (default 20)\n"
    "  --warmup N       untimed calls per size first (default 5)\n"
    "  --dtype T        float | bf16 (default float)\n"
    "  --parallel.tp=N  grid layout (also .pp, .cp, .dp), --train.backend=cpu|nccl\n"
    "  --help           this text\n";

const std::vector<std::string> kOps = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "all_to_all"};

size_t parse_size(const std::string& opt, const std::string& v) {
  size_t i = 0;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) ++i;
  std::string suf = v.substr(i);
  usage_check(i > 0 && suf.size() <= 1, "option {} expects a size like 8, 64K, 64M or 1G, not '{}'", opt, v);
  size_t n = std::stoull(v.substr(0, i));
  if (suf.empty()) return n;
  switch (std::toupper(static_cast<unsigned char>(suf[0]))) {
    case 'K': return n << 10;
    case 'M': return n << 20;
    case 'G': return n << 30;
    default: usage_fail("option {} expects a size like 8, 64K, 64M or 1G, not '{}'", opt, v);
  }
}


struct Options {
  std::string op = "all_reduce", group = "world";
  size_t min = 8, max = 64 << 20;
  int factor = 2, iters = 20, warmup = 5;
  DType dtype = DType::f32;
};

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return n > 1 ? double(n - 1) / n : 0.0;
  return 1.0;
}

// One table: every size for one op on one group. Returns nothing; rank 0 prints.
void bench_op(const std::string& op, Comm& comm, Comm& world, const std::string& backend, const Options& o,
              bool print) {
  const int n = comm.size(), me = comm.rank();
  const size_t es = dtype_size(o.dtype);
  const size_t max_elems = std::max<size_t>(o.max / es, 1);
  CommBuffer a(backend, max_elems * es), b(backend, max_elems * es);
  if (print) {
    std::printf("#\n# %s on group '%s' (%d rank%s), backend %s, dtype %s, iters %d, warmup %d\n#\n", op.c_str(),
                comm.name().c_str(), n, n == 1 ? "" : "s", comm.backend().c_str(),
                o.dtype == DType::f32 ? "float" : "bf16", o.iters, o.warmup);
    std::printf("#%12s %13s %9s %7s %7s %10s %8s %8s\n", "size", "count", "type", "redop", "root", "time", "algbw",
                "busbw");
    std::printf("#%12s %13s %9s %7s %7s %10s %8s %8s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)");
  }
  double bus_sum = 0;
  int rows = 0;
  for (size_t bytes = o.min; bytes <= o.max; bytes = std::max(bytes * o.factor, bytes + 1)) {
    size_t count = bytes / es;
    bool split = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all";
    if (split) count -= count % n;
    if (count == 0) continue;
    size_t part = split ? count / n : count;  // elements per rank
    auto run = [&] {
      if (op == "all_reduce") {
        comm.all_reduce(b.data(), count, o.dtype, ReduceOp::sum);
      } else if (op == "all_gather") {
        comm.all_gather(a.data(), b.data(), part, o.dtype);
      } else if (op == "reduce_scatter") {
        comm.reduce_scatter(a.data(), b.data(), part, o.dtype, ReduceOp::sum);
      } else if (op == "all_to_all") {  // the MoE dispatch's exchange: count / n elements to each rank
        std::vector<size_t> c(static_cast<size_t>(n), part);
        comm.all_to_allv(a.data(), c.data(), b.data(), c.data(), o.dtype);
      } else if (op == "broadcast") {
        comm.broadcast(b.data(), count, o.dtype, 0);
      } else {  // sendrecv: a ring, everyone sends to the next rank and receives from the previous
        comm.sendrecv(a.data(), count, (me + 1) % n, b.data(), count, (me + n - 1) % n, o.dtype);
      }
    };
    for (int i = 0; i < o.warmup; ++i) run();
    world.barrier();
    double t0 = MPI_Wtime();
    for (int i = 0; i < o.iters; ++i) run();
    double dt = (MPI_Wtime() - t0) / o.iters;
    dt = world.all_reduce_scalar(dt, ReduceOp::max);
    double size_b = static_cast<double>(count * es);
    double algbw = size_b / dt / 1e9;
    double busbw = algbw * bus_factor(op, n);
    bus_sum += busbw;
    ++rows;
    if (print) {
      const char* redop = (op == "all_reduce" || op == "reduce_scatter") ? "sum" : "none";
      int root = op == "broadcast" ? 0 : -1;
      std::printf(" %12zu %13zu %9s %7s %7d %10.2f %8.3f %8.3f\n", count * es, part,
                  o.dtype == DType::f32 ? "float" : "bf16", redop, root, dt * 1e6, algbw, busbw);
      std::fflush(stdout);
    }
  }
  if (print) {
    std::printf("# Avg bus bandwidth    : %g\n#\n", rows ? bus_sum / rows : 0.0);
    std::fflush(stdout);
  }
}

}  // namespace

int cmd_bench_comm(const Args& args) {
  const LaunchInfo& launch = init_launch();
  if (wants_help(args)) {
    if (launch.rank == 0) std::printf("%s", kBenchHelp);
    return 0;
  }
  JobConfig cfg;
  Args rest = load_job_args(cfg, args);
  Options o;
  const std::string allowed =
      "--op, --group, --min, --max, --factor, --iters, --warmup, --dtype, --section.key=value, --help";
  for (size_t i = 0; i < rest.size(); ++i) {
    std::string a = rest[i], v;
    std::string::size_type eq = a.find('=');
    if (eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    bool known = a == "--op" || a == "--group" || a == "--min" || a == "--max" || a == "--factor" ||
                 a == "--iters" || a == "--warmup" || a == "--dtype";
    usage_check(known, "unknown option '{}' for `mpitron bench-comm` (allowed: {})", rest[i], allowed);
    if (eq == std::string::npos && i + 1 < rest.size()) v = rest[++i];
    usage_check(!v.empty(), "option {} needs a value", a);
    if (a == "--op") {
      usage_check(v == "all" || std::find(kOps.begin(), kOps.end(), v) != kOps.end(),
                  "--op {}: unknown operation (allowed: all_reduce, all_gather, reduce_scatter, broadcast, "
                  "sendrecv, all_to_all, all)",
                  v);
      o.op = v;
    } else if (a == "--group") {
      parse_group(v);
      o.group = v;
    } else if (a == "--min") {
      o.min = parse_size(a, v);
    } else if (a == "--max") {
      o.max = parse_size(a, v);
    } else if (a == "--factor") {
      o.factor = option_int(a, v, 2);
    } else if (a == "--iters") {
      o.iters = option_int(a, v, 1);
    } else if (a == "--warmup") {
      o.warmup = option_int(a, v, 0);
    } else if (a == "--dtype") {
      usage_check(v == "float" || v == "f32" || v == "bf16", "--dtype {}: allowed are float (f32) and bf16", v);
      o.dtype = v == "bf16" ? DType::bf16 : DType::f32;
    }
  }
  usage_check(o.min >= 1 && o.min <= o.max, "--min {} must be between 1 and --max {}", o.min, o.max);
  for (const auto& [k, v] : cfg.env) setenv(k.c_str(), v.c_str(), cfg.env_override ? 1 : 0);

  GridShape shape{cfg.parallel.tp, cfg.parallel.cp, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.ep};
  ProcessGrid grid(launch, shape, cfg.train.backend);
  Comm& comm = grid.group(parse_group(o.group));
  bool print = launch.rank == 0;
  if (print) {
    const GridShape& s = grid.shape();
    std::printf("# mpitron bench-comm: %d ranks, layout tp=%d cp=%d dp=%d pp=%d, %s\n", launch.world, s.tp, s.cp,
                s.dp, s.pp, launch.thread_level_name.c_str());
  }
  std::vector<std::string> ops = o.op == "all" ? kOps : std::vector<std::string>{o.op};
  for (const auto& op : ops) bench_op(op, comm, grid.world(), grid.backend(), o, print);
  return 0;
}

}  // namespace mpitron
