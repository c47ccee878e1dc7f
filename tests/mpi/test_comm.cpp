// MpiComm collectives against serial references. Every rank regenerates every rank's random
// input (seeded by rank), so each can compute the whole expected result itself. fp32 and bf16
// (bf16 sums must accumulate in fp32 and round once), uneven counts, in-place forms,
// non-blocking operations in flight together, and sendrecv rings/chains that must not deadlock.
// np: 1 2 3 4 8
#include <mpi.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "mpitron/core/dtype.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/distributed/mpi_comm.hpp"

using namespace mpitron;

namespace {

// Host values of either dtype, kept as floats (bf16 inputs are exactly representable).
std::vector<float> input(int rank, size_t n, unsigned seed) {
  std::mt19937 g(seed * 1000003u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

std::vector<float> input(int rank, size_t n, unsigned seed, DType t) {
  auto v = input(rank, n, seed);
  if (t == DType::bf16)
    for (auto& x : v) x = to_f32(to_bf16(x));
  return v;
}

// A typed buffer made from floats, read back as floats.
struct Buf {
  DType t;
  std::vector<float> f;
  std::vector<bf16> h;
  Buf(DType t_, const std::vector<float>& v) : t(t_), f(v) {
    if (t == DType::bf16)
      for (float x : v) h.push_back(to_bf16(x));
  }
  Buf(DType t_, size_t n) : Buf(t_, std::vector<float>(n, -7.0f)) {}
  void* data() { return t == DType::f32 ? static_cast<void*>(f.data()) : static_cast<void*>(h.data()); }
  float at(size_t i) const { return t == DType::f32 ? f[i] : to_f32(h[i]); }
};

// Reduce the world's inputs in double; the expected value of `op` at element i.
double reduce_ref(const std::vector<std::vector<float>>& all, size_t i, ReduceOp op) {
  double acc = op == ReduceOp::max ? -1e30 : 0.0;
  for (const auto& v : all) acc = op == ReduceOp::max ? std::max(acc, double(v[i])) : acc + v[i];
  if (op == ReduceOp::avg) acc /= static_cast<double>(all.size());
  return acc;
}

// fp32: rounding differences only. bf16: within one bf16 ulp of the exact result (fp32
// accumulation + one rounding can land on the neighbour only near a midpoint).
bool close(float got, double want, DType t, int n, ReduceOp op) {
  if (op == ReduceOp::max) return got == static_cast<float>(t == DType::bf16 ? to_f32(to_bf16(float(want))) : want);
  double tol = t == DType::f32 ? 2e-6 * n : std::max(std::fabs(want), 1e-3) * std::ldexp(1.0, -7) * 1.01 + 1e-6 * n;
  return std::fabs(got - want) <= tol;
}

struct World {
  const LaunchInfo& l = init_launch();
  MpiComm comm{[] {
                 MPI_Comm c;
                 MPI_Comm_dup(MPI_COMM_WORLD, &c);
                 return c;
               }(),
               "world"};
  int n = comm.size(), me = comm.rank();
  std::vector<std::vector<float>> all(size_t count, unsigned seed, DType t) const {
    std::vector<std::vector<float>> v;
    for (int r = 0; r < n; ++r) v.push_back(input(r, count, seed, t));
    return v;
  }
};

const char* op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : op == ReduceOp::avg ? "avg" : "max"; }

}  // namespace

BOOST_FIXTURE_TEST_SUITE(comm, World)

BOOST_AUTO_TEST_CASE(all_reduce_vs_serial) {
  unsigned seed = 1;
  for (DType t : {DType::f32, DType::bf16})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1001), size_t(65537)}) {
        auto ref = all(count, ++seed, t);
        Buf b(t, ref[me]);
        comm.all_reduce(b.data(), count, t, op);
        int bad = 0;
        for (size_t i = 0; i < count; ++i) bad += !close(b.at(i), reduce_ref(ref, i, op), t, n, op);
        BOOST_TEST(bad == 0, dtype_name(t) << " " << op_name(op) << " count " << count << ": " << bad << " wrong");
      }
}

// 1 + (n-1) * 3*2^-9 is exact in fp32; summing in bf16 step by step would drift (each partial sum
// rounds to 2^-7), fp32 accumulation rounds once to the nearest bf16 of the exact sum.
BOOST_AUTO_TEST_CASE(bf16_sum_accumulates_in_fp32) {
  bf16 v = to_bf16(me == 0 ? 1.0f : 3.0f / 512.0f);
  comm.all_reduce(&v, 1, DType::bf16, ReduceOp::sum);
  float exact = 1.0f + (n - 1) * 3.0f / 512.0f;
  BOOST_TEST(to_f32(v) == to_f32(to_bf16(exact)));
}

BOOST_AUTO_TEST_CASE(all_gather_even_and_in_place) {
  for (DType t : {DType::f32, DType::bf16})
    for (size_t count : {size_t(1), size_t(33)}) {
      auto ref = all(count, 100 + count, t);
      Buf send(t, ref[me]), recv(t, count * n);
      comm.all_gather(send.data(), recv.data(), count, t);
      int bad = 0;
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) bad += recv.at(r * count + i) != ref[r][i];
      BOOST_TEST(bad == 0, "all_gather " << dtype_name(t) << " count " << count);

      // In place: my part already sits at recv[me*count].
      Buf inplace(t, count * n);
      Buf mine(t, ref[me]);
      std::memcpy(static_cast<char*>(inplace.data()) + me * count * dtype_size(t), mine.data(), count * dtype_size(t));
      comm.all_gather(static_cast<char*>(inplace.data()) + me * count * dtype_size(t), inplace.data(), count, t);
      bad = 0;
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) bad += inplace.at(r * count + i) != ref[r][i];
      BOOST_TEST(bad == 0, "in-place all_gather " << dtype_name(t));
    }
}

BOOST_AUTO_TEST_CASE(all_gatherv_uneven) {
  for (DType t : {DType::f32, DType::bf16}) {
    std::vector<size_t> counts(n);
    for (int r = 0; r < n; ++r) counts[r] = (r * 5 + 3) % 7;  // includes 0 at r = 5
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
    std::vector<std::vector<float>> ref;
    for (int r = 0; r < n; ++r) ref.push_back(input(r, counts[r], 200, t));
    Buf send(t, ref[me]), recv(t, total);
    comm.all_gatherv(send.data(), recv.data(), counts.data(), t);
    size_t off = 0;
    int bad = 0;
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < counts[r]; ++i) bad += recv.at(off++) != ref[r][i];
    BOOST_TEST(bad == 0, "all_gatherv " << dtype_name(t));
  }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_vs_serial) {
  unsigned seed = 300;
  for (DType t : {DType::f32, DType::bf16})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
      for (size_t count : {size_t(1), size_t(17)}) {
        auto ref = all(count * n, ++seed, t);
        Buf send(t, ref[me]), recv(t, count);
        comm.reduce_scatter(send.data(), recv.data(), count, t, op);
        int bad = 0;
        for (size_t i = 0; i < count; ++i) bad += !close(recv.at(i), reduce_ref(ref, me * count + i, op), t, n, op);
        BOOST_TEST(bad == 0, "reduce_scatter " << dtype_name(t) << " " << op_name(op) << " count " << count);

        // recv inside send (ZeRO style: my slice of the full buffer).
        Buf full(t, ref[me]);
        void* slice = static_cast<char*>(full.data()) + me * count * dtype_size(t);
        comm.reduce_scatter(full.data(), slice, count, t, op);
        bad = 0;
        for (size_t i = 0; i < count; ++i)
          bad += !close(full.at(me * count + i), reduce_ref(ref, me * count + i, op), t, n, op);
        BOOST_TEST(bad == 0, "aliased reduce_scatter " << dtype_name(t) << " " << op_name(op));
      }
}

BOOST_AUTO_TEST_CASE(reduce_scatterv_uneven) {
  for (DType t : {DType::f32, DType::bf16})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      std::vector<size_t> counts(n);
      for (int r = 0; r < n; ++r) counts[r] = (r * 3 + 1) % 4 + (r == 2 ? 1000 : 0);  // 1,0,1003,2,...
      size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
      size_t off = std::accumulate(counts.begin(), counts.begin() + me, size_t(0));
      auto ref = all(total, 400, t);
      Buf send(t, ref[me]), recv(t, counts[me] + 1);
      comm.reduce_scatterv(send.data(), recv.data(), counts.data(), t, op);
      int bad = 0;
      for (size_t i = 0; i < counts[me]; ++i) bad += !close(recv.at(i), reduce_ref(ref, off + i, op), t, n, op);
      BOOST_TEST(bad == 0, "reduce_scatterv " << dtype_name(t) << " " << op_name(op));
      BOOST_TEST(recv.at(counts[me]) == -7.0f);  // nothing written past my slice
    }
}

BOOST_AUTO_TEST_CASE(broadcast_from_every_root) {
  for (DType t : {DType::f32, DType::bf16})
    for (int root = 0; root < n; ++root) {
      auto ref = input(root, 513, 500 + root, t);
      Buf b(t, me == root ? ref : std::vector<float>(513, 0.0f));
      comm.broadcast(b.data(), 513, t, root);
      int bad = 0;
      for (size_t i = 0; i < 513; ++i) bad += b.at(i) != ref[i];
      BOOST_TEST(bad == 0, "broadcast root " << root);
    }
}

// Everyone sends to the next rank and receives from the previous one, all at once, with a message
// far above the eager limit: a naive send-then-recv would deadlock here.
BOOST_AUTO_TEST_CASE(sendrecv_rings_do_not_deadlock) {
  const size_t count = 1 << 20;
  for (int shift : {1, -1, 2}) {
    int dst = ((me + shift) % n + n) % n, src = ((me - shift) % n + n) % n;
    auto mine = input(me, count, 600);
    std::vector<float> got(count, 0.0f);
    comm.sendrecv(mine.data(), count, dst, got.data(), count, src, DType::f32, 5);
    auto want = input(src, count, 600);
    BOOST_TEST((got == want), "ring shift " << shift);
  }
  // bf16 ring, small.
  std::vector<bf16> s(9, to_bf16(float(me))), r(9);
  comm.sendrecv(s.data(), 9, (me + 1) % n, r.data(), 9, (me + n - 1) % n, DType::bf16);
  BOOST_TEST(to_f32(r[8]) == float((me + n - 1) % n));
}

// A pipeline-style chain: the first stage only sends, the last only receives (peer < 0 skips).
BOOST_AUTO_TEST_CASE(sendrecv_chain_with_open_ends) {
  float out = 10.0f + me, in = -1.0f;
  int dst = me + 1 < n ? me + 1 : -1, src = me > 0 ? me - 1 : -1;
  comm.sendrecv(&out, 1, dst, &in, 1, src, DType::f32);
  BOOST_TEST(in == (me > 0 ? 10.0f + me - 1 : -1.0f));
}

// Blocking send/recv ordered even/odd so the pairs cannot deadlock.
BOOST_AUTO_TEST_CASE(blocking_send_recv_pairs) {
  if (n < 2) return;
  int peer = me % 2 == 0 ? me + 1 : me - 1;
  if (peer >= n) return;
  std::vector<float> out(1000, float(me)), in(1000, -1.0f);
  if (me % 2 == 0) {
    comm.send(out.data(), out.size(), DType::f32, peer, 3);
    comm.recv(in.data(), in.size(), DType::f32, peer, 3);
  } else {
    comm.recv(in.data(), in.size(), DType::f32, peer, 3);
    comm.send(out.data(), out.size(), DType::f32, peer, 3);
  }
  BOOST_TEST(in[999] == float(peer));
}

// Several non-blocking operations in flight at once, polled and completed out of order.
BOOST_AUTO_TEST_CASE(non_blocking_ops_overlap) {
  for (DType t : {DType::f32, DType::bf16}) {
    const size_t ca = 4099, cg = 65, crs = 31, cp = 100000;
    auto ra = all(ca, 700, t), rg = all(cg, 701, t), rr = all(crs * n, 702, t);
    Buf a(t, ra[me]), gs(t, rg[me]), g(t, cg * n), rs(t, rr[me]), r(t, crs);
    auto p2p_out = input(me, cp, 703);
    std::vector<float> p2p_in(cp, 0.0f);
    Request q1 = comm.iall_reduce(a.data(), ca, t, ReduceOp::avg);
    Request q2 = comm.iall_gather(gs.data(), g.data(), cg, t);
    Request q3 = comm.ireduce_scatter(rs.data(), r.data(), crs, t, ReduceOp::sum);
    Request q4 = comm.irecv(p2p_in.data(), cp, DType::f32, (me + n - 1) % n, 9);
    Request q5 = comm.isend(p2p_out.data(), cp, DType::f32, (me + 1) % n, 9);
    while (!q3->test()) {
    }
    q5->wait();
    q4->wait();
    q2->wait();
    q1->wait();
    q1->wait();  // idempotent
    BOOST_TEST(q1->test());
    int bad = 0;
    for (size_t i = 0; i < ca; ++i) bad += !close(a.at(i), reduce_ref(ra, i, ReduceOp::avg), t, n, ReduceOp::avg);
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < cg; ++i) bad += g.at(k * cg + i) != rg[k][i];
    for (size_t i = 0; i < crs; ++i)
      bad += !close(r.at(i), reduce_ref(rr, me * crs + i, ReduceOp::sum), t, n, ReduceOp::sum);
    BOOST_TEST(bad == 0, "non-blocking " << dtype_name(t));
    BOOST_TEST((p2p_in == input((me + n - 1) % n, cp, 703)));
  }
}

BOOST_AUTO_TEST_CASE(scalars_and_barrier) {
  double s = comm.all_reduce_scalar(0.1 * (me + 1), ReduceOp::sum);
  BOOST_TEST(std::fabs(s - 0.1 * n * (n + 1) / 2) < 1e-9);
  BOOST_TEST(comm.all_reduce_scalar(me, ReduceOp::max) == n - 1);
  BOOST_TEST(std::fabs(comm.all_reduce_scalar(2.0 * me, ReduceOp::avg) - (n - 1)) < 1e-9);
  comm.barrier();
}

// Collectives on the ProcessGrid's subgroups reduce over exactly their members.
BOOST_AUTO_TEST_CASE(subgroups_reduce_over_members) {
  for (int tp : {1, 2}) {
    if (n % tp) continue;
    ProcessGrid grid(l, GridShape{tp, 1, 0, 1}, "cpu");
    for (Group g : kAllGroups) {
      auto m = grid.members(g);
      std::vector<std::vector<float>> ref;
      for (int r : m) ref.push_back(input(r, 257, 800));
      Buf b(DType::f32, input(me, 257, 800));
      grid.group(g).all_reduce(b.data(), 257, DType::f32, ReduceOp::sum);
      int bad = 0;
      for (size_t i = 0; i < 257; ++i)
        bad += !close(b.at(i), reduce_ref(ref, i, ReduceOp::sum), DType::f32, n, ReduceOp::sum);
      BOOST_TEST(bad == 0, "tp" << tp << " group " << group_name(g));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
