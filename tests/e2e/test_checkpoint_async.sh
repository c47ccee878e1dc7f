#!/usr/bin/env bash
# sanitizers: skip (timing of background saves; the writer runs sanitized in e2e/test_checkpoint and mpi/test_checkpoint)
# Asynchronous checkpoints (checkpoint.async = true; the async-checkpoint issue, items 1 and 2):
#   - the files a background save writes hold the same tensors and checksums, bit for bit, as the
#     synchronous save's, under dp 2 (ZeRO 0 and 3), tp 2 and pp 2; the losses are the same;
#   - SIGUSR1 while a background write is held up: the preemption save waits for it, writes its
#     own checkpoint and the job exits 75; both files are complete and the resume is bit-identical;
#   - rank 1 killed by SIGKILL inside its background write: `latest` still names the previous
#     checkpoint, the partial file is hidden and removed on resume, the resume is bit-identical;
#   - the disk full (tmpfs) and the file size limit (ulimit -f) during a background write: the job
#     stops at the next step boundary with the writer's message (file and cause), the partial file
#     is removed, `latest` names the last good checkpoint.
set -euo pipefail
source "$(dirname "$0")/ckpt_lib.sh"
# same_files A B STEP...: the checkpoints of those steps hold the same tensors and checksums.
same_files() {
  local a=$1 b=$2 s f
  shift 2
  for s in "$@"; do
    f=$(printf 'step_%08d.h5' "$s")
    /usr/bin/python3 - "$tmp/$a/ckpt/$f" "$tmp/$b/ckpt/$f" <<'PY' || fail "$b: $f differs from $a's"
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert a.attrs["complete"] == 1 and b.attrs["complete"] == 1
assert a.attrs["step"] == b.attrs["step"] and a.attrs["optimizer_steps"] == b.attrs["optimizer_steps"]
def walk(g, h, path):
    assert sorted(g) == sorted(h), f"{path}: {sorted(g)} vs {sorted(h)}"
    n = 0
    for k in g:
        if isinstance(g[k], h5py.Dataset):
            x, y = g[k][()], h[k][()]
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f"{path}/{k}: data"
            assert g[k].attrs["checksum"] == h[k].attrs["checksum"], f"{path}/{k}: checksum"
            n += 1
        else:
            n += walk(g[k], h[k], f"{path}/{k}")
    return n
n = sum(walk(a[g], b[g], g) for g in ("model", "optim", "sampler", "rng"))
assert n > 0
PY
  done
}

say "background saves write what the synchronous saves write (np 2: dp 2 zero 0 and 3, tp 2, pp 2)"
for layout in "dp2:" "zero3:--parallel.zero=3" "tp2:--parallel.tp=2" "pp2:--parallel.pp=2"; do
  name=${layout%%:*} args=${layout#*:}
  ok_run "sync_$name" 2 $args
  ok_run "async_$name" 2 $args --checkpoint.async=true
  for s in 2 4 6; do
    expect_log "async_$name" "^checkpoint step $s: snapshot taken in [0-9.]+ s, writing in the background" "step $s in the background"
    expect_log "async_$name" "^checkpoint step $s -> .*step_0000000$s.h5 \(written in the background in" "step $s done"
  done
  expect_log "async_$name" "^checkpoint step 8 -> .*step_00000008.h5$" "the last step's save in the foreground"
  same_as "sync_$name" "async_$name"
  same_files "sync_$name" "async_$name" 2 4 6 8
  latest_is "async_$name" 8
  no_temp_left "async_$name"
  echo "$name: steps 2, 4, 6 in the background, 8 in the foreground; files and losses identical"
done

say "the trace: the snapshot and the background write on the checkpoint track"
# Steps 3 and 4 take 300 ms more each (timing only): step 2's write (tens of ms) ends inside the window.
MPITRON_FAULT="slow@step_begin,ms=300" ok_run trace 2 --checkpoint.async=true --train.trace_steps='[2, 4]'
/usr/bin/python3 tests/e2e/check_trace_nesting.py "$tmp/trace/trace" 2 || fail "trace: events overlap partly"
/usr/bin/python3 - "$tmp/trace/trace" <<'PY' || fail "trace: the checkpoint track"
import json, sys
for rank in (0, 1):
    t = json.load(open(f"{sys.argv[1]}/rank_{rank}.json"))
    names = {e["tid"]: e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    ck = [e for e in t["traceEvents"] if e["ph"] == "X" and names.get(e["tid"]) == "checkpoint"]
    got = sorted(e["name"] for e in ck)
    assert got == ["background write of step 2", "snapshot of step 2"], f"rank {rank}: {got}"
    snap = next(e for e in ck if e["name"].startswith("snapshot"))
    write = next(e for e in ck if e["name"].startswith("background"))
    assert snap["ts"] + snap["dur"] <= write["ts"] + 1, "the write starts after the snapshot"
    step3 = next(e for e in t["traceEvents"] if e["ph"] == "X" and e["name"] == "step 3")
    print(f"rank {rank}: snapshot {snap['dur']:.0f} us, background write {write['dur']:.0f} us, "
          f"step 3 began {step3['ts'] - write['ts']:.0f} us after the write did")
PY

say "SIGUSR1 while the background write of step 2 is held up (1.5 s): it is waited for, then step 3 is saved"
# (The write of step 2 takes place while step 3 updates the model: its file must still hold step 2.)
MPITRON_FAULT="slow@ckpt_write,rank=0,ms=1500;usr1@step_begin,rank=1,step=3" train usr1 2 --checkpoint.async=true
[ $rc -eq 75 ] || { cat "$tmp/usr1.log"; fail "SIGUSR1 during a background write: exit $rc, want 75"; }
expect_log usr1 "^checkpoint step 2: snapshot taken" "step 2 in the background"
expect_log usr1 "^waiting for the background checkpoint write of step 2 \(the preemption checkpoint waits for it\)" "the wait"
expect_log usr1 "^checkpoint step 2 -> .*\(written in the background" "step 2 completed"
expect_log usr1 "^checkpoint step 3 -> .*step_00000003.h5$" "the preemption save"
expect_log usr1 "^preempted \(signal 10" "the preemption"
# Step 2's write finished before step 3's save started: its line comes first.
[ "$(grep -nE '^checkpoint step 2 -> ' "$tmp/usr1.log" | cut -d: -f1)" -lt \
  "$(grep -nE '^checkpoint step 3 -> ' "$tmp/usr1.log" | cut -d: -f1)" ] || { cat "$tmp/usr1.log"; fail "order"; }
latest_is usr1 3
no_temp_left usr1
same_files sync_dp2 usr1 2
for s in 2 3; do
  timeout 60 "$MPITRON" inspect --verify "$tmp/usr1/ckpt/step_0000000$s.h5" >/dev/null || fail "usr1: step $s does not verify"
done
ok_run usr1 2 --checkpoint.async=true
expect_log usr1 "^resumed from .*step_00000003.h5: step 3 " "resume from step 3"
same_as sync_dp2 usr1

say "rank 1 SIGKILLed inside its background write of step 4: latest stays step 2"
MPITRON_FAULT="kill@ckpt_write,rank=1,after=2" train bgkill 2 --checkpoint.async=true
[ $rc -ne 0 ] && [ $secs -le 30 ] || { cat "$tmp/bgkill.log"; fail "kill in the background write: exit $rc after $secs s"; }
expect_log bgkill "MPITRON_FAULT: kill at ckpt_write" "the fault fired"
latest_is bgkill 2
[ ! -e "$tmp/bgkill/ckpt/step_00000004.h5" ] || fail "bgkill: a step_4 file exists"
timeout 60 "$MPITRON" inspect --verify "$tmp/bgkill/ckpt/latest" >/dev/null || fail "bgkill: step 2 does not verify"
ok_run bgkill 2 --checkpoint.async=true
expect_log bgkill "^resumed from .*step_00000002.h5: step 2 " "resume from step 2"
no_temp_left bgkill
same_as sync_dp2 bgkill

say "a NaN in rank 1's parameters at a background save: refused on every rank, as a synchronous save refuses"
MPITRON_FAULT="poison@params,step=4,rank=1" train nan 2 --checkpoint.async=true
[ $rc -eq 1 ] || { cat "$tmp/nan.log"; fail "NaN at a background save: exit $rc, want 1"; }
expect_log nan "step 4: the model state holds NaN/inf \(rank 1's parameter 'wte.weight'" "the rank and tensor"
expect_log nan "checkpoint step 4 not written, .*/ckpt/latest names step 2 \(the last good state\)" "what latest names"
latest_is nan 2
no_temp_left nan

say "disk full during the background write of step 4 (tmpfs with room for one checkpoint and a half)"
ckpt_bytes=$(stat -c %s "$tmp/sync_dp2/ckpt/step_00000002.h5")
mkdir -p "$mnt"
if mount -t tmpfs -o size=$((ckpt_bytes * 3 / 2 / 1024))k tmpfs "$mnt" 2>"$tmp/mount.err"; then
  mkdir -p "$tmp/full" && ln -s "$mnt" "$tmp/full/ckpt"
  train full 2 --checkpoint.async=true
  [ $rc -ne 0 ] && [ $secs -le 30 ] || { cat "$tmp/full.log"; fail "disk full: exit $rc after $secs s"; }
  expect_log full "error: the background checkpoint save of step 4 failed: cannot write checkpoint '.*/\.step_00000004\.h5\.tmp': .*No space left on device" "file + cause"
  expect_log full "step 4 was not saved \(the partial file was removed\)" "the cleanup"
  latest_is full 2
  no_temp_left full
  echo "disk full: exit $rc after $secs s, last step logged: $(grep -oE '^step +[0-9]+' "$tmp/full.log" | tail -1)"
else
  echo "SKIP disk-full case: cannot mount a tmpfs here ($(head -1 "$tmp/mount.err"))"
fi

say "file size limit (ulimit -f) below the checkpoint size during a background write"
t0=$SECONDS
rc=0
timeout 120 $MPIRUN --mca btl self,tcp -np 2 bash -c "ulimit -f $((ckpt_bytes * 2 / 3 / 1024)); exec \"\$0\" \"\$@\"" \
  "$MPITRON" train jobs/tiny.toml "${common[@]}" --checkpoint.async=true --job.run_dir="$tmp/fsize" \
  >"$tmp/fsize.log" 2>&1 || rc=$?
secs=$((SECONDS - t0))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $secs -le 30 ] || { cat "$tmp/fsize.log"; fail "ulimit -f: exit $rc after $secs s"; }
expect_log fsize "error: the background checkpoint save of step 2 failed: cannot write checkpoint '.*/\.step_00000002\.h5\.tmp': .*File too large" "file + cause"
[ ! -e "$tmp/fsize/ckpt/latest" ] || fail "ulimit -f: latest exists"
no_temp_left fsize

say "the snapshot in the memory ledger (train.check_ledger: exact per rank, zero 0, 1 and 3) and in plan"
for z in 0 1 3; do
  ok_run "ledger$z" 2 --checkpoint.async=true --train.check_ledger=true --parallel.zero=$z --train.steps=2
  n=$(grep -c "^ledger rank [01] at start: .* ledger OK" "$tmp/ledger$z.log" || true)
  [ "$n" = 2 ] || { cat "$tmp/ledger$z.log"; fail "zero $z: the ledger check at start"; }
  # Each rank writes the ranges it holds alone and its half of the copies both hold (without ZeRO
  # the whole state is such a copy).
  expect_log "ledger$z" "^ledger rank 0 at start: .*checkpoint snapshot tracked ([0-9]+) predicted \1 EXACT" "rank 0's snapshot"
  expect_log "ledger$z" "^ledger rank 1 at start: .*checkpoint snapshot tracked ([0-9]+) predicted \1 EXACT" "rank 1's snapshot"
  echo "zero $z: $(grep -oE "^ledger rank 0 at start: .*checkpoint snapshot tracked [0-9]+" "$tmp/ledger$z.log" | grep -oE "[0-9]+$") B on rank 0"
done
"$MPITRON" plan jobs/tiny.toml "${common[@]}" --checkpoint.async=true --gpus 2 --bytes >"$tmp/plan.log" 2>&1 ||
  { cat "$tmp/plan.log"; fail "plan"; }
snap0=$(grep -oE "^ledger rank 0 at start: .*checkpoint snapshot tracked [0-9]+" "$tmp/ledger0.log" | grep -oE "[0-9]+$")
expect_log plan "^checkpoint.async: a host snapshot of up to $snap0 per rank" "plan's snapshot line (the trainer's figure)"

say "a snapshot that does not fit in the host memory available: refused at start, with the figures"
MPITRON_HOST_MEM_AVAILABLE=100000 train nofit 2 --checkpoint.async=true
[ $rc -eq 2 ] || { cat "$tmp/nofit.log"; fail "no room for the snapshot: exit $rc, want 2"; }
expect_log nofit "error: checkpoint.async = true: the host snapshots of the 2 rank\(s\) on .* take 1.40 MiB \(rank 0's: 718.50 KiB\), more than the 97.66 KiB of host memory available there" "the figures"
! grep -q "^step " "$tmp/nofit.log" || fail "no room for the snapshot: trained anyway"
echo "ok"
