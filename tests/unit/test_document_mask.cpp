// Document masking's invariant (data.document_mask): a window of several packed documents gives
// each document exactly the losses, and the sum of the gradients, of running it alone from a
// window's start, within fp32 rounding, for GPT-2 (learned positions) and LLaMA (RoPE, GQA). And
// a window that is one document gives bit for bit the unmasked run.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <vector>

#include "grad_check.hpp"
#include "mpitron/model/transformer_model.hpp"

using namespace mpitron;
using namespace mpitron::testing;

namespace {

ModelConfig config(const char* preset) {
  ModelConfig c = model_preset(preset);
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 32;
  c.d_ff = c.arch == Arch::llama ? 64 : 128;
  if (c.arch == Arch::llama) c.n_kv_head = 2;
  c.vocab_size = 50;
  c.seq_len = 64;  // more than one 48-row block of the attention kernel: blocks with several documents
  return c;
}

std::vector<int32_t> tokens(int n, int vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>(counter_bits(seed, 3, i) % vocab);
  return t;
}

struct Run {
  double loss = 0;
  std::vector<float> grads;
};

// Loss sum and gradient of one sequence (B = 1) with the given targets and positions.
Run run(TransformerModel& m, const std::vector<int32_t>& in, const std::vector<int32_t>& tg, const int32_t* positions) {
  m.zero_grad();
  int64_t n = 0;
  Run r;
  r.loss = m.forward(in.data(), tg.data(), 1, &n, 0, positions);
  m.backward(1.f);
  r.grads.assign(m.grad_data(), m.grad_data() + m.num_params());
  return r;
}

double max_abs(const std::vector<float>& v) {
  double a = 0;
  for (float x : v) a = std::max(a, static_cast<double>(std::fabs(x)));
  return a;
}

void check_documents_alone(const char* preset) {
  const ModelConfig cfg = config(preset);
  const int T = cfg.seq_len;
  auto ops = make_cpu_ops();
  TransformerModel m(cfg, ModelShard{}, *ops, 1);
  m.init_weights(3);
  for (size_t i = 0; i < m.num_params(); ++i) m.param_data()[i] *= 4.f;  // every path carries signal
  m.params_changed();
  // Four documents: the last one's segment crosses the 48-row block boundary.
  const std::vector<int> lens = {9, 20, 5, 30};
  const auto in = tokens(T, cfg.vocab_size, 11), tg = tokens(T, cfg.vocab_size, 12);
  std::vector<int32_t> pos(T);
  for (int s = 0, at = 0; s < static_cast<int>(lens.size()); at += lens[s++])
    for (int t = 0; t < lens[s]; ++t) pos[at + t] = t;
  const Run packed = run(m, in, tg, pos.data());

  std::vector<float> sum(m.num_params(), 0.f);
  double worst_loss = 0;
  for (int s = 0, at = 0; s < static_cast<int>(lens.size()); at += lens[s++]) {
    // The document alone: its tokens at a window's start, the rest other tokens, untrained.
    std::vector<int32_t> ain = tokens(T, cfg.vocab_size, 20 + s), atg(T, -1);
    std::copy(in.begin() + at, in.begin() + at + lens[s], ain.begin());
    std::copy(tg.begin() + at, tg.begin() + at + lens[s], atg.begin());
    const Run alone = run(m, ain, atg, nullptr);
    // The packed window's loss on this document's targets only.
    std::vector<int32_t> ptg(T, -1);
    std::copy(tg.begin() + at, tg.begin() + at + lens[s], ptg.begin() + at);
    const Run part = run(m, in, ptg, pos.data());
    const double rel = std::fabs(part.loss - alone.loss) / std::fabs(alone.loss);
    worst_loss = std::max(worst_loss, rel);
    BOOST_TEST(rel < 1e-5, preset << " document " << s << ": packed loss " << part.loss << " alone " << alone.loss);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += alone.grads[i];
  }
  double diff = 0;
  for (size_t i = 0; i < sum.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(sum[i] - packed.grads[i])));
  const double rel_grad = diff / max_abs(sum);
  BOOST_TEST_MESSAGE(preset << ": worst loss rel diff " << worst_loss << ", gradient max diff / max " << rel_grad);
  BOOST_TEST(rel_grad < 1e-5, preset << ": packed gradient vs the documents' sum: " << rel_grad);

  // Unmasked, the documents see each other: the same losses would be a mask that does nothing.
  const Run open = run(m, in, tg, nullptr);
  BOOST_TEST(std::fabs(open.loss - packed.loss) / std::fabs(packed.loss) > 1e-3);
  // One document over the whole window: the unmasked run, bit for bit.
  std::vector<int32_t> one(T);
  for (int t = 0; t < T; ++t) one[t] = t;
  const Run single = run(m, in, tg, one.data());
  BOOST_TEST(single.loss == open.loss);
  BOOST_TEST((single.grads == open.grads));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(document_mask)

BOOST_AUTO_TEST_CASE(gpt2_documents_alone) { check_documents_alone("tiny"); }
BOOST_AUTO_TEST_CASE(llama_documents_alone) { check_documents_alone("llama-tiny"); }

BOOST_AUTO_TEST_SUITE_END()
