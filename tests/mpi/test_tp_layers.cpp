// Tensor-parallel layers alone against their unsharded versions: every rank builds the same full
// weights and inputs (seeded), computes the single-rank layer on them with the same Ops, then
// runs its shard of the parallel layer over the world as the TP group and compares its slice of
// every forward output and backward gradient. With and without sequence parallel. np = 1 checks
// that an inactive TP group is exactly the unsharded layer.
// np: 1 2 4
#include <mpi.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "mpitron/distributed/mpi_comm.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/cpu_device.hpp"
#include "mpitron/model/tensor_parallel/parallel_layers.hpp"

using namespace mpitron;

namespace {

using Vec = std::vector<float>;

Vec random_vec(size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  Vec v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Rows [r0, r0+nr) and columns [c0, c0+nc) of a row-major [*, cols] matrix.
Vec block(const Vec& m, int64_t cols, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  Vec out(static_cast<size_t>(nr * nc));
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t c = 0; c < nc; ++c) out[r * nc + c] = m[(r0 + r) * cols + c0 + c];
  return out;
}

void expect_close(const Vec& got, const Vec& want, const char* what, double rtol = 1e-5) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  double scale = 1e-30, err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::abs(double(want[i])));
    err = std::max(err, std::abs(double(got[i]) - double(want[i])));
  }
  BOOST_TEST(err <= rtol * std::max(scale, 1e-3), what << ": max abs error " << err << " (max |ref| " << scale << ")");
}

struct World {
  std::unique_ptr<MpiComm> tp;
  World() {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    tp = std::make_unique<MpiComm>(dup, "tp");
  }
  int size() const { return tp->size(); }
  int rank() const { return tp->rank(); }
};

const int64_t kRows = 8;  // B*T: divides by 1, 2, 4

void column_case(bool sp) {
  World w;
  auto ops = make_cpu_ops();
  const int tp = w.size(), r = w.rank();
  const int64_t K = 24, N = 48, Nl = N / tp, lrows = sp ? kRows / tp : kRows, r0 = sp ? r * lrows : 0;
  Vec W = random_vec(N * K, 1), b = random_vec(N, 2), x = random_vec(kRows * K, 3), dy = random_vec(kRows * N, 4);
  // Unsharded reference.
  Vec y(kRows * N), dx(kRows * K), dW(N * K, 0.f), db(N, 0.f);
  ops->matmul_forward(y.data(), x.data(), W.data(), b.data(), kRows, K, N);
  ops->matmul_backward(dx.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), kRows, K, N);
  // This rank's shard: output features [r*Nl, (r+1)*Nl).
  CpuDevice dev{*ops};
  ColumnParallelLinear<CpuDevice> layer(dev, TpContext{w.tp.get(), sp}, K, N);
  BOOST_REQUIRE_EQUAL(layer.out_local(), Nl);
  Vec Wl = block(W, K, r * Nl, Nl, 0, K), bl = block(b, N, 0, 1, r * Nl, Nl), xl = block(x, K, r0, lrows, 0, K);
  Vec yl(kRows * Nl), x_full(kRows * K), scratch(kRows * K), dxl(lrows * K), dWl(Nl * K, 0.f), dbl(Nl, 0.f);
  const float* used = layer.forward(yl.data(), xl.data(), sp ? x_full.data() : nullptr, Wl.data(), bl.data(), kRows);
  expect_close(yl, block(y, N, 0, kRows, r * Nl, Nl), "column y");
  Vec dyl = block(dy, N, 0, kRows, r * Nl, Nl);
  layer.backward(dxl.data(), dWl.data(), dbl.data(), dyl.data(), used, Wl.data(), kRows, scratch.data());
  expect_close(dxl, block(dx, K, r0, lrows, 0, K), "column dx");
  expect_close(dWl, block(dW, K, r * Nl, Nl, 0, K), "column dW");
  expect_close(dbl, block(db, N, 0, 1, r * Nl, Nl), "column db");
}

void row_case(bool sp) {
  World w;
  auto ops = make_cpu_ops();
  const int tp = w.size(), r = w.rank();
  const int64_t K = 48, N = 24, Kl = K / tp, lrows = sp ? kRows / tp : kRows, r0 = sp ? r * lrows : 0;
  Vec W = random_vec(N * K, 5), b = random_vec(N, 6), x = random_vec(kRows * K, 7), dy = random_vec(kRows * N, 8);
  Vec y(kRows * N), dx(kRows * K), dW(N * K, 0.f), db(N, 0.f);
  ops->matmul_forward(y.data(), x.data(), W.data(), b.data(), kRows, K, N);
  ops->matmul_backward(dx.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), kRows, K, N);
  // This rank's shard: input features [r*Kl, (r+1)*Kl); the bias is replicated.
  CpuDevice dev{*ops};
  RowParallelLinear<CpuDevice> layer(dev, TpContext{w.tp.get(), sp}, K, N);
  Vec Wl = block(W, K, 0, N, r * Kl, Kl), xl = block(x, K, 0, kRows, r * Kl, Kl);
  Vec yl(lrows * N), scratch(kRows * N), dxl(kRows * Kl), dWl(N * Kl, 0.f), dbl(N, 0.f);
  layer.forward(yl.data(), xl.data(), Wl.data(), b.data(), kRows, scratch.data());
  expect_close(yl, block(y, N, r0, lrows, 0, N), "row y");
  Vec dyl = block(dy, N, r0, lrows, 0, N);
  layer.backward(dxl.data(), dWl.data(), dbl.data(), dyl.data(), scratch.data(), xl.data(), Wl.data(), kRows);
  expect_close(dxl, block(dx, K, 0, kRows, r * Kl, Kl), "row dx");
  expect_close(dWl, block(dW, K, 0, N, r * Kl, Kl), "row dW");
  expect_close(dbl, db, "row db (replicated)");
}

// Byte vocabulary: 257 entries, not a multiple of tp. Padded to a multiple of 64*tp: at tp=4
// (Vp 512) rank 2 holds one real entry and rank 3 none.
ModelConfig vocab_cfg() {
  ModelConfig c;
  c.vocab_size = 257;
  return c;
}

std::vector<int32_t> tokens_for(int64_t n, int V, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(g() % V);
  t[0] = V - 1;  // the last real entry (rank 2's only one at tp=4)
  t[1] = 0;
  return t;
}

void embedding_case(bool sp) {
  World w;
  auto ops = make_cpu_ops();
  const int tp = w.size(), r = w.rank();
  const ModelConfig cfg = vocab_cfg();
  const int B = 2, T = 4, C = 16;
  const int64_t Vp = cfg.padded_vocab(tp), Vl = Vp / tp, lrows = sp ? kRows / tp : kRows, r0 = sp ? r * lrows : 0;
  Vec wte = random_vec(Vp * C, 9), wpe = random_vec(T * C, 10), dout = random_vec(kRows * C, 11);
  for (int64_t i = cfg.vocab_size * C; i < Vp * C; ++i) wte[i] = 0.f;
  auto tok = tokens_for(kRows, cfg.vocab_size, 12);
  Vec out(kRows * C), dwte(Vp * C, 0.f), dwpe(T * C, 0.f);
  ops->embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0, Vp);
  ops->embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C, 0, Vp);

  CpuDevice dev{*ops};
  VocabParallelEmbedding<CpuDevice> emb(dev, TpContext{w.tp.get(), sp}, Vp, C);
  BOOST_REQUIRE_EQUAL(emb.vocab_begin(), r * Vl);
  Vec wtel = block(wte, C, r * Vl, Vl, 0, C), outl(lrows * C), scratch(kRows * C), dwtel(Vl * C, 0.f),
      dwpel(T * C, 0.f);
  emb.forward(outl.data(), tok.data(), wtel.data(), wpe.data(), B, T, scratch.data());
  expect_close(outl, block(out, C, r0, lrows, 0, C), "embedding out");
  Vec doutl = block(dout, C, r0, lrows, 0, C);
  emb.backward(dwtel.data(), dwpel.data(), doutl.data(), scratch.data(), tok.data(), B, T);
  expect_close(dwtel, block(dwte, C, r * Vl, Vl, 0, C), "embedding dwte");
  expect_close(dwpel, dwpe, "embedding dwpe (replicated)");
}

}  // namespace

BOOST_AUTO_TEST_CASE(column_parallel_linear) { column_case(false); }
BOOST_AUTO_TEST_CASE(column_parallel_linear_sp) { column_case(true); }
BOOST_AUTO_TEST_CASE(row_parallel_linear) { row_case(false); }
BOOST_AUTO_TEST_CASE(row_parallel_linear_sp) { row_case(true); }
BOOST_AUTO_TEST_CASE(vocab_parallel_embedding) { embedding_case(false); }
BOOST_AUTO_TEST_CASE(vocab_parallel_embedding_sp) { embedding_case(true); }

// Cross-entropy on vocab-parallel logits against a float64 reference; padded columns hold large
// values that must never count (not even in the max), one target is ignored (-1).
BOOST_AUTO_TEST_CASE(vocab_parallel_cross_entropy) {
  World w;
  auto ops = make_cpu_ops();
  const int tp = w.size(), r = w.rank();
  const ModelConfig cfg = vocab_cfg();
  const int64_t V = cfg.vocab_size, Vp = cfg.padded_vocab(tp), Vl = Vp / tp, rows = kRows;
  Vec logits = random_vec(rows * Vp, 13, 3.f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = V; j < Vp; ++j) logits[i * Vp + j] = 1000.f;
  auto tgt = tokens_for(rows, static_cast<int>(V), 14);
  tgt[3] = -1;
  const float scale = 0.125f;
  Vec loss_ref(rows), lse_ref(rows), dlog_ref(rows * Vp, 0.f);
  for (int64_t i = 0; i < rows; ++i) {
    double mx = -1e300, s = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(logits[i * Vp + j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(double(logits[i * Vp + j]) - mx);
    double lse = mx + std::log(s);
    lse_ref[i] = static_cast<float>(lse);
    loss_ref[i] = tgt[i] < 0 ? 0.f : static_cast<float>(lse - logits[i * Vp + tgt[i]]);
    if (tgt[i] < 0) continue;
    for (int64_t j = 0; j < V; ++j)
      dlog_ref[i * Vp + j] = static_cast<float>(scale * (std::exp(double(logits[i * Vp + j]) - lse) - (j == tgt[i])));
  }
  CpuDevice dev{*ops};
  VocabParallelCrossEntropy<CpuDevice> ce(dev, TpContext{w.tp.get(), false}, Vp, V);
  Vec ll = block(logits, Vp, 0, rows, r * Vl, Vl), losses(rows), lse(rows), scratch(4 * rows);
  ce.forward(losses.data(), lse.data(), ll.data(), tgt.data(), rows, scratch.data());
  expect_close(losses, loss_ref, "ce losses");
  Vec lse_counted, lse_ref_counted;
  for (int64_t i = 0; i < rows; ++i)
    if (tgt[i] >= 0) lse_counted.push_back(lse[i]), lse_ref_counted.push_back(lse_ref[i]);
  expect_close(lse_counted, lse_ref_counted, "ce logsumexp");
  ce.backward(ll.data(), lse.data(), tgt.data(), rows, scale);
  expect_close(ll, block(dlog_ref, Vp, 0, rows, r * Vl, Vl), "ce dlogits");
}

// Sequence parallel needs the rows to divide by tp: a clear error, not a wrong answer.
BOOST_AUTO_TEST_CASE(sequence_parallel_rows_must_divide) {
  World w;
  if (w.size() == 1) return;
  TpContext tp{w.tp.get(), true};
  BOOST_CHECK_EQUAL(sequence_local_rows(tp, 8), 8 / w.size());
  BOOST_CHECK_THROW(sequence_local_rows(tp, 8 * w.size() + 1), std::exception);
}
