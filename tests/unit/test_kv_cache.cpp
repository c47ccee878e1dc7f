// Generation with a KV cache (TransformerModel::decode) against the full forward, for both
// architectures: the logits at every position of a sequence, decoded as a prefill of 5 tokens then
// one token at a time (each reading the cached keys and values), equal the full window's forward
// logits at that position within 1e-5 relative (max|diff| / max|logit|). LLaMA also checks RoPE's
// position offset (pos0) and the grouped-query cache (2 kv heads for 4 query heads).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "mpitron/core/rng.hpp"
#include "mpitron/model/transformer_model.hpp"

using namespace mpitron;

namespace {

void check_decode_matches_forward(ModelConfig cfg) {
  cfg.vocab_size = 50;
  cfg.seq_len = 24;
  auto ops = make_cpu_ops();
  TransformerModel m(cfg, ModelShard{}, *ops, 1);
  m.init_weights(7);
  m.set_grad_enabled(false);
  const int T = cfg.seq_len;
  const int64_t Vp = cfg.padded_vocab();
  std::vector<int32_t> toks(T);
  for (int i = 0; i < T; ++i) toks[i] = static_cast<int32_t>(counter_bits(11, 5, i) % cfg.vocab_size);
  int64_t unused = 0;
  m.forward(toks.data(), nullptr, 1, &unused);
  std::vector<float> full(static_cast<size_t>(T) * Vp), step(Vp);
  m.compute_logits(0, T, full.data());
  const int prefill = 5;
  double worst = 0;
  for (int pos = prefill - 1; pos < T; ++pos) {
    if (pos == prefill - 1) m.decode(toks.data(), prefill, 0, step.data());
    else m.decode(toks.data() + pos, 1, pos, step.data());
    double e = 0, mx = 1e-30;
    for (int64_t v = 0; v < Vp; ++v) {
      mx = std::max(mx, std::fabs(static_cast<double>(full[pos * Vp + v])));
      e = std::max(e, std::fabs(static_cast<double>(full[pos * Vp + v]) - step[v]));
    }
    worst = std::max(worst, e / mx);
  }
  BOOST_TEST_MESSAGE(cfg.name << ": KV-cache logits vs full forward, worst rel err " << worst);
  BOOST_TEST(worst <= 1e-5);
  // Positions past the context are an error, not a buffer overrun.
  BOOST_CHECK_THROW(m.decode(toks.data(), 1, T, step.data()), std::exception);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_cache)

BOOST_AUTO_TEST_CASE(gpt2_decode_matches_forward) { check_decode_matches_forward(model_preset("tiny")); }

BOOST_AUTO_TEST_CASE(llama_decode_matches_forward) { check_decode_matches_forward(model_preset("llama-tiny")); }

BOOST_AUTO_TEST_SUITE_END()
