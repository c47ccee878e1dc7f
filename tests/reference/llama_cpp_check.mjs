// llama.cpp itself (through npm node-llama-cpp, its prebuilt CPU build) as the reference for GGUF
// exports. Usage (run in a subprocess: a bad file can abort llama.cpp):
//   NODE_PATH=.../node_modules node llama_cpp_check.mjs logprobs MODEL.gguf MPITRON_LOGPROBS.json TEXT
//   NODE_PATH=.../node_modules node llama_cpp_check.mjs tokenize MODEL.gguf TEXTS.json
// tokenize: TEXTS.json is a list of strings; prints llama.cpp's ids of each (no special tokens
// parsed, no BOS), one JSON list per line.
// MPITRON_LOGPROBS.json is `mpitron generate --logprobs-out`'s {"ids": [...], "logprobs": [[...]]}.
// Feeds mpitron's ids to llama.cpp (CPU, 1 thread, F32 KV cache, flash attention off), takes the
// full next-token distribution at every position (temperature 1, no top-k/top-p/min-p cut) and
// prints one JSON line: {"tokenize_equal", "max_abs_logprob_diff", "positions", "vocab",
// "greedy_checked", "greedy_disagree"} (greedy compared where mpitron's top-two gap exceeds 2x the
// measured difference).
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH || process.cwd(), "x.js"));
const { getLlama, LlamaLogLevel } = await import(require.resolve("node-llama-cpp"));
const [mode, modelPath, refPath, text] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
if (mode === "tokenize") {
  for (const t of JSON.parse(fs.readFileSync(refPath, "utf8"))) console.log(JSON.stringify(Array.from(model.tokenize(t, false))));
  await model.dispose();
  await llama.dispose();
  process.exit(0);
}
if (mode !== "logprobs") throw new Error(`unknown mode '${mode}' (logprobs | tokenize)`);
const ref = JSON.parse(fs.readFileSync(refPath, "utf8"));
const ctx = await model.createContext({
  contextSize: Math.max(64, ref.ids.length + 8), batchSize: 512, threads: 1, flashAttention: false,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const seq = ctx.getSequence();
const V = ref.logprobs[0].length;
const opts = { temperature: 1, topK: 0, topP: 1, minP: 0 };
const out = await seq.controlledEvaluate(ref.ids.map((t) => [t, { generateNext: { probabilities: true, options: opts } }]));
let maxDiff = 0, checked = 0, disagree = 0;
const diffs = [];
for (let i = 0; i < ref.ids.length; i++) {
  const probs = out[i]?.next?.probabilities;
  if (!probs) throw new Error(`no probabilities at position ${i}`);
  let d = 0;
  for (let v = 0; v < V; v++) {
    const p = probs.get(v) ?? 0;
    d = Math.max(d, Math.abs(Math.log(p) - ref.logprobs[i][v]));
  }
  diffs.push(d);
  maxDiff = Math.max(maxDiff, d);
}
for (let i = 0; i < ref.ids.length; i++) {
  const lp = ref.logprobs[i];
  const order = [...lp.keys()].sort((a, b) => lp[b] - lp[a]);
  if (lp[order[0]] - lp[order[1]] <= 2 * maxDiff) continue;
  checked++;
  const probs = out[i].next.probabilities;
  let best = -1, bp = -1;
  for (const [t, p] of probs) if (p > bp) (bp = p), (best = t);
  if (best !== order[0]) disagree++;
}
const tokenized = Array.from(model.tokenize(text, false));
console.log(JSON.stringify({
  tokenize_equal: JSON.stringify(tokenized) === JSON.stringify(ref.ids), llama_ids: tokenized.length,
  max_abs_logprob_diff: maxDiff, positions: ref.ids.length, vocab: V, greedy_checked: checked, greedy_disagree: disagree,
}));
await ctx.dispose();
await model.dispose();
await llama.dispose();
