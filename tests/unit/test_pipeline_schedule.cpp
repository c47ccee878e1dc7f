// Pipeline schedules as data (parallel/schedule.hpp): properties of every generated schedule
// (each micro-batch's forward precedes its backward on every rank and chunk, every send has its
// receive, the event simulation finishes = no deadlock), 1F1B's in-flight bound, Megatron's
// interleaved warmup rule, the simulated bubble against (p-1)/(m+p-1), stage partitioning, and
// the usage errors. Also: activation slots and recompute in the model give the same gradients.
#include <boost/test/unit_test.hpp>
#include <map>
#include <set>
#include <tuple>

#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/model/transformer_model.hpp"
#include "mpitron/parallel/schedule.hpp"

using namespace mpitron;

namespace {

struct Case {
  std::string kind;
  int pp, m, v;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (int pp : {1, 2, 3, 4})
    for (int m : {1, 2, 4, 5, 8}) {
      out.push_back({"gpipe", pp, m, 1});
      if (m >= pp) out.push_back({"1f1b", pp, m, 1});
    }
  for (int pp : {2, 4})
    for (int v : {2, 3})
      for (int m : {pp, 2 * pp, 3 * pp}) out.push_back({"interleaved", pp, m, v});
  return out;
}

std::string name(const Case& c) { return c.kind + " pp" + std::to_string(c.pp) + " m" + std::to_string(c.m) + " v" + std::to_string(c.v); }

}  // namespace

BOOST_AUTO_TEST_SUITE(pipeline_schedule)

BOOST_AUTO_TEST_CASE(forward_precedes_backward_once_each) {
  for (const Case& c : all_cases()) {
    PipelineSchedule s = make_schedule(c.kind, c.pp, c.m, c.v);
    for (int r = 0; r < c.pp; ++r) {
      std::map<std::pair<int, int>, int> state;  // (mb, chunk) -> 0 none, 1 forward done, 2 backward done
      for (const auto& a : s.ranks[r]) {
        auto& st = state[{a.mb, a.chunk}];
        if (a.op == PipeOp::forward) {
          BOOST_TEST(st == 0, name(c) << " rank " << r << ": second forward of " << a.mb);
          st = 1;
        } else if (a.op == PipeOp::backward) {
          BOOST_TEST(st == 1, name(c) << " rank " << r << ": backward of " << a.mb << " before its forward");
          st = 2;
        }
      }
      BOOST_TEST(state.size() == static_cast<size_t>(c.m * c.v));
      for (const auto& [k, st] : state) BOOST_TEST(st == 2, name(c) << " rank " << r << ": mb " << k.first << " unfinished");
    }
  }
}

BOOST_AUTO_TEST_CASE(sends_match_receives_and_no_deadlock) {
  for (const Case& c : all_cases()) {
    PipelineSchedule s = make_schedule(c.kind, c.pp, c.m, c.v);
    // (direction, mb, from rank, to rank, receiving chunk) for every send; receives must match 1:1.
    std::multiset<std::tuple<int, int, int, int, int>> sends, recvs;
    for (int r = 0; r < c.pp; ++r)
      for (const auto& a : s.ranks[r]) {
        int peer = s.peer(r, a), pc = s.peer_chunk(r, a);
        if (a.op == PipeOp::send_act) sends.insert({0, a.mb, r, peer, pc});
        if (a.op == PipeOp::send_grad) sends.insert({1, a.mb, r, peer, pc});
        if (a.op == PipeOp::recv_act) recvs.insert({0, a.mb, peer, r, a.chunk});
        if (a.op == PipeOp::recv_grad) recvs.insert({1, a.mb, peer, r, a.chunk});
      }
    BOOST_TEST((sends == recvs), name(c) << ": sends and receives differ");
    // 2 messages per micro-batch per boundary between virtual stages.
    BOOST_TEST(sends.size() == static_cast<size_t>(2 * c.m * (c.pp * c.v - 1)), name(c));
    BOOST_CHECK_NO_THROW(simulate(s));
  }
}

BOOST_AUTO_TEST_CASE(in_flight_bounds) {
  for (int pp : {1, 2, 4})
    for (int m : {4, 8}) {
      PipelineSchedule f = make_schedule("1f1b", pp, m), g = make_schedule("gpipe", pp, m);
      BOOST_TEST(f.max_in_flight(0, 0) == std::min(pp, m));  // 1F1B: at most pp on stage 0
      for (int r = 0; r < pp; ++r) {
        BOOST_TEST(f.max_in_flight(r, 0) == pp - r);  // and one fewer per later stage
        BOOST_TEST(g.max_in_flight(r, 0) == m);      // GPipe keeps every micro-batch
      }
    }
}

BOOST_AUTO_TEST_CASE(interleaved_warmup_is_megatrons) {
  for (int pp : {2, 4})
    for (int v : {2, 3})
      for (int m : {pp, 2 * pp, 4 * pp}) {
        PipelineSchedule s = make_schedule("interleaved", pp, m, v);
        for (int r = 0; r < pp; ++r) {
          int warm = 0;
          for (const auto& a : s.ranks[r]) {
            if (a.op == PipeOp::backward) break;
            warm += a.op == PipeOp::forward;
          }
          int total = m * v;
          int expect = m == pp ? total : std::min((pp - r - 1) * 2 + (v - 1) * pp, total);
          // The first backward comes after the warmup forwards plus the first steady forward.
          int steady_first = expect < total ? 1 : 0;
          BOOST_TEST(warm == expect + steady_first, "pp" << pp << " v" << v << " m" << m << " rank " << r);
          // Forward order: chunk 0 for micro-batches 0..pp-1, then chunk 1 for the same, ...
          std::vector<PipeAction> fw;
          for (const auto& a : s.ranks[r])
            if (a.op == PipeOp::forward) fw.push_back(a);
          for (int k = 0; k < total; ++k) {
            BOOST_TEST(fw[k].chunk == (k % (pp * v)) / pp);
            BOOST_TEST(fw[k].mb == (k / (pp * v)) * pp + k % pp);
          }
        }
      }
}

BOOST_AUTO_TEST_CASE(simulated_bubble_matches_theory) {
  for (int pp : {2, 4})
    for (int m : {4, 8}) {
      for (const char* kind : {"gpipe", "1f1b"}) {
        PipelineTimeline t = simulate(make_schedule(kind, pp, m));
        BOOST_TEST(t.bubble() == theoretical_bubble(pp, m), boost::test_tools::tolerance(1e-12));
        BOOST_TEST(t.makespan == 3.0 * (m + pp - 1), boost::test_tools::tolerance(1e-12));
      }
      // Interleaving shrinks the bubble.
      PipelineTimeline ti = simulate(make_schedule("interleaved", pp, m, 2));
      BOOST_TEST(ti.bubble() < theoretical_bubble(pp, m) - 1e-9);
    }
  PipelineSchedule s = make_schedule("1f1b", 4, 8);
  std::string table = format_timeline(s, simulate(s));
  BOOST_TEST(table.find("rank  3") != std::string::npos);
  BOOST_TEST(format_actions(s).find("rank 0: F0 { send_act0 }") == 0);
}

BOOST_AUTO_TEST_CASE(usage_errors) {
  BOOST_CHECK_THROW(make_schedule("1f1b", 4, 2), UsageError);         // microbatches < pp
  BOOST_CHECK_THROW(make_schedule("pipedream", 2, 4), UsageError);    // unknown kind
  BOOST_CHECK_THROW(make_schedule("interleaved", 2, 4, 1), UsageError);  // needs v >= 2
  BOOST_CHECK_THROW(make_schedule("interleaved", 4, 6, 2), UsageError);  // m % pp != 0
  BOOST_CHECK_THROW(make_schedule("interleaved", 1, 4, 2), UsageError);  // needs pp >= 2
  BOOST_CHECK_THROW(make_schedule("gpipe", 2, 4, 2), UsageError);     // v without interleaved
  BOOST_CHECK_NO_THROW(make_schedule("gpipe", 4, 2));                 // GPipe runs m < pp
  // (The rules of a stage split are the layout rules': tests/unit/test_layout_rules.cpp.)
  BOOST_TEST((pipeline_stage_layers(6, 2, {2, 4}) == std::vector<int>{2, 4}));
  BOOST_TEST((pipeline_stage_layers(5, 2, {}) == std::vector<int>{2, 3}));  // as model_shard_for
}

// Several micro-batches in flight (slots, out of order) and full recompute give the gradients
// of the one-at-a-time model, bit for bit.
BOOST_AUTO_TEST_CASE(activation_slots_and_recompute_match) {
  ModelConfig cfg = model_preset("tiny");
  cfg.n_layer = 2, cfg.n_head = 2, cfg.d_model = 32, cfg.d_ff = 128, cfg.vocab_size = 50, cfg.seq_len = 12;
  auto ops = make_cpu_ops();
  const int B = 2, BT = B * cfg.seq_len, M = 3;
  std::vector<std::vector<int32_t>> in(M), tg(M);
  for (int k = 0; k < M; ++k)
    for (int i = 0; i < BT; ++i) {
      in[k].push_back(static_cast<int32_t>(counter_bits(7, k, i) % cfg.vocab_size));
      tg[k].push_back(static_cast<int32_t>(counter_bits(8, k, i) % cfg.vocab_size));
    }
  TransformerModel ref(cfg, ModelShard{}, *ops, B);
  ref.init_weights(3);
  ref.zero_grad();
  int64_t n;
  for (int k = 0; k < M; ++k) ref.forward(in[k].data(), tg[k].data(), B, &n), ref.backward(0.01f);
  for (bool recompute : {false, true}) {
    TransformerModel m(cfg, ModelShard{}, *ops, B, {M, recompute});
    m.init_weights(3);
    m.zero_grad();
    for (int k = 0; k < M; ++k) m.forward(in[k].data(), tg[k].data(), B, &n, k);  // GPipe-like: all forwards
    for (int k = 0; k < M; ++k) m.backward(0.01f, k);
    for (size_t i = 0; i < m.num_params(); ++i)
      if (m.grad_data()[i] != ref.grad_data()[i]) {
        BOOST_TEST(m.grad_data()[i] == ref.grad_data()[i], "recompute " << recompute << " at " << i);
        break;
      }
  }
  // Recompute keeps less: one block output instead of 13 buffers per block and slot.
  BOOST_TEST(gpt_activation_floats(cfg, ModelShard{}, B, {4, true}) < gpt_activation_floats(cfg, ModelShard{}, B, {4, false}));
}

BOOST_AUTO_TEST_SUITE_END()
