// The whole TransformerModel under tensor (and sequence) parallelism against the unsharded model:
// every rank builds the full model and its TP shard from the same seed, runs the same micro-batches
// through both (two accumulated backwards, one with an ignored target), and compares the loss
// and every element of its gradient shard with the full gradient at the element's full index
// (param_full_index). Vocabulary 50 (not a multiple of tp; padded to 64*tp), 4 heads split over
// tp. With SP and with full recompute too. Biases and LayerNorm parameters are random, not GPT-2's
// 0 and 1: a zero bias hides one added on every TP rank instead of once, a unit LN weight hides
// a missing scale.
// np: 1 2 4
#include <mpi.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "mpitron/core/rng.hpp"
#include "mpitron/distributed/mpi_comm.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/transformer_model.hpp"

using namespace mpitron;

namespace {

ModelConfig cfg() {
  ModelConfig c = model_preset("tiny");
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 32;
  c.d_ff = 128;
  c.vocab_size = 50;
  c.seq_len = 8;
  return c;
}

std::vector<int32_t> tokens(int n, int vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>(counter_bits(seed, 3, i) % vocab);
  return t;
}

// Every bias and LayerNorm weight set from its full-tensor index (the same value in the full
// model and in whichever TP shard holds the element): biases ~ 0.3 N(0,1), LN weights 1 + 0.3 N(0,1).
void randomize_biases_and_norms(TransformerModel& m, int tp_rank) {
  for (const auto& p : m.params()) {
    const bool bias = p.name.ends_with(".bias"), norm = p.name.find("ln_") != std::string::npos;
    if (!bias && !norm) continue;
    for (size_t i = 0; i < p.numel; ++i) {
      const int64_t f = param_full_index(p, static_cast<int64_t>(i), tp_rank);
      const double z = 0.3 * normal_at(5, stable_hash(p.name), static_cast<uint64_t>(f));
      m.param_data()[p.offset + i] = static_cast<float>(bias ? z : 1.0 + z);
    }
  }
}

void compare(bool sp, bool recompute) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MpiComm tp(dup, "tp");
  auto ops = make_cpu_ops();
  const ModelConfig c = cfg();
  const int B = 2, n = B * c.seq_len;
  TransformerModel full(c, ModelShard{}, *ops, B, {1, recompute});
  ModelShard s{tp.rank(), tp.size()};
  s.sequence_parallel = sp;
  TransformerModel part(c, s, *ops, B, {1, recompute}, tp.size() > 1 ? &tp : nullptr);
  full.init_weights(7);
  part.init_weights(7);
  randomize_biases_and_norms(full, 0);
  randomize_biases_and_norms(part, tp.rank());
  full.zero_grad();
  part.zero_grad();
  double loss_full = 0, loss_part = 0;
  for (uint64_t mb = 0; mb < 2; ++mb) {
    auto in = tokens(n, c.vocab_size, 10 + mb), tg = tokens(n, c.vocab_size, 20 + mb);
    tg[3] = -1;
    int64_t nf = 0, np = 0;
    loss_full += full.forward(in.data(), tg.data(), B, &nf);
    full.backward(0.05f);
    loss_part += part.forward(in.data(), tg.data(), B, &np);
    part.backward(0.05f);
    BOOST_TEST(nf == np);
  }
  BOOST_TEST(std::abs(loss_full - loss_part) <= 1e-5 * std::abs(loss_full));
  for (const auto& p : part.params()) {
    const ParamInfo* q = full.find_param(p.name);
    BOOST_REQUIRE(q);
    double err = 0, ref = 1e-12;
    for (size_t i = 0; i < p.numel; ++i) {
      double a = part.grad_data()[p.offset + i];
      const int64_t f = param_full_index(p, static_cast<int64_t>(i), tp.rank());
      // wte's padding rows (their number depends on tp) must get no gradient at all.
      const bool padding = p.name == "wte.weight" && f / c.d_model >= c.vocab_size;
      double b = padding ? 0.0 : full.grad_data()[q->offset + f];
      err = std::max(err, std::abs(a - b));
      ref = std::max(ref, std::abs(b));
    }
    BOOST_TEST(err <= 2e-5 * ref, p.name << " (sp " << sp << ", recompute " << recompute << "): max error " << err
                                          << " vs max |grad| " << ref);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(tp_gradients_match_the_full_model) { compare(false, false); }
BOOST_AUTO_TEST_CASE(tp_sp_gradients_match_the_full_model) { compare(true, false); }
BOOST_AUTO_TEST_CASE(tp_sp_recompute_gradients_match_the_full_model) { compare(true, true); }

BOOST_AUTO_TEST_CASE(heads_must_divide_by_tp) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MpiComm tp(dup, "tp");
  if (tp.size() == 1) return;
  auto ops = make_cpu_ops();
  ModelConfig c = cfg();
  c.n_head = 1;  // d_model 32, one head: cannot split over tp
  c.d_model = 32;
  BOOST_CHECK_THROW(TransformerModel(c, ModelShard{tp.rank(), tp.size()}, *ops, 1, {}, &tp), std::exception);
}
