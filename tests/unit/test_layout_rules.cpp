// The layout rules (parallel/layout_rules.hpp): each rule refuses what it should with train's
// message, accepts its edge, and plan's view of a layout (plan_layout_request) is judged by the same
// function. The whole-program agreement of plan, train --dry-run and train is
// tests/e2e/test_layout_rules.sh.
#include <boost/test/unit_test.hpp>

#include <string>

#include "mpitron/core/error.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/parallel/layout_rules.hpp"
#include "mpitron/plan/ledger.hpp"

using namespace mpitron;

namespace {

ModelConfig llama_tiny() { return model_preset("llama-tiny"); }  // 2 layers, 4 heads on 2 kv heads

LayoutRequest layout(int tp, int cp, int dp, int pp, int ep = 1) {
  LayoutRequest l;
  l.grid = GridShape{tp, cp, dp, pp, ep};
  l.micro_batch = 1;
  l.global_batch = 4 * dp;  // 4 micro-batches per step
  return l;
}

bool refused_with(const ModelConfig& m, const LayoutRequest& l, const std::string& what) {
  const std::string p = layout_problem(m, l);
  BOOST_TEST_MESSAGE("layout problem: " << (p.empty() ? "(none)" : p));
  return p.find(what) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layout_rules)

BOOST_AUTO_TEST_CASE(each_rule_with_its_message) {
  const ModelConfig m = llama_tiny();
  BOOST_TEST(layout_problem(m, layout(2, 1, 1, 1)).empty());
  BOOST_TEST(refused_with(m, layout(4, 1, 1, 1), "must divide the query heads (4), the key/value heads (2)"));
  BOOST_TEST(refused_with(m, layout(8, 1, 1, 1), "model.n_head (4) must be divisible by parallel.tp (8)"));
  LayoutRequest sp1 = layout(1, 1, 1, 1);
  sp1.parallel.sp = true;
  BOOST_TEST(refused_with(m, sp1, "parallel.sp needs parallel.tp > 1"));
  ModelConfig odd = m;
  odd.seq_len = 100;
  BOOST_TEST(refused_with(odd, layout(1, 4, 1, 1), "model.seq_len (100) must be divisible by 2 x cp = 8"));
  BOOST_TEST(layout_problem(odd, layout(1, 2, 1, 1)).empty());  // 100 = 2 x 2 x 25
  ModelConfig gpt = model_preset("tiny");  // 4 heads
  gpt.seq_len = 66;  // even (cp 1), not a multiple of tp 4: sequence-parallel rows do not split
  LayoutRequest sp = layout(4, 1, 1, 1);
  BOOST_TEST(layout_problem(gpt, sp).empty());
  sp.parallel.sp = true;
  BOOST_TEST(refused_with(gpt, sp, "parallel.sp: model.seq_len / parallel.cp (66) must be divisible by parallel.tp (4)"));
  gpt.seq_len = 68;
  BOOST_TEST(layout_problem(gpt, sp).empty());
  BOOST_TEST(refused_with(m, layout(1, 1, 2, 1, 2), "parallel.ep = 2 splits a mixture-of-experts model's experts"));
  BOOST_TEST(refused_with(m, layout(1, 1, 1, 1, 2), "parallel.ep = 2 must divide the data x context parallel ranks"));
  LayoutRequest fp8 = layout(2, 1, 1, 1);
  fp8.fp8 = true;
  BOOST_TEST(layout_problem(m, fp8).empty());  // the CPU's emulation
  fp8.gpu = true;  // cuBLASLt's FP8 GEMMs: every dimension a multiple of 16
  BOOST_TEST(layout_problem(m, fp8).empty());
  ModelConfig narrow = m;
  narrow.d_ff = 200;  // / tp 2 = 100
  BOOST_TEST(refused_with(narrow, fp8, "model.d_ff / tp is 100"));
  BOOST_TEST(layout_problem(narrow, layout(2, 1, 1, 1)).empty());  // bf16: any width
}

BOOST_AUTO_TEST_CASE(batches_and_pipelines) {
  const ModelConfig m = llama_tiny();
  LayoutRequest b = layout(1, 1, 2, 1);
  b.global_batch = 3;
  BOOST_TEST(refused_with(m, b, "train.global_batch (3) must be a multiple of train.micro_batch (1) x dp (2)"));
  b.global_batch = 8;
  b.parallel.microbatches = 2;
  BOOST_TEST(refused_with(m, b, "parallel.microbatches (2) disagrees"));
  BOOST_TEST(refused_with(m, layout(1, 1, 1, 4), "model.n_layer (2) must be >= parallel.pp (4)"));
  LayoutRequest chunks = layout(1, 1, 1, 2);
  chunks.parallel.schedule = "interleaved";
  chunks.parallel.virtual_stages = 2;
  BOOST_TEST(refused_with(m, chunks, "must be >= parallel.pp (2) x parallel.virtual_stages (2)"));
  LayoutRequest few = layout(1, 1, 1, 2);
  few.global_batch = 1;
  BOOST_TEST(refused_with(m, few, "needs at least parallel.pp (2) micro-batches per step (got 1)"));
  few.parallel.schedule = "gpipe";
  BOOST_TEST(layout_problem(m, few).empty());
  LayoutRequest split = layout(1, 1, 1, 2);
  split.parallel.pp_layers = {2, 0};
  BOOST_TEST(refused_with(m, split, "every stage needs at least one layer"));
  split.parallel.pp_layers = {1, 2};
  BOOST_TEST(refused_with(m, split, "parallel.pp_layers sums to 3 but the model has 2 layers"));
  split.parallel.pp_layers = {1, 1};
  BOOST_TEST(layout_problem(m, split).empty());
}

BOOST_AUTO_TEST_CASE(plan_asks_the_same_rules) {
  PlanInput in;
  in.model = llama_tiny();
  in.model.seq_len = 100;
  in.layout.cp = 4;
  in.cluster.gpus = 4;
  BOOST_TEST(refused_with(in.model, plan_layout_request(in), "must be divisible by 2 x cp = 8"));
  try {
    validate_plan(in);
    BOOST_FAIL("validate_plan accepted seq_len 100 at cp 4");
  } catch (const UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("must be divisible by 2 x cp = 8") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
