#!/usr/bin/env bash
# prep --format chat against references nobody here wrote:
#   - the rendered text of every conversation equals what python3-jinja2 renders from the published
#     chat template strings (chatml; Meta-Llama-3-8B-Instruct; Llama-2-7b-chat-hf;
#     Mixtral-8x7B-Instruct-v0.1), on a varied set: system prompt or not, multi-turn, unicode,
#     empty content, whitespace the templates strip; the byte tokenizer keeps markers as text;
#   - the conversations a template refuses (jinja2's raise_exception) are exactly the ones prep
#     refuses (counted with --on-bad-line skip);
#   - the loss mask trains exactly the assistant replies and their end-of-turn markers
#     (--loss-on assistant), every token with --loss-on all;
#   - with a SentencePiece model (spm_train), llama2's <s> and </s> become its control ids and the
#     token ids equal python3-sentencepiece's encoding of the text between them;
#   - generate --chat feeds the model jinja2's rendering with add_generation_prompt;
#   - bad records are named by file and line.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

/usr/bin/python3 - "$tmp" <<'PY'
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
    [m(A, "The assistant first.")],                      # llama2 and mistral refuse
    [m(U, "u1"), m(U, "u2"), m(A, "two users")],           # llama2 and mistral refuse
    [m(S, "sys"), m(U, "q"), m(A, "a"), m(U, "q2"), m(A, "a2")],
    [m(U, "  \u3000ideographic space\u00a0"), m(A, "\u2003em space\u2003")],
]
with open(f"{tmp}/chat.jsonl", "w") as f:
    for c in convs:
        f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
PY

# Each template through prep with the byte tokenizer, both loss modes.
for t in chatml llama3 llama2 mistral; do
  for w in assistant all; do
    "$MPITRON" prep --input "$tmp/chat.jsonl" --format chat --chat-template $t --loss-on $w --tokenizer byte \
      --out "$tmp/$t-$w" --val-fraction 0 --on-bad-line skip >"$tmp/$t-$w.log" 2>&1 || { cat "$tmp/$t-$w.log"; fail "prep $t"; }
  done
done

/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
import h5py, jinja2, numpy as np
tmp = sys.argv[1]
# The published chat_template strings (tokenizer_config.json of the models named above).
T = {
 "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
 "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
 "llama2": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
 "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
}
BOS = {"chatml": "", "llama3": "<|begin_of_text|>", "llama2": "<s>", "mistral": "<s>"}
EOS = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "llama2": "</s>", "mistral": "</s>"}
def fail(msg): raise AssertionError(msg)
class Refused(Exception): pass
def raise_exception(msg): raise Refused(msg)
env = jinja2.Environment()
convs = [json.loads(l)["messages"] for l in open(f"{tmp}/chat.jsonl")]
def trained_text(t, msgs):  # the assistant replies as the template writes them, with their end marker
    out = ""
    for x in msgs:
        if x["role"] != "assistant": continue
        c = x["content"]
        out += {"chatml": c + EOS[t], "llama3": c.strip() + EOS[t], "llama2": " " + c.strip() + " " + EOS[t],
                "mistral": c + EOS[t]}[t]
    return out
def docs(d):
    f = h5py.File(f"{d}/train_00000.h5")
    tok = f["tokens"][:].astype(np.int64); mask = f["loss_mask"][:]
    ends = np.flatnonzero(tok == 256)
    out, at = [], 0
    for e in ends:
        out.append((tok[at:e], mask[at:e], mask[e])); at = e + 1
    assert at == len(tok), "shard does not end with an end-of-text"
    return out
checked = 0
for t, src in T.items():
    tmpl = env.from_string(src)
    want, refused = [], 0
    for c in convs:
        try:
            want.append((tmpl.render(messages=c, bos_token=BOS[t], eos_token=EOS[t], add_generation_prompt=False,
                                     raise_exception=raise_exception), trained_text(t, c)))
        except Refused:
            refused += 1
    for w in ("assistant", "all"):
        got = docs(f"{tmp}/{t}-{w}")
        if len(got) != len(want): fail(f"{t}: {len(got)} documents, jinja2 renders {len(want)} (refuses {refused})")
        log = open(f"{tmp}/{t}-{w}.log").read()
        if refused and f"{refused} bad" not in log and f"skipped {refused}" not in log:
            print(log); fail(f"{t}: prep does not report the {refused} conversations the template refuses")
        for (ids, mask, eot_mask), (text, tr) in zip(got, want):
            b = bytes(ids.astype(np.uint8))
            if b.decode("utf-8") != text: fail(f"{t}: rendered {b.decode('utf-8')!r}, jinja2 {text!r}")
            if w == "all":
                if not mask.all() or eot_mask != 1: fail(f"{t}: --loss-on all left tokens untrained")
            else:
                if bytes(ids[mask == 1].astype(np.uint8)).decode("utf-8") != tr:
                    fail(f"{t}: trained {bytes(ids[mask == 1].astype(np.uint8))!r}, want {tr!r}")
                if eot_mask != 0: fail(f"{t}: the end-of-text after a conversation is trained")
            checked += 1
    print(f"    {t}: {len(want)} conversations equal jinja2's rendering, {refused} refused by both")
print(f"    {checked} (conversation, loss mode) pairs checked")
PY

# SentencePiece: <s> and </s> are the model's control ids, the text between them its encoding.
head -c 60000 /usr/share/games/fortunes/fortunes >"$tmp/corpus.txt"
spm_train --input="$tmp/corpus.txt" --model_prefix="$tmp/sp" --vocab_size=400 --model_type=bpe --byte_fallback=true \
  --bos_id=1 --eos_id=2 --unk_id=0 --minloglevel=2 >"$tmp/spm.log" 2>&1 || { cat "$tmp/spm.log"; fail "spm_train"; }
"$MPITRON" prep --input "$tmp/chat.jsonl" --format chat --chat-template llama2 --tokenizer "sp:$tmp/sp.model" \
  --out "$tmp/sp-llama2" --val-fraction 0 --on-bad-line skip --quiet
/usr/bin/python3 - "$tmp" <<'PY'
import json, re, sys
import h5py, jinja2, numpy as np
import sentencepiece as spm
tmp = sys.argv[1]
sp = spm.SentencePieceProcessor(model_file=f"{tmp}/sp.model")
src = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
class Refused(Exception): pass
def refuse(msg): raise Refused(msg)
tmpl = jinja2.Environment().from_string(src)
want = []
for line in open(f"{tmp}/chat.jsonl"):
    try:
        text = tmpl.render(messages=json.loads(line)["messages"], bos_token="<s>", eos_token="</s>", raise_exception=refuse)
    except Refused:
        continue
    ids = []
    for part in re.split(r"(<s>|</s>)", text):  # the markers are control pieces; the rest encoded as text
        if part in ("<s>", "</s>"): ids.append(sp.piece_to_id(part))
        elif part: ids += sp.encode(part)
    want.append(ids + [sp.eos_id()])
tok = list(h5py.File(f"{tmp}/sp-llama2/train_00000.h5")["tokens"][:])
got, cur = [], []
offs = list(h5py.File(f"{tmp}/sp-llama2/train_00000.h5")["doc_offsets"][:]) + [len(tok)]
got = [tok[a:b] for a, b in zip(offs, offs[1:])]
assert [list(map(int, g)) for g in got] == want, (got[:2], want[:2])
assert sp.piece_to_id("<s>") == 1 and sp.piece_to_id("</s>") == 2
print(f"    sentencepiece llama2: {len(want)} conversations, ids equal python3-sentencepiece's (<s> = 1, </s> = 2)")
PY

# generate --chat: the prompt ids are the template's rendering with its generation prompt.
timeout -k 5 120 "$MPITRON" train jobs/tiny.toml --data.path="$tmp/chatml-assistant" --model.seq_len=256 --train.steps=1 \
  --train.micro_batch=1 --eval.every=0 --job.run_dir="$tmp/run" >"$tmp/run.log" 2>&1 || { tail -3 "$tmp/run.log"; fail "train"; }
for t in chatml llama3 llama2; do
  "$MPITRON" generate "$tmp/run" --chat $t --system "Be brief." --prompt " Hi ☕ " --max-tokens 0 \
    --logprobs-out "$tmp/gen-$t.json" >/dev/null 2>&1 || fail "generate --chat $t"
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
import jinja2
tmp = sys.argv[1]
T = {
 "chatml": ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}", ""),
 "llama3": ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}", "<|begin_of_text|>"),
 "llama2": ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}", "<s>"),
}
msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi ☕ "}]
for t, (src, bos) in T.items():
    text = jinja2.Environment().from_string(src).render(messages=msgs, bos_token=bos, eos_token="</s>", add_generation_prompt=True)
    ids = json.load(open(f"{tmp}/gen-{t}.json"))["ids"]
    assert ids == list(text.encode()), (t, bytes(ids), text)
print("    generate --chat: the prompt is jinja2's rendering with add_generation_prompt (chatml, llama3, llama2)")
PY

# Bad records, named by file and line.
bad() {  # line why-pattern
  printf '%s\n' '{"messages": [{"role": "user", "content": "ok"}]}' "$1" >"$tmp/bad.jsonl"
  ! "$MPITRON" prep --input "$tmp/bad.jsonl" --format chat --chat-template chatml --out "$tmp/bad" --quiet \
    >"$tmp/bad.log" 2>&1 || fail "accepted: $1"
  grep -q "bad.jsonl:2: $2" "$tmp/bad.log" || fail "no 'bad.jsonl:2: $2' in: $(cat "$tmp/bad.log")"
}
bad '{"messages": [{"role": "bot", "content": "x"}]}' "message 1 has the unknown role 'bot' (allowed: system, user, assistant)"
bad '{"messages": [{"role": "user"}]}' 'message 1 has no "content" string'
bad '{"messages": "hello"}' '"messages" is a string, not a list'
bad '{"text": "no messages"}' 'no "messages" field'
! "$MPITRON" prep --input "$tmp/chat.jsonl" --format chat --chat-template vicuna --out "$tmp/x" --quiet >"$tmp/x.log" 2>&1 ||
  fail "an unknown template was accepted"
grep -q "needs --chat-template chatml, llama3, llama2, mistral or hf:DIR (got 'vicuna')" "$tmp/x.log" || fail "$(cat "$tmp/x.log")"
echo "    bad records and an unknown template named"
