// The pieces of `mpitron export --format hf` (tests/e2e/test_export_hf.sh checks whole exports
// against tests/reference/hf_reference.py): fp16 rounding against the compiler's _Float16, the
// safetensors reader and writer, the Hugging Face layout tables, tokenizer.json round trips.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "mpitron/checkpoint/external_layout.hpp"
#include "mpitron/checkpoint/hf_import.hpp"
#include "mpitron/checkpoint/safetensors.hpp"
#include "mpitron/core/dtype.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "mpitron/model/config.hpp"

using namespace mpitron;
namespace fs = std::filesystem;

namespace {

uint16_t ref_fp16(float f) {  // g++'s conversion (IEEE round to nearest even)
  _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mpitron-hf-test-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d / name;
}

void write_raw(const fs::path& p, const std::string& header, size_t data_bytes, int64_t claimed_len = -1) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header << std::string(data_bytes, '\0');
}

std::string error_of(const fs::path& p) {
  try {
    read_safetensors_header(p.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hf_export)

BOOST_AUTO_TEST_CASE(fp16_matches_the_compilers_rounding) {
  // Every 2^32 / 7919-th bit pattern (all exponents, both signs) and the edges around each rounding
  // boundary: NaN, inf, overflow at 65520, the subnormal range and its ties, zero.
  std::vector<uint32_t> bits;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 7919) bits.push_back(static_cast<uint32_t>(u));
  for (float f : {0.f, -0.f, 65504.f, 65519.99f, 65520.f, 1e9f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                  2.9802326e-08f, 8.940697e-08f, 1.0009766f, 1.0004883f, 1.0014648f, INFINITY, -INFINITY})
    for (int d = -2; d <= 2; ++d) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      bits.push_back(u + static_cast<uint32_t>(d));
    }
  int bad = 0;
  for (uint32_t u : bits) {
    float f;
    std::memcpy(&f, &u, 4);
    const uint16_t got = to_fp16_bits(f), want = ref_fp16(f);
    const bool both_nan = std::isnan(f) && (got & 0x7c00) == 0x7c00 && (got & 0x3ff) && (want & 0x7c00) == 0x7c00;
    if (got != want && !both_nan && ++bad <= 5) BOOST_ERROR("fp16 of " << f << " (0x" << std::hex << u << "): "
                                                             << got << " != " << want);
  }
  BOOST_TEST(bad == 0);
  for (uint32_t h = 0; h < 65536; ++h) {  // and back: every half exactly
    _Float16 x;
    const uint16_t b = static_cast<uint16_t>(h);
    std::memcpy(&x, &b, 2);
    const float want = static_cast<float>(x), got = fp16_bits_to_f32(b);
    BOOST_REQUIRE((got == want && std::signbit(got) == std::signbit(want)) || (std::isnan(got) && std::isnan(want)));
  }
}

BOOST_AUTO_TEST_CASE(safetensors_round_trip) {
  const fs::path p = scratch("rt.safetensors");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {7, 8};
  {
    SafetensorsWriter w(p.string(), {{"a", "F32", {2, 3}}, {"b", "BF16", {2}}}, {{"format", "pt"}});
    w.write_next(a.data(), 24);
    w.write_next(b.data(), 4);
    w.finish();
  }
  BOOST_TEST(!fs::exists(p.string() + ".tmp"));
  SafetensorsHeader h = read_safetensors_header(p.string());
  BOOST_TEST(h.data_start % 8 == 0u);
  BOOST_REQUIRE(h.entries.size() == 2u);
  BOOST_TEST(h.entries[0].name == "a");
  BOOST_TEST((h.entries[0].shape == std::vector<int64_t>{2, 3}));
  BOOST_TEST(h.entries[1].begin == 24u);
  BOOST_TEST(h.entries[1].end == 28u);
  BOOST_TEST(h.metadata.at("format") == "pt");
  std::ifstream f(p, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(h.data_start));
  std::vector<float> back(6);
  f.read(reinterpret_cast<char*>(back.data()), 24);
  BOOST_TEST(back == a, boost::test_tools::per_element());
  // A writer that stops early leaves nothing behind.
  const fs::path q = scratch("partial.safetensors");
  {
    SafetensorsWriter w(q.string(), {{"a", "F32", {2}}}, {});
  }
  BOOST_TEST(!fs::exists(q));
  BOOST_TEST(!fs::exists(q.string() + ".tmp"));
}

BOOST_AUTO_TEST_CASE(safetensors_bad_headers_name_file_and_tensor) {
  const fs::path p = scratch("bad.safetensors");
  auto expect = [&](const std::string& header, size_t data, const std::string& words, int64_t len = -1) {
    write_raw(p, header, data, len);
    const std::string e = error_of(p);
    BOOST_TEST_INFO("header " << header << " -> " << e);
    BOOST_TEST(e.find(p.string()) != std::string::npos);
    BOOST_TEST(e.find(words) != std::string::npos);
  };
  expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8, "past the end", 1 << 20);
  expect(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4, "'w': bytes [0, 8) are outside");
  expect(R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", 8, "'w': unknown dtype 'Q4'");
  expect(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, "'w': shape [3] of F32 needs 12");
  expect(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}})", 8, "'w': shape [-1]");
  expect(R"({"v": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12, "'v' and 'w' overlap");
  expect(R"({"w": {"dtype": "F32", "shape": [2]}})", 8, "'w' needs dtype, shape and data_offsets");
  expect(R"([1, 2])", 0, "not a JSON object");
  expect(R"({"w": )", 0, "not JSON");
  write_raw(p, "", 0, 0);
  std::ofstream(p, std::ios::binary | std::ios::trunc) << "abc";
  BOOST_TEST(error_of(p).find("shorter than its 8-byte header length") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(layout_tables_and_rope_permutation) {
  ModelConfig c = model_preset("llama-tiny");
  auto t = external_tensors(c);
  BOOST_TEST(t.size() == static_cast<size_t>(1 + 9 * c.n_layer + 1 + (c.tied_embeddings ? 0 : 1)));
  const ExternalTensor* q = nullptr;
  for (const auto& e : t)
    if (e.name == "layers.0.self_attn.k_proj.weight") q = &e;
  BOOST_REQUIRE(q);
  BOOST_TEST(q->hf_name == "model.layers.0.self_attn.k_proj.weight");
  BOOST_TEST(q->gguf_name == "blk.0.attn_k.weight");
  BOOST_TEST(q->rope_heads == c.n_kv_head);
  // 2 heads of head_dim 4, one column: mpitron rows (h, i, half) = h*4 + 2i + half; HF's row
  // h*4 + half*2 + i holds it: [0 1 2 3 | 4 5 6 7] -> [0 2 1 3 | 4 6 5 7].
  ExternalTensor e{"x", "x", "x", false, 2};
  std::vector<int64_t> shape = {8, 1};
  auto hf = to_hf_layout(e, {0, 1, 2, 3, 4, 5, 6, 7}, &shape);
  BOOST_TEST(hf == (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}), boost::test_tools::per_element());
  BOOST_TEST(from_hf_layout(e, hf, &shape) == (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}),
             boost::test_tools::per_element());
  // GPT-2's Conv1D: transposed.
  ExternalTensor g{"x", "x", "x", true, 0};
  shape = {2, 3};
  auto tr = to_hf_layout(g, {1, 2, 3, 4, 5, 6}, &shape);
  BOOST_TEST((shape == std::vector<int64_t>{3, 2}));
  BOOST_TEST(tr == (std::vector<float>{1, 4, 2, 5, 3, 6}), boost::test_tools::per_element());
  ModelConfig gpt = model_preset("tiny");
  BOOST_TEST(external_tensors(gpt).size() == static_cast<size_t>(2 + 12 * gpt.n_layer + 2));
}

BOOST_AUTO_TEST_CASE(tokenizer_json_round_trips) {
  std::mt19937 g(5);
  auto random_text = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& ch : s) ch = static_cast<char>(g());
    return s + " Grüße, 世界! it's 123 tabs\t\r\n  spaces 😀";
  };
  const fs::path p = scratch("tokenizer.json");
  // GPT-2-style BPE (GPT-2's pre-tokenizer, permuted byte ids): the same tokenizer back.
  std::array<int32_t, 256> perm{};
  for (int b = 0; b < 256; ++b) perm[b] = (b * 7 + 3) % 256;
  std::vector<std::pair<int32_t, int32_t>> merges = {{perm['t'], perm['h']}, {256, perm['e']}, {perm[' '], 257}};
  Tokenizer t = Tokenizer::bpe(merges, perm, "gpt2");
  std::ofstream(p) << t.to_hf_json();
  Tokenizer back = Tokenizer::hf_json(p.string());
  BOOST_TEST((back == t));
  for (int i = 0; i < 20; ++i) {
    const std::string s = random_text(g() % 300);
    BOOST_REQUIRE(back.encode(s) == t.encode(s));
  }
  BOOST_TEST(t.encode(" the").size() == 1u);
  // The byte tokenizer: every pre-tokenizer gives its bytes, so the ids agree.
  Tokenizer b = Tokenizer::byte();
  std::ofstream(p) << b.to_hf_json();
  Tokenizer bb = Tokenizer::hf_json(p.string());
  BOOST_TEST(bb.eot() == b.eot());
  for (int i = 0; i < 20; ++i) {
    const std::string s = random_text(g() % 300);
    BOOST_REQUIRE(bb.encode(s) == b.encode(s));
  }
  // mpitron-v1 BPE with merges has no exact HF pre-tokenizer: nothing rather than something wrong.
  BOOST_TEST(Tokenizer::bpe({{'t', 'h'}}).to_hf_json().empty());
  fs::remove_all(p.parent_path());
}

// The import streams a tensor a few rows at a time (HfModel::read_rows): any run of rows, cut
// mid-head where q and k rows are permuted, equals those rows of the whole tensor, F32 and BF16.
BOOST_AUTO_TEST_CASE(import_rows_equal_the_whole_tensor) {
  const fs::path d = scratch("qwen2");
  fs::create_directories(d);
  // Qwen2: q/k rows (and biases) permuted per head; 4 heads of 16 on 64, 2 kv heads.
  const int C = 64, H = 4, KV = 2, hd = 16, F = 48, V = 40;
  std::ofstream(d / "config.json") << R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
    "num_hidden_layers": 1, "vocab_size": 40, "max_position_embeddings": 64, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "tie_word_embeddings": false, "hidden_act": "silu", "use_sliding_window": false})";
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.embed_tokens.weight", {V, C}},
      {"model.layers.0.input_layernorm.weight", {C}},
      {"model.layers.0.self_attn.q_proj.weight", {H * hd, C}},
      {"model.layers.0.self_attn.q_proj.bias", {H * hd}},
      {"model.layers.0.self_attn.k_proj.weight", {KV * hd, C}},
      {"model.layers.0.self_attn.k_proj.bias", {KV * hd}},
      {"model.layers.0.self_attn.v_proj.weight", {KV * hd, C}},
      {"model.layers.0.self_attn.v_proj.bias", {KV * hd}},
      {"model.layers.0.self_attn.o_proj.weight", {C, H * hd}},
      {"model.layers.0.post_attention_layernorm.weight", {C}},
      {"model.layers.0.mlp.gate_proj.weight", {F, C}},
      {"model.layers.0.mlp.up_proj.weight", {F, C}},
      {"model.layers.0.mlp.down_proj.weight", {C, F}},
      {"model.norm.weight", {C}},
      {"lm_head.weight", {V, C}}};
  std::mt19937 g(9);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const std::string dtype : {"F32", "BF16"}) {
    BOOST_TEST_CONTEXT(dtype) {
      std::vector<SafetensorsEntry> entries;
      uint64_t at = 0;
      for (const auto& [name, shape] : shapes) {
        uint64_t n = 1;
        for (int64_t x : shape) n *= static_cast<uint64_t>(x);
        entries.push_back({name, dtype, shape, at, at + n * safetensors_dtype_size(dtype)});
        at = entries.back().end;
      }
      {
        SafetensorsWriter w((d / "model.safetensors").string(), entries, {{"format", "pt"}});
        for (const auto& e : entries) {
          std::vector<float> v((e.end - e.begin) / safetensors_dtype_size(dtype));
          for (float& x : v) x = u(g);
          if (dtype == "F32") {
            w.write_next(v.data(), e.end - e.begin);
          } else {
            std::vector<uint16_t> b(v.size());
            for (size_t i = 0; i < v.size(); ++i) b[i] = to_bf16(v[i]).bits;
            w.write_next(b.data(), e.end - e.begin);
          }
        }
        w.finish();
      }
      const HfModel hf(d.string());
      for (const auto& t : external_tensors(hf.config())) {
        const std::vector<float> whole = hf.tensor(t.name);
        const std::vector<int64_t>* hf_shape = nullptr;
        for (const auto& [name, s] : shapes)
          if (name == t.hf_name) hf_shape = &s;
        BOOST_REQUIRE(hf_shape);
        const int64_t rows = (*hf_shape)[0], cols = static_cast<int64_t>(whole.size()) / rows;
        for (int64_t step : {1, 3, 5, 7}) {
          std::vector<float> got(whole.size(), -99.f);
          for (int64_t r0 = 0; r0 < rows; r0 += step) {
            const int64_t n = std::min(step, rows - r0);
            hf.read_rows(t.name, r0, n, got.data() + r0 * cols);
          }
          BOOST_TEST(got == whole, t.name << " in runs of " << step << " rows");
        }
      }
    }
  }
  fs::remove_all(d.parent_path());
}

BOOST_AUTO_TEST_SUITE_END()
