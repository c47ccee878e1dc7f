// Hugging Face's ids for a list of texts from a tokenizer.json, through npm @huggingface/tokenizers
// (tokenizers.js, Hugging Face's own JavaScript port of the Rust `tokenizers`), for
// tests/e2e/test_tokenizer_hf.sh:
//   node hf_tokenizers_check.mjs NODE_MODULES TOKENIZER TEXTS.json OUT.json [PYTHON TEXTS_PY]
// TOKENIZER: a tokenizer.json or a folder with tokenizer.json (+ tokenizer_config.json, optional).
// Per text (OUT.json "texts", in order): "ids" = encode(text, add_special_tokens false) with the
// special added tokens read as plain text (a document's text cannot inject a control token, as
// mpitron's GPT-2 path does); "hf_ids" when the Rust default (special tokens matched in the
// text too) differs; "decode" = decode(ids) (special tokens kept, no clean-up of spaces: the Rust
// decoder's output). "concat_decode" is the decode of all "ids" one after another (what one
// `mpitron tokenizer decode` call is checked against).
// With PYTHON TEXTS_PY (tests/reference/tokenizer_texts.py), every text's pre-tokenizer pieces
// are also cut by Oniguruma itself (`TEXTS_PY onig-split`); where they differ from tokenizers.js's
// (its translation of the Oniguruma pattern to a JavaScript RegExp is not exact) the text gets
// "onig_ids": the ids of Oniguruma's pieces, through the same normalizer, byte mapping and BPE.
import fs from "fs";
import path from "path";
import { spawnSync } from "child_process";
import { pathToFileURL } from "url";

const [modules, tokPath, textsPath, outPath, python, textsPy] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node hf_tokenizers_check.mjs NODE_MODULES TOKENIZER TEXTS.json OUT.json [PYTHON TEXTS_PY]");
  process.exit(2);
}
const { Tokenizer } = await import(pathToFileURL(path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const jsonFile = fs.statSync(tokPath).isDirectory() ? path.join(tokPath, "tokenizer.json") : tokPath;
const configFile = path.join(path.dirname(jsonFile), "tokenizer_config.json");
const tokenizerJson = JSON.parse(fs.readFileSync(jsonFile, "utf8"));
const tokenizerConfig = fs.existsSync(configFile) ? JSON.parse(fs.readFileSync(configFile, "utf8")) : {};
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
const t0 = Date.now();

// Two tokenizers over the same parsed JSON: as published (special tokens matched in text: the
// Rust default, reported) and with the special added tokens left out of the added-token split
// (their text then goes through the normalizer, pre-tokenizer and BPE like any other text).
const hf = new Tokenizer(tokenizerJson, tokenizerConfig);
const plainJson = { ...tokenizerJson, added_tokens: tokenizerJson.added_tokens.filter((t) => !t.special) };
const tok = new Tokenizer(plainJson, { ...tokenizerConfig, additional_special_tokens: [] });
const encode = (t, s) => (s.length ? t.encode(s, { add_special_tokens: false }).ids : []);
const decode = (ids) => (ids.length ? hf.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "");

// GPT-2's byte <-> printable character table (ByteLevel's), to read a piece back as text.
const byteToChar = (() => {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); ++n; }
  const m = new Array(256);
  bs.forEach((b, i) => { m[b] = String.fromCharCode(cs[i]); });
  return m;
})();
const charToByte = new Map(byteToChar.map((c, b) => [c, b]));
const toByteLevel = (s) => Array.from(new TextEncoder().encode(s), (b) => byteToChar[b]).join("");
const fromByteLevel = (s) => new TextDecoder("utf-8", { ignoreBOM: true }).decode(Uint8Array.from(Array.from(s, (c) => charToByte.get(c))));

// The pre-tokenizer as Oniguruma patterns, applied in order: Split (Regex, Isolated, not inverted)
// and ByteLevel with use_regex (GPT-2's pattern, as the Rust ByteLevel compiles it). Anything
// else: no Oniguruma comparison for this tokenizer (the reason is reported).
const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
function onigPlan(pt) {
  const plan = { patterns: [], byteLevel: false, unsupported: null };
  const walk = (p) => {
    if (!p || plan.unsupported) return;
    if (p.type === "Sequence") return p.pretokenizers.forEach(walk);
    if (p.type === "Split" && p.pattern?.Regex !== undefined && p.behavior === "Isolated" && !p.invert) {
      return void plan.patterns.push(p.pattern.Regex);
    }
    if (p.type === "ByteLevel" && !p.add_prefix_space) {
      plan.byteLevel = true;
      if (p.use_regex ?? true) plan.patterns.push(GPT2_PATTERN);
      return;
    }
    plan.unsupported = `pre-tokenizer ${JSON.stringify(p).slice(0, 80)}`;
  };
  walk(pt);
  if (!plan.unsupported && plan.patterns.length && !plan.byteLevel) plan.unsupported = "a regex pre-tokenizer without ByteLevel";
  return plan;
}

// Encode every text, recording what reaches the pre-tokenizer (the normalized sections).
const origPre = tok.pre_tokenizer;
let sections = [];
if (origPre) tok.pre_tokenizer = (s, o) => { sections.push(s); return origPre(s, o); };
const results = texts.map((text) => {
  sections = [];
  const ids = encode(tok, text);
  const r = { ids, decode: decode(ids), sections };
  const hfIds = encode(hf, text);
  if (JSON.stringify(hfIds) !== JSON.stringify(ids)) r.hf_ids = hfIds;
  return r;
});
const encodeSeconds = (Date.now() - t0) / 1000;

const info = { tokenizer: jsonFile, texts: texts.length, encode_seconds: encodeSeconds, onig: null, js_vs_onig: 0 };
// What the post-processor puts before a text (TemplateProcessing's BOS: LLaMA-2's <s>), which
// prep puts before every document: encode with and without special tokens, the ids in front.
{
  const withSpecial = hf.encode("a", { add_special_tokens: true }).ids, plainIds = hf.encode("a", { add_special_tokens: false }).ids;
  const at = withSpecial.findIndex((_, k) => plainIds.every((id, j) => withSpecial[k + j] === id));
  info.bos_prefix = at > 0 ? withSpecial.slice(0, at) : [];
}
const plan = onigPlan(tokenizerJson.pre_tokenizer);
info.patterns = plan.patterns;
if (!python) {
  info.onig = "not asked";
} else if (!plan.patterns.length) {
  info.onig = plan.unsupported ? `not compared: ${plan.unsupported}` : "no regex in the pre-tokenizer";
} else if (plan.unsupported) {
  info.onig = `not compared: ${plan.unsupported}`;
} else {
  const all = results.flatMap((r) => r.sections);
  const run = spawnSync(python, [textsPy, "onig-split"], { input: JSON.stringify({ patterns: plan.patterns, texts: all }), maxBuffer: 1 << 30 });
  const reply = run.status === 0 ? JSON.parse(run.stdout.toString()) : { error: run.stderr.toString() };
  if (reply.error) {
    info.onig = `unavailable: ${reply.error.trim().split("\n").pop()}`;
  } else {
    info.onig = `Oniguruma ${reply.version}`;
    let k = 0;
    const onigPieces = new Map();
    for (const r of results) {
      let differs = false;
      for (const s of r.sections) {
        const mine = origPre(s, {}).map(fromByteLevel);
        const theirs = reply.pieces[k++];
        onigPieces.set(s, theirs);
        if (JSON.stringify(mine) !== JSON.stringify(theirs)) {
          differs = true;
          r.js_pieces = (r.js_pieces || []).concat(mine);
          r.onig_pieces = (r.onig_pieces || []).concat(theirs);
        }
      }
      r.onig_differs = differs;
    }
    // Oniguruma's pieces through everything else unchanged.
    tok.pre_tokenizer = (s) => (onigPieces.get(s) ?? []).map(toByteLevel);
    texts.forEach((text, i) => {
      if (!results[i].onig_differs) return;
      info.js_vs_onig += 1;
      results[i].onig_ids = encode(tok, text);
    });
    tok.pre_tokenizer = origPre;
  }
}
for (const r of results) delete r.sections;
const concatIds = results.flatMap((r) => r.ids);
const out = {
  info,
  special_added: tokenizerJson.added_tokens.filter((t) => t.special).length,
  texts: results,
  concat_decode: decode(concatIds),
};
fs.writeFileSync(outPath, JSON.stringify(out));
console.log(`tokenizers.js: ${texts.length} texts, ${concatIds.length} tokens in ${encodeSeconds.toFixed(2)} s; ` +
            `Oniguruma check: ${info.onig}; pieces differ on ${info.js_vs_onig} texts`);
