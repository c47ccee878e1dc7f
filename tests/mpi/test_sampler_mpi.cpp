// DP peers (ranks with the same data-parallel index in a tp x dp x pp grid) get identical
// batches; different DP indices get disjoint samples. Rank order as in DESIGN.md:
// rank = tp + TP*(dp + DP*pp), so dp_rank = (rank / TP) % DP.
// np: 1 2 4
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <set>

#include "mpitron/data/loader.hpp"
#include "mpitron/data/shard.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(dp_peers_get_identical_batches) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // world 1: 1x1x1; world 2: tp2 x dp1; world 4: tp2 x dp2.
  const int TP = world >= 2 ? 2 : 1, DP = world / TP;
  const int dp_rank = (rank / TP) % DP;

  long long id = getpid();
  MPI_Bcast(&id, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  fs::path dir = fs::temp_directory_path() / ("mpitron_sampler_mpi_" + std::to_string(id));
  if (rank == 0) {
    // vocab 65536 so that token i = i (position) makes every window distinct.
    std::vector<std::pair<int32_t, int32_t>> merges;
    for (int i = 0; i < 65536 - 257; ++i) merges.emplace_back(i % 256, (i / 256) % 256);
    Tokenizer tok = Tokenizer::bpe(merges);
    fs::create_directories(dir);
    for (int s = 0; s < 3; ++s) {
      ShardWriter w(fmt::format("{}/train_{:05d}.h5", dir.string(), s), tok, 1024);
      std::vector<int32_t> ids(5000);
      for (int i = 0; i < 5000; ++i) ids[i] = s * 5000 + i;
      w.append(ids.data(), ids.size());
      w.commit();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);

  LoaderOptions o;
  o.dir = dir.string();
  o.seq_len = 16;
  o.micro_batch = 4;
  o.dp_size = DP;
  o.dp_rank = dp_rank;
  o.seed = 99;
  DataLoader l(o);
  const int steps = 20, per = o.micro_batch * o.seq_len;
  std::vector<int32_t> mine;
  Batch b;
  for (int i = 0; i < steps; ++i) {
    l.next(b);
    mine.insert(mine.end(), b.inputs.begin(), b.inputs.end());
  }
  std::vector<int32_t> all(static_cast<size_t>(world) * mine.size());
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT, all.data(), static_cast<int>(mine.size()), MPI_INT,
                MPI_COMM_WORLD);
  auto rows_of = [&](int r) {
    std::set<std::vector<int32_t>> rows;
    for (int k = 0; k < steps * o.micro_batch; ++k) {
      auto p = all.begin() + static_cast<long>(r) * steps * per + k * o.seq_len;
      rows.emplace(p, p + o.seq_len);
    }
    return rows;
  };
  for (int r = 0; r < world; ++r) {
    int dr = (r / TP) % DP;
    bool same = std::equal(mine.begin(), mine.end(), all.begin() + static_cast<long>(r) * mine.size());
    if (dr == dp_rank) {
      BOOST_TEST(same, "rank " << rank << " and its DP peer " << r << " got different batches");
    } else {
      auto a = rows_of(rank), c = rows_of(r);
      for (auto& row : a) BOOST_TEST(!c.count(row), "rank " << rank << " and rank " << r << " share a sample");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(dir);
}
