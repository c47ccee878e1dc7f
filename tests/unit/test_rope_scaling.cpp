// RoPE scaling's frequency table (model/rope_scaling.hpp) against values worked out by hand from
// the published formulas (transformers' _compute_llama3_parameters and _compute_yarn_parameters),
// and the model.rope_* job keys. The whole models against the fp64 reference and llama.cpp:
// tests/e2e/test_rope_scaling.sh.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>

#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/config.hpp"
#include "mpitron/model/rope_scaling.hpp"

using namespace mpitron;

namespace {

bool close(double got, double want) { return std::fabs(got - want) <= 1e-12 * std::fabs(want); }

template <class F>
bool message_has(F f, const std::string& words) {
  try {
    f();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(words) != std::string::npos) return true;
    BOOST_TEST_MESSAGE("message: " << e.what());
    return false;
  }
  return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rope_scaling)

BOOST_AUTO_TEST_CASE(plain_table_is_the_old_expression) {
  // Bit for bit what Ops::rope computed before the table: pow(theta, -2i/hd) in double.
  const RopeFreqs f = rope_frequencies(500000.0, 128, RopeScaling{});
  BOOST_TEST(f.inv_freq.size() == 64u);
  BOOST_TEST(f.scale == 1.0);
  for (int i = 0; i < 64; ++i) BOOST_TEST(f.inv_freq[i] == std::pow(500000.0, -2.0 * i / 128));
}

BOOST_AUTO_TEST_CASE(llama3_by_hand) {
  // theta 1e4, head 8: f = 1, 0.1, 0.01, 0.001, wavelengths 2 pi / f = 6.28, 62.8, 628, 6283.
  // Original context 1024, low 1, high 4: kept below 1024 / 4 = 256 (pairs 0, 1), divided by 8 above
  // 1024 (pair 3: 0.000125), pair 2 between: s = (1024 / 628.3185 - 1) / (4 - 1) = 0.2099155,
  // (1 - s) 0.01 / 8 + s 0.01 = 0.003086761.
  RopeScaling s{.type = RopeScalingType::llama3, .factor = 8, .original_max_pos = 1024};
  const RopeFreqs f = rope_frequencies(10000.0, 8, s);
  BOOST_TEST(close(f.inv_freq[0], 1.0));
  BOOST_TEST(close(f.inv_freq[1], 0.1));
  BOOST_TEST(close(f.inv_freq[2], 0.003086760967011274));
  BOOST_TEST(close(f.inv_freq[3], 0.000125));
  BOOST_TEST(f.scale == 1.0);
}

BOOST_AUTO_TEST_CASE(yarn_by_hand) {
  // theta 1e4, head 16 (f_i = 1e4^(-i/8)), factor 4, original context 32: the correction dims
  // 16 ln(32 / (2 pi beta)) / (2 ln 1e4) are -1.596 (beta_fast 32: floor -2, clipped to 0) and 1.414
  // (beta_slow 1: ceil 2), so pair 0 keeps f, pair 1 is half and half (0.625 f), pairs 2.. f / 4;
  // cos and sin times 0.1 ln 4 + 1 = 1.1386294.
  RopeScaling s{.type = RopeScalingType::yarn, .factor = 4, .original_max_pos = 32};
  const RopeFreqs f = rope_frequencies(10000.0, 16, s);
  BOOST_TEST(close(f.inv_freq[0], 1.0));
  BOOST_TEST(close(f.inv_freq[1], 0.625 * 0.31622776601683794));
  BOOST_TEST(close(f.inv_freq[2], 0.1 / 4));
  for (int i = 3; i < 8; ++i) BOOST_TEST(close(f.inv_freq[i], std::pow(10000.0, -i / 8.0) / 4));
  BOOST_TEST(close(f.scale, 1.138629436111989));
  s.attention_factor = 1.5;  // given: used as it is
  BOOST_TEST(rope_frequencies(10000.0, 16, s).scale == 1.5);
}

BOOST_AUTO_TEST_CASE(job_keys) {
  ModelSection m;
  m.preset = "llama-tiny";
  m.rope_scaling = "llama3";
  BOOST_TEST(message_has([&] { resolve_model_config(m); }, "needs model.rope_factor and model.rope_original_max_pos"));
  m.rope_factor = 8, m.rope_original_max_pos = 32;
  ModelConfig c = resolve_model_config(m);
  BOOST_TEST((c.rope_scaling == RopeScaling{.type = RopeScalingType::llama3, .factor = 8, .original_max_pos = 32}));
  BOOST_TEST(c.name == "llama-tiny+custom");
  m.rope_beta_fast = 16;
  BOOST_TEST(message_has([&] { resolve_model_config(m); },
                         "model.rope_beta_fast applies to model.rope_scaling = \"yarn\""));
  m.rope_beta_fast = 0, m.rope_low_freq_factor = 5;
  BOOST_TEST(message_has([&] { resolve_model_config(m); }, "high_freq_factor 4 must be >= low_freq_factor 5"));
  m.rope_low_freq_factor = 0, m.rope_scaling = "yarn";
  c = resolve_model_config(m);
  BOOST_TEST((c.rope_scaling.type == RopeScalingType::yarn && c.rope_scaling.beta_fast == 32 &&
              c.rope_scaling.factor == 8));
  m.rope_scaling = "none";
  BOOST_TEST(message_has([&] { resolve_model_config(m); }, "model.rope_factor applies to model.rope_scaling"));
  ModelSection g;  // GPT-2 has learned positions
  g.rope_factor = 8;
  BOOST_TEST(message_has([&] { resolve_model_config(g); }, "model.rope_factor applies to LLaMA models only"));
  g.rope_factor = 0, g.rope_scaling = "yarn";
  BOOST_TEST(message_has([&] { resolve_model_config(g); }, "model.rope_scaling applies to LLaMA models only"));
  JobConfig job;
  BOOST_TEST(message_has([&] { set_job_key(job, "model.rope_factor", "0.5"); },
                         "bad value for 'model.rope_factor': 0.5"));
  BOOST_TEST(message_has([&] { set_job_key(job, "model.rope_scaling", "linear"); }, "model.rope_scaling"));
}

BOOST_AUTO_TEST_SUITE_END()
