// GPT-2 token ids of JSONL texts from two independent JavaScript implementations, for
// tests/e2e/test_tokenizer_gpt2.sh: js-tiktoken's r50k_base (GPT-2's encoding) and OpenAI's
// gpt-3-encoder (the original GPT-2 encoder.py, ported). Special tokens are not allowed:
// "<|endoftext|>" inside a text is ordinary text, as a document's text must be.
//   node gpt2_reference.js NODE_MODULES IN.jsonl OUT.jsonl   (OUT: {"tiktoken": [...], "gpt3": [...]} per line)
const fs = require("fs");
const path = require("path");
const [modules, input, output] = process.argv.slice(2);
const { getEncoding } = require(path.join(modules, "js-tiktoken"));
const gpt3 = require(path.join(modules, "gpt-3-encoder"));
const enc = getEncoding("r50k_base");
const lines = fs.readFileSync(input, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
let t0 = Date.now(), bytes = 0;
for (const line of lines) {
  const text = JSON.parse(line).text;
  bytes += Buffer.byteLength(text, "utf8");
  out.push(JSON.stringify({ tiktoken: enc.encode(text, [], []) }));
}
const tiktokenSeconds = (Date.now() - t0) / 1000;
t0 = Date.now();
for (let i = 0; i < lines.length; ++i) {
  const o = JSON.parse(out[i]);
  o.gpt3 = gpt3.encode(JSON.parse(lines[i]).text);
  out[i] = JSON.stringify(o);
}
fs.writeFileSync(output, out.join("\n") + "\n");
console.log(`js-tiktoken r50k_base: ${lines.length} texts, ${(bytes / 1e6).toFixed(2)} MB in ${tiktokenSeconds.toFixed(2)} s ` +
            `(${(bytes / 1e6 / tiktokenSeconds).toFixed(2)} MB/s, one thread); gpt-3-encoder ${((Date.now() - t0) / 1000).toFixed(2)} s`);
