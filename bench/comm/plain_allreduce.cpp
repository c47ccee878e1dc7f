// The baseline for `mpitron bench-comm --op all_reduce`: a plain MPI_Allreduce loop with the same
// sizes, the same timing rule (warmup calls, barrier, mean of --iters calls, slowest rank) and the
// same nccl-tests style table, so the two outputs can be compared line by line.
//   mpirun -np 2 plain_allreduce [--min 8] [--max 64M] [--iters 20] [--warmup 5]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static size_t parse_size(const char* s) {
  char* end = nullptr;
  size_t n = std::strtoull(s, &end, 10);
  if (*end == 'K' || *end == 'k') n <<= 10;
  if (*end == 'M' || *end == 'm') n <<= 20;
  if (*end == 'G' || *end == 'g') n <<= 30;
  return n;
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  size_t min = 8, max = 64 << 20;
  int iters = 20, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--min") min = parse_size(argv[i + 1]);
    else if (a == "--max") max = parse_size(argv[i + 1]);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else if (a == "--warmup") warmup = std::atoi(argv[i + 1]);
  }
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<float> buf(max / 4, 0.0f);
  if (rank == 0) {
    std::printf("# plain MPI_Allreduce loop: %d ranks, in place, float sum, iters %d, warmup %d\n", n, iters, warmup);
    std::printf("#%12s %13s %9s %7s %7s %10s %8s %8s\n", "size", "count", "type", "redop", "root", "time", "algbw",
                "busbw");
    std::printf("#%12s %13s %9s %7s %7s %10s %8s %8s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)");
  }
  double bus_sum = 0;
  int rows = 0;
  for (size_t bytes = min; bytes <= max; bytes *= 2) {
    int count = static_cast<int>(bytes / 4);
    if (count == 0) continue;
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double dt = (MPI_Wtime() - t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double algbw = count * 4.0 / dt / 1e9, busbw = algbw * (n > 1 ? 2.0 * (n - 1) / n : 0.0);
    bus_sum += busbw;
    ++rows;
    if (rank == 0)
      std::printf(" %12zu %13d %9s %7s %7d %10.2f %8.3f %8.3f\n", size_t(count) * 4, count, "float", "sum", -1,
                  dt * 1e6, algbw, busbw);
  }
  if (rank == 0) std::printf("# Avg bus bandwidth    : %g\n", rows ? bus_sum / rows : 0.0);
  MPI_Finalize();
  return 0;
}
