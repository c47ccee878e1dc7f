#!/usr/bin/env bash
# bench/document_mask: what data.document_mask costs on the CPU trainer. A corpus of documents of
# exactly seq_len / 8 tokens (so every window holds 8 whole documents), one GPT-2 model (4 layers,
# d 128, 4 heads, seq 1024: attention is about half of the model FLOPs), the same data trained
# with and without the mask in the same run of this script. Reports the median step time, the
# attention fraction the masked steps needed (metrics' attention_fraction: 1/8 of causal for 8
# equal documents, to first order) and MFU with the attention term counted honestly (only the
# work the documents need). Writes bench/results/document_mask.md.
#   bash bench/document_mask/run.sh [steps]
set -uo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-8}
BIN=${MPITRON:-build/mpitron}
OUT=bench/results/document_mask.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SEQ=1024 DOC=128
# Documents of DOC tokens with the byte tokenizer: DOC - 2 characters, a newline and the eot.
/usr/bin/python3 - "$tmp/docs.txt" $((DOC - 2)) <<'PY'
import random, sys
random.seed(1)
words = open("/usr/share/games/fortunes/fortunes").read().split()
n = int(sys.argv[2])
docs = [" ".join(random.choice(words) for _ in range(n)).replace("%", "")[:n].ljust(n, ".") for _ in range(400)]
open(sys.argv[1], "w").write("\n%\n".join(docs) + "\n")
PY
"$BIN" prep --input "$tmp/docs.txt" --tokenizer byte --out "$tmp/data" --val-fraction 0.05 --doc-separator % --quiet
common=(--data.path="$tmp/data" --model.n_layer=4 --model.d_model=128 --model.n_head=4 --model.d_ff=512
        --model.seq_len=$SEQ --train.micro_batch=2 --train.global_batch=2 --train.steps="$STEPS" --eval.every=0
        --eval.batches=0 --log.every=1 --train.resume=never --checkpoint.every=0 --train.precision=fp32)
summary() {  # metrics.jsonl -> "ms_median mfu_percent attention_fraction"
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
rows = [r for r in rows if r["step"] >= 2]
ms = statistics.median(r["step_ms"] for r in rows)
mfu = statistics.median(r["mfu"] for r in rows)
af = statistics.median(r.get("attention_fraction", 1.0) for r in rows)
print(f"{ms:.1f} {100 * mfu:.1f} {af:.3f}")
PY
}
for mode in false true; do
  OMP_NUM_THREADS=$(nproc) "$BIN" train jobs/tiny.toml "${common[@]}" --data.document_mask=$mode \
    --job.run_dir="$tmp/$mode" >"$tmp/$mode.log" 2>&1 || { tail -5 "$tmp/$mode.log"; exit 1; }
done
read -r ms0 mfu0 af0 <<<"$(summary "$tmp/false/metrics.jsonl")"
read -r ms1 mfu1 af1 <<<"$(summary "$tmp/true/metrics.jsonl")"
ratio=$(/usr/bin/python3 -c "print(f'{$ms1 / $ms0:.2f}')")
layout=$(grep -m1 '^layout' "$tmp/true.log" | sed 's/.*| peak/peak/')
{
  echo "# Document masking on the CPU trainer"
  echo
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), one rank,"
  echo "$(nproc) OpenMP threads, fp32. Command: \`bash bench/document_mask/run.sh $STEPS\`. GPT-2, 4 layers, d 128,"
  echo "4 heads, seq $SEQ, micro-batch 2; every window holds 8 documents of $DOC tokens. MFU against $layout."
  echo
  echo "| data.document_mask | ms/step (median, steps >= 2) | attention work done (of causal) | MFU (attention counted as done) |"
  echo "|---|---|---|---|"
  echo "| false | $ms0 | $af0 | $mfu0% |"
  echo "| true | $ms1 | $af1 | $mfu1% |"
  echo
  echo "Masked / unmasked step time: **${ratio}x**. The mask must cost at most the attention work it"
  echo "skips: a ratio <= 1. The attention kernel computes, per 48-query row block, the keys from the"
  echo "block's first document start to its last query, and the backward's dK, dV products per 48-key"
  echo "block only the queries up to the end of the block's last document; a block's partial overlap"
  echo "with another document is masked, not skipped, so the work done is somewhat more than the"
  echo "fraction above. The softmax rows are still written [T] wide (zeros outside the document)."
} >"$OUT"
cat "$OUT"
