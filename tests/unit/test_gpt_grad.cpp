// The whole TransformerModel against finite differences (fp32 model, central differences eps 1e-2
// on the mean loss; error norm per tensor max|numeric - analytic| / max|analytic| over checked
// entries, tolerance 1e-2), pipeline-stage shards agreeing with the full model, and a tiny
// model memorising a repeated batch with AdamW.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "grad_check.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/transformer_model.hpp"

using namespace mpitron;
using namespace mpitron::testing;

namespace {

ModelConfig micro_config() {
  ModelConfig c = model_preset("tiny");
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 32;
  c.d_ff = 128;
  c.vocab_size = 50;  // padded to 64: padded logits must never count
  c.seq_len = 12;
  return c;
}

std::vector<int32_t> tokens(int n, int vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>(counter_bits(seed, 3, i) % vocab);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt_grad)

BOOST_AUTO_TEST_CASE(param_table_and_init) {
  auto cfg = micro_config();
  auto ops = make_cpu_ops();
  TransformerModel m(cfg, ModelShard{}, *ops, 2);
  m.init_weights(1234);
  const ParamInfo* wte = m.find_param("wte.weight");
  BOOST_REQUIRE(wte);
  BOOST_TEST(wte->full_shape[0] == 64);
  for (int64_t i = 50 * 32; i < 64 * 32; ++i) BOOST_TEST(m.param_data()[wte->offset + i] == 0.f);
  BOOST_TEST(m.params().size() == 2 + 12 * 2 + 2u);
  // A pipeline stage computes exactly its own elements of the same full tensors.
  TransformerModel s(cfg, ModelShard{.layer_begin = 1, .layer_end = 2, .has_embedding = false, .has_head = true},
                     *ops, 2);
  s.init_weights(1234);
  for (const auto& p : s.params()) {
    const ParamInfo* q = m.find_param(p.name);
    BOOST_REQUIRE(q);
    for (size_t i = 0; i < p.numel; ++i) BOOST_REQUIRE(s.param_data()[p.offset + i] == m.param_data()[q->offset + i]);
  }
  // TP metadata: the fused QKV weight's rank-1 shard of tp 2 maps its q/k/v parts separately.
  auto table = gpt_param_table(cfg, ModelShard{.tp_rank = 1, .tp_size = 2});
  for (const auto& p : table)
    if (p.name == "h.0.attn.c_attn.weight") {
      BOOST_TEST(p.local_shape[0] == 48);
      BOOST_TEST(param_full_index(p, 0, 1) == 16 * 32);          // q rows 16..31
      BOOST_TEST(param_full_index(p, 16 * 32, 1) == 48 * 32);    // k rows 48..63
    }
  BOOST_TEST(gpt_flops_per_token(cfg) > 0);
}

BOOST_AUTO_TEST_CASE(whole_model_finite_differences) {
  auto cfg = micro_config();
  auto ops = make_cpu_ops();
  const int B = 2, T = cfg.seq_len;
  TransformerModel m(cfg, ModelShard{}, *ops, B);
  m.init_weights(7);
  // Larger-than-init weights so every path carries signal.
  for (size_t i = 0; i < m.num_params(); ++i) m.param_data()[i] *= 5.f;
  auto in = tokens(B * T, cfg.vocab_size, 1), tg = tokens(B * T, cfg.vocab_size, 2);
  tg[3] = -1;  // ignored target
  int64_t n = 0;
  m.forward(in.data(), tg.data(), B, &n);
  BOOST_TEST(n == B * T - 1);
  const float scale = 1.f / n;
  {  // evaluation mode: same loss, no backward
    m.set_grad_enabled(false);
    int64_t k;
    double l0 = m.forward(in.data(), tg.data(), B, &k);
    BOOST_CHECK_THROW(m.backward(scale), mpitron::Error);
    m.set_grad_enabled(true);
    BOOST_TEST(m.forward(in.data(), tg.data(), B, &k) == l0);
  }
  m.zero_grad();
  m.backward(scale);
  std::vector<float> grads(m.grad_data(), m.grad_data() + m.num_params());
  auto loss = [&] {
    int64_t k;
    return m.forward(in.data(), tg.data(), B, &k) * scale;
  };
  for (const auto& p : m.params()) {
    double e = fd_rel_error(m.param_data() + p.offset, p.numel, grads.data() + p.offset, loss, 1e-2f, 16);
    BOOST_TEST_MESSAGE(p.name << " rel err " << e);
    BOOST_TEST(e < 1e-2, p.name << " rel err " << e);
  }
}

BOOST_AUTO_TEST_CASE(pipeline_stages_match_full_model) {
  auto cfg = micro_config();
  auto ops = make_cpu_ops();
  const int B = 2, T = cfg.seq_len, C = cfg.d_model;
  TransformerModel full(cfg, ModelShard{}, *ops, B);
  TransformerModel s0(cfg, ModelShard{.layer_begin = 0, .layer_end = 1, .has_embedding = true, .has_head = false},
                      *ops, B);
  TransformerModel s1(cfg, ModelShard{.layer_begin = 1, .layer_end = 2, .has_embedding = false, .has_head = true},
                      *ops, B);
  for (TransformerModel* g : {&full, &s0, &s1}) g->init_weights(99), g->zero_grad();
  auto in = tokens(B * T, cfg.vocab_size, 5), tg = tokens(B * T, cfg.vocab_size, 6);
  int64_t n;
  double lf = full.forward(in.data(), tg.data(), B, &n);
  full.backward(1.f / n);
  s0.forward(in.data(), nullptr, B, nullptr);
  std::copy(s0.stage_output(), s0.stage_output() + B * T * C, s1.stage_input());
  double l1 = s1.forward(nullptr, tg.data(), B, &n);
  s1.backward(1.f / n);
  std::copy(s1.stage_input_grad(), s1.stage_input_grad() + B * T * C, s0.stage_output_grad());
  s0.backward(1.f / n);
  BOOST_TEST(l1 == lf);
  for (TransformerModel* s : {&s0, &s1})
    for (const auto& p : s->params()) {
      if (p.name == "wte.weight") continue;  // tied: split between the stages, checked below
      const ParamInfo* q = full.find_param(p.name);
      for (size_t i = 0; i < p.numel; ++i)
        BOOST_REQUIRE(s->grad_data()[p.offset + i] == full.grad_data()[q->offset + i]);
    }
  const ParamInfo *w0 = s0.find_param("wte.weight"), *w1 = s1.find_param("wte.weight"),
                  *wf = full.find_param("wte.weight");
  for (size_t i = 0; i < wf->numel; ++i) {
    float sum = s0.grad_data()[w0->offset + i] + s1.grad_data()[w1->offset + i];
    BOOST_TEST(std::fabs(sum - full.grad_data()[wf->offset + i]) <= 1e-6f);
  }
}

BOOST_AUTO_TEST_CASE(memorises_a_repeated_batch) {
  auto cfg = micro_config();
  cfg.seq_len = 16;
  auto ops = make_cpu_ops();
  const int B = 4, T = cfg.seq_len;
  TransformerModel m(cfg, ModelShard{}, *ops, B);
  m.init_weights(3);
  auto in = tokens(B * T, cfg.vocab_size, 11), tg = tokens(B * T, cfg.vocab_size, 12);
  std::vector<float> mo(m.num_params(), 0.f), vo(m.num_params(), 0.f);
  double first = 0, last = 0;
  for (int step = 1; step <= 200; ++step) {  // (Adam spikes once the loss is ~1e-4; stop before)
    int64_t n;
    m.zero_grad();
    double l = m.forward(in.data(), tg.data(), B, &n) / n;
    m.backward(1.f / n);
    for (const auto& p : m.params())
      ops->adamw(m.param_data() + p.offset, nullptr, m.grad_data() + p.offset, 1.f, mo.data() + p.offset,
                 vo.data() + p.offset, p.numel, 3e-3f, 0.9f, 0.95f, 1e-8f, p.decay ? 0.01f : 0.f, step);
    if (step == 1) first = l;
    if (step % 25 == 0) BOOST_TEST_MESSAGE("step " << step << " loss " << l);
    last = l;
  }
  BOOST_TEST_MESSAGE("memorise: loss " << first << " -> " << last);
  BOOST_TEST(first > 3.5);
  BOOST_TEST(last < 0.05);
}

BOOST_AUTO_TEST_SUITE_END()
