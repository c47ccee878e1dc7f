# Sourced by bench/plan/run.sh and heldout.sh (from the repository root, BUILD set): MPITRON, MPIRUN,
# $tmp (removed on exit) with a byte-tokenized corpus in $tmp/data, the profile (`calibrate` at np 8,
# README's command, run again, up to 3 times in all, while it warns that the machine's speed moved
# during its measurements, as the warning tells a user; or PROFILE reused; the log of every attempt
# in $tmp/calibrate.log), and the models both benches
# train: gpt, llama and moe (4 layers, d_model 256, seq 128; the MoE is that LLaMA with 4 experts
# of 352, top 2: active MLP width 704, the dense one 688).
MPITRON=$PWD/$BUILD/mpitron
MPIRUN="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat /usr/share/games/fortunes/{fortunes,computers,science,wisdom} 2>/dev/null | head -c 400000 >"$tmp/corpus.txt" || true
[ -s "$tmp/corpus.txt" ] || head -c 400000 /dev/urandom | base64 >"$tmp/corpus.txt"
"$MPITRON" prep --input "$tmp/corpus.txt" --tokenizer byte --out "$tmp/data" --quiet
profile=${PROFILE:-$tmp/profile.toml}
if [ -z "${PROFILE:-}" ]; then
  : >"$tmp/calibrate.log"
  for attempt in 1 2 3; do
    start=$(date +%s.%N)
    $MPIRUN -np 8 "$MPITRON" calibrate --out "$profile" 2>&1 </dev/null | grep -v '^mpitron: built with CUDA' >"$tmp/attempt.log"
    { [ "$attempt" -eq 1 ] || echo "calibration, attempt $attempt:"; cat "$tmp/attempt.log"
      echo "calibration: $(echo "$(date +%s.%N) - $start" | bc) s wall (np 8)"; } >>"$tmp/calibrate.log"
    grep -q "^mpitron calibrate: warning: .*calibrate again when the machine is quiet" "$tmp/attempt.log" || break
  done
else
  echo "calibration: reused $PROFILE" >"$tmp/calibrate.log"
fi
gpt=(--model.n_layer=4 --model.d_model=256 --model.n_head=4 --model.seq_len=128)
llama=(--model.preset=llama-tiny --model.n_layer=4 --model.d_model=256 --model.n_head=4 --model.n_kv_head=2
       --model.d_ff=688 --model.seq_len=128)
moe=(--model.preset=llama-moe-tiny --model.n_layer=4 --model.d_model=256 --model.n_head=4 --model.n_kv_head=2
     --model.seq_len=128 --model.moe.n_experts=4 --model.moe.top_k=2 --model.moe.expert_d_ff=352)
