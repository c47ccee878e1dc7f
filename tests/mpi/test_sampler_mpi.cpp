// DP peers (ranks with the same data-parallel index in a tp x dp x pp grid) get identical
// batches; different DP indices get disjoint samples. Rank order as in distributed/grid.hpp:
// rank = tp + TP*(dp + DP*pp), so dp_rank = (rank / TP) % DP.
// Each rank's indices, gathered from the real ranks, against torch.utils.data.DistributedSampler's
// code transcribed below (pad or cut, then order[rank : total : D]); disjointness alone cannot see
// a rank taking its neighbour's slot.
// np: 1 2 4
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <set>

#include "mpitron/data/loader.hpp"
#include "mpitron/data/sampler.hpp"
#include "mpitron/data/shard.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

namespace {

// torch.utils.data.DistributedSampler.__iter__ after the shuffle, line for line: `order` is the
// epoch's order of all N samples (range(N), or the permutation).
std::vector<int64_t> torch_indices(std::vector<int64_t> order, int D, int r, bool drop_last) {
  const int64_t N = static_cast<int64_t>(order.size());
  const int64_t num_samples = drop_last && N % D ? (N - D + D - 1) / D : (N + D - 1) / D;  // math.ceil
  const int64_t total = num_samples * D;
  if (!drop_last) {
    const int64_t padding = total - N;
    for (int64_t k = 0; k < padding; ++k) order.push_back(order[k % N]);  // indices * ceil(...)[:padding]
  } else {
    order.resize(total);
  }
  std::vector<int64_t> out;
  for (int64_t i = r; i < total; i += D) out.push_back(order[i]);  // indices[rank:total_size:num_replicas]
  return out;
}

// Every rank's indices, in rank order (rank r's at [r * n, (r + 1) * n)).
std::vector<int64_t> gather(const std::vector<int64_t>& mine) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::vector<int64_t> all(mine.size() * world);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(), static_cast<int>(mine.size()),
                MPI_INT64_T, MPI_COMM_WORLD);
  return all;
}

}  // namespace

// Every rank a DP rank: N not a multiple of D (padding / cutting), N < D (padding longer than the
// data), with and without shuffling, two epochs. The shuffled order of all N samples is the
// single-replica sampler's (the permutation depends on seed and epoch only, sampler.hpp); the
// unshuffled one is 0..N-1, which owes nothing to the sampler.
BOOST_AUTO_TEST_CASE(each_rank_gets_torch_distributed_sampler_indices) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int64_t N : {1, 3, 37, 40})
    for (bool shuffle : {false, true})
      for (bool drop_last : {false, true})
        for (uint64_t epoch : {0, 3}) {
          if (drop_last && N < world) continue;  // no sample per rank: a usage error
          DistributedSampler mine(N, world, rank, shuffle, 11, drop_last);
          mine.set_epoch(epoch);
          const auto all = gather(mine.indices());
          std::vector<int64_t> order(N);
          if (shuffle) {
            DistributedSampler one(N, 1, 0, true, 11, false);
            one.set_epoch(epoch);
            order = one.indices();
            BOOST_TEST(std::set<int64_t>(order.begin(), order.end()).size() == static_cast<size_t>(N));
          } else {
            for (int64_t i = 0; i < N; ++i) order[i] = i;
          }
          const size_t n = mine.indices().size();
          for (int r = 0; r < world; ++r) {
            const auto want = torch_indices(order, world, r, drop_last);
            const std::vector<int64_t> got(all.begin() + r * n, all.begin() + (r + 1) * n);
            BOOST_TEST(got == want, boost::test_tools::per_element());
            if (got != want)
              BOOST_TEST_MESSAGE("rank " << r << " of " << world << ", N " << N << ", shuffle " << shuffle
                                         << ", drop_last " << drop_last << ", epoch " << epoch);
          }
        }
}

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
  // The rows of this rank: windows of the samples torch's sampler gives its DP rank (the loader
  // drops the last partial sample and shuffles with drop_last), in order, epoch 0.
  {
    const int64_t n = (3 * 5000 - 1) / o.seq_len;
    DistributedSampler one(n, 1, 0, true, 99, false);
    const auto want = torch_indices(one.indices(), DP, dp_rank, true);
    for (int k = 0; k < steps * o.micro_batch; ++k)
      BOOST_TEST(mine[static_cast<size_t>(k) * o.seq_len] == want.at(k) * o.seq_len,
                 "rank " << rank << " (dp " << dp_rank << ") row " << k);
  }
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
