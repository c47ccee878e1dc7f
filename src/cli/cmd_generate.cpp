// `mpitron generate CKPT --prompt "text" [--max-tokens 200 --temperature 0.8 --top-k 50 --seed 1]`
// Samples text from a checkpoint on one rank (CPU), with the tokenizer stored in it, GPT-2 or
// LLaMA. The context holds at most seq_len tokens; a new token runs through the model once,
// reading the earlier positions' keys and values from a KV cache (TransformerModel::decode). When
// the context is full it restarts from its latest seq_len/2 tokens (re-encoded at positions 0..).
// With --no-kv-cache every token re-runs the whole context's forward instead (same context rule):
// the reference the cache is tested against (same greedy tokens).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mpitron/cli/commands.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/data/chat.hpp"
#include "mpitron/data/tokenizer.hpp"
#include "mpitron/model/transformer_model.hpp"
#include "mpitron/ops/ops.hpp"
#include "mpitron/checkpoint/checkpoint.hpp"
#include "option_values.hpp"

namespace mpitron {
namespace {

const char* kHelp =
    "usage: mpitron generate CHECKPOINT --prompt TEXT [--max-tokens 200] [--temperature 0.8]\n"
    "                        [--top-k 50] [--seed 1] [--no-kv-cache] [--logprobs-out FILE]\n"
    "                        [--chat chatml|llama3|llama2|mistral|hf:DIR [--system TEXT]]\n\n"
    "Samples a continuation of TEXT from a checkpoint (a step_*.h5 file, a ckpt folder or its\n"
    "`latest`, or a run folder) on one process, with the tokenizer stored in the checkpoint.\n"
    "  --max-tokens N     tokens to generate (stops early at the end-of-text token)\n"
    "  --temperature T    softmax temperature; 0 = greedy (argmax)\n"
    "  --top-k K          sample among the K most likely tokens (0 = all)\n"
    "  --chat T           the prompt is a user turn rendered with chat template T (as prep --format\n"
    "                     chat renders it) up to the assistant's reply, which ends at T's end-of-turn\n"
    "                     marker; --system TEXT puts a system message first. hf:DIR: the model's\n"
    "                     own Jinja template from DIR/tokenizer_config.json with add_generation_prompt\n"
    "                     (its special markers become the checkpoint tokenizer's special ids; the reply\n"
    "                     ends at DIR's eos_token or <|im_end|> / <|eot_id|> / ...; docs/data.md)\n"
    "  --seed S           sampling seed (the same seed and checkpoint give the same text)\n"
    "  --no-kv-cache      recompute the whole context for every token (slow; for checking)\n"
    "  --logprobs-out F   write the prompt's ids and, at every position, the log-probabilities of\n"
    "                     the next token over the model's vocabulary as JSON {\"ids\": [..], \"logprobs\":\n"
    "                     [[..], ..]} (the prompt must fit in seq_len; --max-tokens 0: only that)\n\n"
    "The context holds at most the model's seq_len tokens; when full it restarts from the latest\n"
    "seq_len/2 tokens. Progress: tokens/s on stderr at the end.\n";

// Next token from logits[0, vocab): temperature, top-k, then one counter-based uniform draw.
int32_t sample(const float* logits, int vocab, double temperature, int top_k, uint64_t seed, uint64_t index) {
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  int k = (top_k > 0 && top_k < vocab) ? top_k : vocab;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  double mx = logits[ids[0]], total = 0;
  std::vector<double> p(k);
  for (int i = 0; i < k; ++i) total += p[i] = std::exp((logits[ids[i]] - mx) / temperature);
  double u = uniform_at(seed, stable_hash("generate"), index) * total, acc = 0;
  for (int i = 0; i < k; ++i)
    if ((acc += p[i]) >= u) return ids[i];
  return ids[k - 1];
}

// The prompt's next-token log-probabilities at every position (one forward of the whole prompt),
// for comparisons with other implementations of the same model (tests/reference/hf_reference.py).
void write_logprobs(TransformerModel& model, const std::vector<int32_t>& ids, int32_t eot, int T, int V, int Vp,
                    const std::string& path) {
  usage_check(ids.size() <= static_cast<size_t>(T), "generate --logprobs-out: the prompt is {} tokens, seq_len is {}",
              ids.size(), T);
  std::vector<int32_t> window(ids);
  window.resize(T, eot);  // after the last position: ignored (causal)
  int64_t unused = 0;
  model.forward(window.data(), nullptr, 1, &unused);
  std::string out = "{\"ids\": [";
  for (size_t i = 0; i < ids.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", ids[i]);
  out += "],\n\"logprobs\": [";
  std::vector<float> logits(Vp);
  for (size_t p = 0; p < ids.size(); ++p) {
    model.compute_logits(static_cast<int>(p), 1, logits.data());
    double mx = *std::max_element(logits.begin(), logits.begin() + V), z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(logits[v]) - mx);
    const double lse = mx + std::log(z);
    out += p ? ",\n[" : "\n[";
    for (int v = 0; v < V; ++v) out += fmt::format("{}{:.9g}", v ? ", " : "", logits[v] - lse);
    out += "]";
  }
  out += "]}\n";
  FILE* f = std::fopen(path.c_str(), "w");
  usage_check(f != nullptr, "generate: cannot write '{}'", path);
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  usage_check(std::fclose(f) == 0 && ok, "generate: cannot write '{}'", path);
}

struct GenerateOptions {
  std::string ckpt, prompt, chat, system;
  int max_tokens = 200, top_k = 50;
  double temperature = 0.8;
  uint64_t seed = 1;
  bool have_prompt = false, kv_cache = true;
  std::string logprobs_out;
};

// The command line into `o`; false after --help (printed).
bool parse_generate_args(const Args& args, GenerateOptions& o) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      usage_check(i + 1 < args.size(), "generate: {} needs a value", a);
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::printf("%s", kHelp);
      return false;
    } else if (a == "--prompt") {
      o.prompt = value();
      o.have_prompt = true;
    } else if (a == "--chat") {
      o.chat = value();
    } else if (a == "--system") {
      o.system = value();
    } else if (a == "--max-tokens") {
      o.max_tokens = option_int("--max-tokens", value(), 0);
    } else if (a == "--temperature") {
      o.temperature = option_float("--temperature", value(), at_least(0, "greedy"));
    } else if (a == "--top-k") {
      o.top_k = option_int("--top-k", value(), 0);
    } else if (a == "--seed") {
      o.seed = option_u64("--seed", value());
    } else if (a == "--logprobs-out") {
      o.logprobs_out = value();
    } else if (a == "--no-kv-cache") {
      o.kv_cache = false;
    } else if (a.rfind("--", 0) == 0) {
      usage_fail(
          "generate: unknown option '{}' (allowed: --prompt, --chat, --system, --max-tokens, --temperature, --top-k, "
          "--seed, --no-kv-cache, --logprobs-out)",
          a);
    } else {
      usage_check(o.ckpt.empty(), "generate: one checkpoint only (got '{}' and '{}')", o.ckpt, a);
      o.ckpt = a;
    }
  }
  usage_check(!o.ckpt.empty(), "generate: give a checkpoint (e.g. runs/x/ckpt/latest); see --help");
  usage_check(o.have_prompt, "generate: give --prompt TEXT");
  usage_check(o.max_tokens >= 0 && o.top_k >= 0 && o.temperature >= 0,
              "generate: --max-tokens, --top-k and --temperature must be >= 0");
  return true;
}

// The checkpoint's model/* tensors into the model's flat parameters.
void load_weights(TransformerModel& model, const std::string& path) {
  float* base = model.param_data();
  for (const auto& p : model.params()) {
    std::vector<int64_t> shape;
    std::vector<float> v = read_checkpoint_tensor(path, "model/" + p.name, &shape);
    check(v.size() <= p.numel, "{}: model/{} has {} values, the model expects at most {}", path, p.name, v.size(),
          p.numel);
    std::fill(base + p.offset, base + p.offset + p.numel, 0.f);  // wte's padded rows stay 0
    std::copy(v.begin(), v.end(), base + p.offset);
  }
}

// The prompt as token ids, the text echoed for it, and the markers that end the reply.
struct Prompt {
  std::vector<int32_t> ids;
  std::string text;
  std::vector<std::string> end_markers;
};

Prompt encode_prompt(const GenerateOptions& o, const Tokenizer& tok) {
  // --chat: the prompt is a user turn (after --system's message), rendered as prep --format chat
  // renders it, up to the assistant's reply; the reply ends at the template's end-of-turn marker.
  usage_check(o.chat.empty() || chat_template_known(o.chat),
              "generate: --chat must be chatml, llama3, llama2, mistral or hf:DIR (got '{}')", o.chat);
  usage_check(o.system.empty() || !o.chat.empty(), "generate: --system needs --chat");
  Prompt pr;
  pr.text = o.prompt;
  if (!o.chat.empty()) {
    const ChatTemplate tmpl(o.chat, tok);
    std::vector<ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system, ""});
    msgs.push_back({"user", o.prompt, ""});
    std::vector<ChatPiece> pieces;
    std::string why;
    usage_check(tmpl.render(msgs, &pieces, &why, /*generation_prompt=*/true, /*mask=*/false), "generate --chat {}: {}",
                o.chat, why);
    std::vector<uint8_t> unused_mask;
    tokenize_chat(tok, pieces, true, &pr.ids, &unused_mask);
    pr.text = chat_text(pieces);
    pr.end_markers = tmpl.end_markers();
  } else {
    pr.ids = tok.encode(o.prompt);
    // A document starts with the tokenizer's BOS where its post-processor adds one (prep puts it
    // before every document): the prompt is the start of a document.
    if (tok.bos() >= 0) pr.ids.insert(pr.ids.begin(), tok.bos());
  }
  if (pr.ids.empty()) pr.ids.push_back(tok.eot());  // an empty prompt starts a new document
  return pr;
}

// The context: ids[start, end), at most T tokens. The cache holds its keys and values at
// positions 0 .. len-1.
struct Context {
  TransformerModel& model;
  const Tokenizer& tok;
  std::vector<int32_t> ids;
  int T;
  bool kv_cache;
  std::vector<float> logits;
  size_t start;

  Context(TransformerModel& model_, const Tokenizer& tok_, std::vector<int32_t> ids_, int T_, bool kv_cache_, int Vp)
      : model(model_), tok(tok_), ids(std::move(ids_)), T(T_), kv_cache(kv_cache_), logits(Vp),
        start(ids.size() > static_cast<size_t>(T) ? ids.size() - T : 0) {}

  void compute_logits(size_t first_new) {  // logits after ids.back(); first_new: not yet cached
    const int len = static_cast<int>(ids.size() - start);
    if (kv_cache) {
      model.decode(ids.data() + first_new, static_cast<int>(ids.size() - first_new), static_cast<int>(first_new - start),
                   logits.data());
    } else {
      std::vector<int32_t> window(ids.begin() + start, ids.end());
      window.resize(T, tok.eot());  // after the last position: ignored (causal)
      int64_t unused = 0;
      model.forward(window.data(), nullptr, 1, &unused);
      model.compute_logits(len - 1, 1, logits.data());
    }
  }
  // The logits after the token just appended.
  void advance() {
    size_t first_new = ids.size() - 1;
    if (ids.size() - start > static_cast<size_t>(T)) start = first_new = ids.size() - T / 2;  // restart the context
    compute_logits(first_new);
  }
};

// The reply so far, printed as it grows.
struct Reply {
  const Tokenizer& tok;
  std::string text;
  std::vector<int32_t> generated;

  void append(int32_t next) {
    generated.push_back(next);
    // Byte-level tokenizers decode token by token; the others (SentencePiece, LLaMA-2's Metaspace
    // and Strip decoders) look at neighbours, so the reply is decoded whole and its new part shown.
    const std::string all = tok.streams_bytes() ? text + tok.decode_one(next) : tok.decode(generated);
    const std::string piece = all.compare(0, text.size(), text) == 0 ? all.substr(text.size()) : std::string();
    std::printf("%s", piece.c_str());
    std::fflush(stdout);
    text = all;
  }
  // A marker the tokenizer spells as text ends the reply once it is all there.
  bool ends_with_marker(const std::vector<std::string>& end_markers) const {
    bool ended = false;
    for (const auto& m : end_markers)
      ended = ended || (!m.empty() && text.size() >= m.size() && text.compare(text.size() - m.size(), m.size(), m) == 0);
    return ended;
  }
};

// Samples up to o.max_tokens tokens after the context, printing them; returns how many.
int generate_reply(Context& ctx, const GenerateOptions& o, int V, const std::vector<std::string>& end_markers) {
  const Tokenizer& tok = ctx.tok;
  ctx.compute_logits(ctx.start);
  int produced = 0;
  std::vector<int> end_ids;  // the chat template's end-of-turn markers the tokenizer holds as ids
  for (const auto& m : end_markers)
    if (tok.special_id(m) >= 0) end_ids.push_back(tok.special_id(m));
  Reply reply{tok, {}, {}};
  for (int n = 0; n < o.max_tokens; ++n) {
    int32_t next = sample(ctx.logits.data(), V, o.temperature, o.top_k, o.seed, static_cast<uint64_t>(n));
    if (next == tok.eot() || std::find(end_ids.begin(), end_ids.end(), next) != end_ids.end()) break;
    ctx.ids.push_back(next);
    ++produced;
    reply.append(next);
    if (reply.ends_with_marker(end_markers)) break;
    if (n + 1 == o.max_tokens) break;
    ctx.advance();
  }
  return produced;
}

}  // namespace

int cmd_generate(const Args& args) {
  GenerateOptions o;
  if (!parse_generate_args(args, o)) return 0;  // --help

  const std::string path = resolve_checkpoint_path(o.ckpt);
  CheckpointMeta meta = read_checkpoint_meta(path);
  usage_check(!meta.tokenizer_json.empty(), "checkpoint '{}' stores no tokenizer", path);
  Tokenizer tok = Tokenizer::from_json(meta.tokenizer_json, path + ": tokenizer_json");
  const ModelConfig& cfg = meta.model;

  auto ops = make_cpu_ops();
  TransformerModel model(cfg, ModelShard{}, *ops, 1);
  model.set_grad_enabled(false);
  load_weights(model, path);

  Prompt prompt = encode_prompt(o, tok);
  const int T = cfg.seq_len, V = std::min(cfg.vocab_size, tok.vocab_size()), Vp = cfg.padded_vocab(1);
  Context ctx(model, tok, std::move(prompt.ids), T, o.kv_cache, Vp);
  if (!o.logprobs_out.empty()) write_logprobs(model, ctx.ids, tok.eot(), T, cfg.vocab_size, Vp, o.logprobs_out);  // the model's whole vocabulary
  std::printf("%s", prompt.text.c_str());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const int produced = generate_reply(ctx, o, V, prompt.end_markers);
  std::printf("\n");
  const double s_total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "generate: %d tokens in %.2f s (%.1f tokens/s, %s)\n", produced, s_total,
               produced / std::max(s_total, 1e-9), o.kv_cache ? "KV cache" : "no KV cache");
  return 0;
}

}  // namespace mpitron
