# The checkpoint tests' shared set-up, runs and checks (test_checkpoint_disk, test_checkpoint_async
# source it): lib.sh, a fortunes dataset in $tmp/data, `common` (the job arguments of every run:
# 8 steps, a save every 2), $mnt for a tmpfs (a disk-full case mounts it there).
source "$(dirname "$0")/lib.sh"
say() { echo "== $*"; }
mnt="$tmp/tmpfs"
# Lazy unmount: a hung rank of a failed run may still hold a file there. TERM (the suite's
# timeout) runs the EXIT trap too, so no tmpfs is left mounted.
trap 'umount -l "$mnt" 2>/dev/null || true; rm -rf "$tmp"' EXIT
trap 'exit 143' TERM INT

prep_fortunes "$tmp/data" 200000 fortunes computers science

common=(--data.path="$tmp/data" --train.steps=8 --train.micro_batch=2 --train.global_batch=4 --checkpoint.every=2
        --checkpoint.keep=0 --eval.every=0 --eval.batches=0 --log.every=1 --train.peak_flops=1e11 --model.seq_len=32)

# train NAME NP [args...]: np ranks on run dir $tmp/NAME, log $tmp/NAME.log; sets $rc and $secs.
train() {
  local name=$1 np=$2
  shift 2
  local t0=$SECONDS
  rc=0
  timeout 120 $MPIRUN -np "$np" "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/$name" "$@" \
    >"$tmp/$name.log" 2>&1 || rc=$?
  secs=$((SECONDS - t0))
  [ $rc -ne 124 ] || { cat "$tmp/$name.log"; fail "$name: still running after 120 s (hang)"; }
}
ok_run() { train "$@"; [ $rc -eq 0 ] || { cat "$tmp/$1.log"; fail "$1 exited $rc"; }; }
expect_log() {  # name pattern why
  grep -Eq -- "$2" "$tmp/$1.log" || { cat "$tmp/$1.log"; fail "$1: $3 (no line matching: $2)"; }
}
latest_is() {  # name step
  local l
  l=$(readlink "$tmp/$1/ckpt/latest" || true)
  [ "$l" = "$(printf 'step_%08d.h5' "$2")" ] || fail "$1: latest -> '$l', want step $2"
}
no_temp_left() { ! ls -a "$tmp/$1/ckpt" | grep -q '\.tmp$' || fail "$1: a partial file is left: $(ls -a "$tmp/$1/ckpt")"; }
# same_as REF NAME: NAME's metrics.jsonl has steps 1..8 once each, losses bit-identical to REF's.
same_as() {
  /usr/bin/python3 - "$tmp/$1/metrics.jsonl" "$tmp/$2/metrics.jsonl" <<'PY' || fail "$2: losses vs $1"
import collections, json, sys
def losses(p):
    rows = [r for r in map(json.loads, open(p)) if "loss" in r]
    dup = [s for s, n in collections.Counter(r["step"] for r in rows).items() if n > 1]
    assert not dup, f"{p}: steps logged twice: {dup}"
    return {r["step"]: r["loss"] for r in rows}
ref, run = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(run) == list(range(1, 9)), f"steps {sorted(run)}"
bad = {s: (run[s], ref[s]) for s in run if run[s] != ref[s]}
assert not bad, f"losses differ from the uninterrupted run: {bad}"
print(f"{sys.argv[2]}: steps 1-8 once each, bit-identical to {sys.argv[1]}")
PY
}
