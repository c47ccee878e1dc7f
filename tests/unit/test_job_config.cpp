#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "mpitron/cli/job_args.hpp"
#include "mpitron/config/job_config.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/model/config.hpp"

using namespace mpitron;

namespace {
std::string write_tmp(const std::string& text) {
  char name[] = "/tmp/mpitron_job_XXXXXX.toml";
  int fd = mkstemps(name, 5);
  BOOST_REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(name) << text;
  return name;
}
bool message_has(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const UsageError& e) {
    return std::string(e.what()).find(needle) != std::string::npos;
  }
  return false;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(job_config)

BOOST_AUTO_TEST_CASE(toml_and_overrides) {
  auto path = write_tmp(
      "[job]\nname = \"t\"\n[parallel]\ntp = 2\npp_layers = [1, 3]\n[optim]\nlr = 1e-3\n"
      "[env]\nNCCL_DEBUG = \"INFO\"\n");
  JobConfig c;
  load_job_file(c, path);
  BOOST_TEST(c.job.name == "t");
  BOOST_TEST(c.parallel.tp == 2);
  BOOST_TEST(c.parallel.pp_layers == std::vector<int>({1, 3}));
  BOOST_TEST(c.optim.lr == 1e-3);
  BOOST_TEST(c.env.at("NCCL_DEBUG") == "INFO");
  BOOST_TEST(c.run_dir() == "runs/t");
  auto rest = apply_job_overrides(c, {"--parallel.tp=4", "--train.steps", "7", "--parallel.sp", "--foo", "x"});
  BOOST_TEST(c.parallel.tp == 4);
  BOOST_TEST(c.train.steps == 7);
  BOOST_TEST(c.parallel.sp == true);
  BOOST_TEST(rest == std::vector<std::string>({"--foo", "x"}));
  // Round trip through the printed TOML.
  JobConfig d;
  auto path2 = write_tmp(job_to_toml(c));
  load_job_file(d, path2);
  BOOST_TEST(job_to_toml(d) == job_to_toml(c));
  std::remove(path.c_str());
  std::remove(path2.c_str());
}

BOOST_AUTO_TEST_CASE(errors_name_the_key) {
  JobConfig c;
  BOOST_TEST(message_has([&] { set_job_key(c, "parallel.tpp", "2"); }, "parallel.tp"));
  BOOST_TEST(message_has([&] { set_job_key(c, "parallel.tpp", "2"); }, "unknown job key 'parallel.tpp'"));
  BOOST_TEST(message_has([&] { set_job_key(c, "paralel.tp", "2"); }, "allowed sections"));
  BOOST_TEST(message_has([&] { set_job_key(c, "parallel.tp", "two"); }, "not a valid int"));
  BOOST_TEST(message_has([&] { set_job_key(c, "train.backend", "gpu"); }, "cpu, nccl"));
  auto bad = write_tmp("[model]\nn_layers = 3\n");
  BOOST_TEST(message_has([&] { load_job_file(c, bad); }, "model.n_layer"));
  auto broken = write_tmp("[model\n");
  BOOST_TEST(message_has([&] { load_job_file(c, broken); }, "TOML error"));
  BOOST_TEST(message_has([&] { load_job_file(c, "/nonexistent.toml"); }, "cannot read job file"));
  std::remove(bad.c_str());
  std::remove(broken.c_str());
}

// Every numeric key states its range in the registry (docs/jobs.md's "allowed" column), and a job
// file, a flag and a resolved value get the same message: the key, the value, the range.
BOOST_AUTO_TEST_CASE(numeric_keys_have_ranges) {
  std::stringstream rows(job_keys_markdown());
  std::string line;
  int numeric = 0;
  while (std::getline(rows, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    for (size_t at = 1, next; (next = line.find(" | ", at)) != std::string::npos; at = next + 2)
      cells.push_back(line.substr(at + 1, next - at - 1));
    BOOST_REQUIRE(cells.size() >= 3);
    if (cells[1] == "int" || cells[1] == "float" || cells[1] == "int list") {
      ++numeric;
      BOOST_TEST(!cells[2].empty(), cells[0] << " has no allowed range");
    }
  }
  BOOST_TEST(numeric >= 40);
}

BOOST_AUTO_TEST_CASE(range_bounds) {
  struct Case {
    const char* key;
    std::vector<const char*> good, bad;
  };
  const Case cases[] = {
      {"optim.lr", {"0", "3e-3", "10"}, {"nan", "inf", "-inf", "-3e-3"}},
      {"optim.min_lr", {"0", "1e-5"}, {"nan", "-1e-9"}},
      {"optim.beta1", {"0", "0.9", "0.999999"}, {"1", "1.5", "-0.1", "nan"}},
      {"optim.beta2", {"0.95"}, {"1.5", "1"}},
      {"optim.eps", {"1e-8", "1e-30"}, {"0", "-1e-8", "inf"}},
      {"optim.grad_clip", {"0", "1", "0.5"}, {"-1", "nan", "inf"}},
      {"optim.warmup_steps", {"0", "100"}, {"-10"}},
      {"optim.weight_decay", {"0", "0.1"}, {"-0.1", "nan"}},
      {"model.rope_theta", {"0", "1.5", "500000"}, {"1", "0.5", "inf", "nan", "-10000"}},
      {"model.norm_eps", {"0", "1e-5"}, {"1", "-1e-5", "nan"}},
      {"model.n_layer", {"0", "1", "96"}, {"-1"}},
      {"model.seq_len", {"0", "2", "1024"}, {"1", "-64"}},
      {"parallel.zero", {"0", "3"}, {"4", "-1"}},
      {"parallel.tp", {"1", "8"}, {"0", "-2"}},
      {"parallel.bucket_mb", {"0", "25"}, {"-1", "nan"}},
      {"data.prefetch", {"0", "4"}, {"-1"}},
      {"train.steps", {"1"}, {"0", "-5"}},
      {"train.global_batch", {"0", "8"}, {"-8"}},
      {"train.threads", {"0", "4"}, {"-4"}},
      {"train.peak_flops", {"0", "1e12"}, {"-1", "inf"}},
      {"train.nan_skip_limit", {"1", "10"}, {"0"}},
      {"train.trace_steps", {"[]", "[1, 2]"}, {"[0, 2]", "[2, -1]"}},
      {"eval.batches", {"0", "4"}, {"-1"}},
      {"eval.every", {"0", "10"}, {"-1"}},
      {"comm.timeout_s", {"0", "300"}, {"nan", "inf", "-1"}},
      {"checkpoint.timeout_s", {"0", "1800"}, {"-1", "nan"}},
      {"checkpoint.keep", {"0", "1"}, {"-1"}},
      {"log.every", {"1"}, {"0"}},
  };
  for (const Case& c : cases) {
    for (const char* v : c.good) {
      JobConfig cfg;
      BOOST_CHECK_NO_THROW(set_job_key(cfg, c.key, v));
    }
    for (const char* v : c.bad) {
      JobConfig cfg;
      BOOST_TEST(message_has([&] { set_job_key(cfg, c.key, v); }, fmt::format("bad value for '{}'", c.key)),
                 c.key << " = " << v << " was accepted");
      BOOST_TEST(message_has([&] { set_job_key(cfg, c.key, v); }, "(allowed: "), c.key << " = " << v);
    }
  }
  JobConfig cfg;
  BOOST_TEST(message_has([&] { set_job_key(cfg, "optim.beta2", "1.5"); },
                         "bad value for 'optim.beta2': 1.5 (allowed: 0 <= v < 1)"));
  BOOST_TEST(message_has([&] { set_job_key(cfg, "comm.timeout_s", "nan"); },
                         "bad value for 'comm.timeout_s': nan (allowed: 0 (off) or finite, > 0)"));
  // The same message from a job file (TOML's own nan / inf literals).
  auto path = write_tmp("[optim]\nlr = nan\n");
  BOOST_TEST(message_has([&] { load_job_file(cfg, path); }, "bad value for 'optim.lr': nan (allowed: finite, >= 0)"));
  std::remove(path.c_str());
  // A resolved value (a preset's, or derived): the same form, 0 not special.
  BOOST_TEST(message_has([] { check_job_value("model.rope_theta", 0); }, "bad value for 'model.rope_theta': 0"));
  BOOST_CHECK_NO_THROW(check_job_value("model.rope_theta", 10000));
  // A blend entry without a weight is refused, naming it.
  BOOST_TEST(message_has([&] { set_job_key(cfg, "data.paths", "[{ path = \"data/a\" }, { path = \"data/b\", weight = 1 }]"); },
                         "the entry for 'data/a' has no weight"));
  BOOST_TEST(message_has([&] { set_job_key(cfg, "data.paths", "[{ path = \"data/a\", weight = -1 }]"); },
                         "(allowed: finite, > 0)"));
}

BOOST_AUTO_TEST_CASE(model_presets) {
  ModelSection s;
  s.preset = "gpt2-124m";
  auto m = resolve_model_config(s);
  BOOST_TEST(m.n_layer == 12);
  BOOST_TEST(m.padded_vocab() == 50304);
  BOOST_TEST(m.padded_vocab(2) == 50304);
  BOOST_TEST(m.padded_vocab(3) == 262 * 192);  // ceil(50257 / 192) = 262
  BOOST_TEST(m.padded_vocab(5) == 158 * 320);  // ceil(50257 / 320) = 158
  s.n_head = 5;
  BOOST_TEST(message_has([&] { resolve_model_config(s); }, "divisible"));
  s.preset = "gpt3";
  BOOST_TEST(message_has([&] { resolve_model_config(s); }, "tiny, gpt2-124m"));
}

// LLaMA: Meta's hidden-size rule gives the published MLP widths, the keys override a preset,
// switching the architecture re-derives the LLaMA parts, and GPT-2-only / LLaMA-only mistakes
// are named.
BOOST_AUTO_TEST_CASE(llama_config) {
  BOOST_TEST(llama_ffn_dim(4096, 1.0, 256) == 11008);    // LLaMA 2 7B
  BOOST_TEST(llama_ffn_dim(5120, 1.0, 256) == 13824);    // LLaMA 2 13B
  BOOST_TEST(llama_ffn_dim(8192, 1.3, 4096) == 28672);   // LLaMA 2 70B, LLaMA 3 70B
  BOOST_TEST(llama_ffn_dim(4096, 1.3, 1024) == 14336);   // LLaMA 3 8B
  BOOST_TEST(llama_ffn_dim(16384, 1.2, 4096) == 53248);  // LLaMA 3 405B
  for (const char* name : {"llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b"}) {
    ModelConfig p = model_preset(name);
    BOOST_TEST(p.d_ff == llama_ffn_dim(p.d_model, p.ffn_multiplier, p.multiple_of), name);
  }
  BOOST_TEST(model_preset("llama3-8b").rope_theta == 500000.0);
  BOOST_TEST(model_preset("llama2-7b").rope_theta == 10000.0);

  ModelSection s;
  s.preset = "llama-tiny";
  auto m = resolve_model_config(s);
  BOOST_TEST((m.arch == Arch::llama && m.n_kv_head == 2 && m.d_ff == 192 && !m.tied_embeddings));
  BOOST_TEST(m.name == "llama-tiny");
  s.d_model = 128;  // d_ff follows the rule: 2/3 * 512 = 341 -> 352 (multiple of 32)
  s.n_kv_head = 1;
  s.tie_embeddings = "true";
  s.rope_theta = 500000;
  m = resolve_model_config(s);
  BOOST_TEST((m.d_ff == 352 && m.n_kv_head == 1 && m.tied_embeddings && m.rope_theta == 500000.0));
  BOOST_TEST(m.name == "llama-tiny+custom");
  s.d_ff = 300;
  BOOST_TEST(resolve_model_config(s).d_ff == 300);
  s.n_kv_head = 3;
  BOOST_TEST(message_has([&] { resolve_model_config(s); }, "model.n_kv_head (3) must divide model.n_head (4)"));

  ModelSection g;  // tiny (GPT-2) as a LLaMA block: MHA, LLaMA's MLP rule, untied
  g.arch = "llama";
  m = resolve_model_config(g);
  BOOST_TEST((m.arch == Arch::llama && m.n_kv_head == 4 && m.d_ff == 192 && !m.tied_embeddings));
  ModelSection bad;
  bad.rope_theta = 500000;
  BOOST_TEST(message_has([&] { resolve_model_config(bad); }, "model.rope_theta applies to LLaMA models only"));
  bad.rope_theta = 0;
  bad.n_kv_head = 2;
  BOOST_TEST(message_has([&] { resolve_model_config(bad); }, "model.n_kv_head applies to LLaMA models only"));
  ModelSection odd;
  odd.preset = "llama-tiny";
  odd.d_model = 72;  // 4 heads of 18: even, but 72 % 16 != 0
  BOOST_TEST(message_has([&] { resolve_model_config(odd); }, "multiple of 16"));
}

BOOST_AUTO_TEST_SUITE_END()
