// The pipeline executor on real communicators against the full model on one rank: for gpipe,
// 1f1b and interleaved 1F1B (2 model chunks per rank), with and without recompute, one step of
// m micro-batches gives every stage the full model's gradients (wte: first + last stage summed
// over the embedding group, as the trainer's tied-embedding sync does) and the last stage the
// full model's loss, within 1e-5 relative per tensor. World = pp.
// np: 2 4
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "mpitron/core/rng.hpp"
#include "mpitron/distributed/grid.hpp"
#include "mpitron/distributed/launch.hpp"
#include "mpitron/model/transformer_model.hpp"
#include "mpitron/ops/ops.hpp"
#include "mpitron/parallel/pipeline.hpp"
#include "mpitron/parallel/tied_embedding.hpp"

using namespace mpitron;

namespace {

ModelConfig config(int n_layer) {
  ModelConfig c = model_preset("tiny");
  c.n_layer = n_layer, c.n_head = 2, c.d_model = 32, c.d_ff = 128, c.vocab_size = 50, c.seq_len = 12;
  return c;
}

std::vector<Batch> batches(const ModelConfig& c, int m, int B) {
  std::vector<Batch> out(m);
  for (int k = 0; k < m; ++k) {
    out[k].batch = B, out[k].seq_len = c.seq_len;
    for (int i = 0; i < B * c.seq_len; ++i) {
      out[k].inputs.push_back(static_cast<int32_t>(counter_bits(11, k, i) % c.vocab_size));
      out[k].targets.push_back(static_cast<int32_t>(counter_bits(12, k, i) % c.vocab_size));
    }
  }
  return out;
}

void check_step(const std::string& kind, int v, bool recompute) {
  const LaunchInfo& l = init_launch();
  ProcessGrid grid(l, GridShape{1, 1, 1, l.world}, "cpu");
  const int pp = l.world, m = 2 * pp, B = 2, V = pp * v;
  const ModelConfig cfg = config(V);  // one block per virtual stage
  auto ops = make_cpu_ops();
  auto data = batches(cfg, m, B);
  const float scale = 1.f / static_cast<float>(m * B * cfg.seq_len);

  TransformerModel full(cfg, ModelShard{}, *ops, B);
  full.init_weights(5);
  full.zero_grad();
  double ref_loss = 0;
  for (auto& b : data) {
    int64_t n;
    ref_loss += full.forward(b.inputs.data(), b.targets.data(), B, &n);
    full.backward(scale);
  }

  PipelineSchedule s = make_schedule(kind, pp, m, v);
  const int r = grid.coord().pp;
  std::vector<std::unique_ptr<TransformerModel>> chunks;
  std::vector<TransformerModel*> ptrs;
  for (int c = 0; c < v; ++c) {
    int vs = s.virtual_stage(r, c);
    ModelShard sh{0, 1, vs, vs + 1, vs == 0, vs == V - 1};
    chunks.push_back(
        std::make_unique<TransformerModel>(cfg, sh, *ops, B, ModelOptions{s.max_in_flight(r, c), recompute}));
    chunks.back()->init_weights(5);
    chunks.back()->zero_grad();
    ptrs.push_back(chunks.back().get());
  }
  PipelineExecutor pipe(s, grid.pp(), std::vector<ModelChunk*>(ptrs.begin(), ptrs.end()));
  PipelineStepStats st = pipe.run(data, scale);
  // The tied wte: the first virtual stage is chunk 0 of rank 0, the head chunk v-1 of rank pp-1.
  TransformerModel& tied = *(r == 0 ? ptrs.front() : ptrs.back());
  if (r == 0 || r == pp - 1) all_reduce_tied_embedding_grad(tied, grid);

  double loss = grid.pp().all_reduce_scalar(st.loss_sum, ReduceOp::sum);
  BOOST_TEST(std::abs(loss - ref_loss) / ref_loss < 1e-6, kind << ": loss " << loss << " vs " << ref_loss);
  for (TransformerModel* g : ptrs)
    for (const auto& p : g->params()) {
      const ParamInfo* q = full.find_param(p.name);
      BOOST_REQUIRE(q);
      double num = 0, den = 0;
      for (size_t i = 0; i < p.numel; ++i) {
        double a = g->grad_data()[p.offset + i], b = full.grad_data()[q->offset + i];
        num += (a - b) * (a - b), den += b * b;
      }
      double rel = std::sqrt(num / std::max(den, 1e-30));
      BOOST_TEST(rel < 1e-5, kind << " v" << v << " recompute " << recompute << " rank " << r << " " << p.name
                                   << " rel " << rel);
    }
  // Forward only (evaluation) through the same chunks gives the first micro-batch's loss.
  int64_t n = 0;
  double l0 = grid.pp().all_reduce_scalar(pipe.forward_only(data[0], &n), ReduceOp::sum);
  TransformerModel full_eval(cfg, ModelShard{}, *ops, B);
  full_eval.init_weights(5);
  full_eval.set_grad_enabled(false);
  double want = full_eval.forward(data[0].inputs.data(), data[0].targets.data(), B, &n);
  BOOST_TEST(std::abs(l0 - want) / want < 1e-6);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pipeline_executor)

BOOST_AUTO_TEST_CASE(gpipe) { check_step("gpipe", 1, false); }
BOOST_AUTO_TEST_CASE(one_f_one_b_recompute) { check_step("1f1b", 1, true); }
BOOST_AUTO_TEST_CASE(interleaved) { check_step("interleaved", 2, false); }
BOOST_AUTO_TEST_CASE(interleaved_recompute) { check_step("interleaved", 2, true); }

BOOST_AUTO_TEST_SUITE_END()
