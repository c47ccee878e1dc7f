#!/usr/bin/env bash
# sanitizers: skip (disk faults and flipped bits: the readers of damaged files run sanitized in the checkpoint fuzzer)
# Checkpoints survive the disk (reliability issue, item 4). Each case checks that the previous
# complete checkpoint stays loadable, `latest` never names a partial or corrupt file, the error
# names the file and the cause, and train.resume = auto skips a corrupt `latest` (saying so) for
# the newest checkpoint that verifies -- never a crash, a hang or a silent fresh start:
#   - flipped bits: in tensor data, in HDF5 metadata, truncated (np 2: all ranks agree, fall back,
#     and the continuation is bit-identical to the uninterrupted run); an explicit corrupt path
#     and "every checkpoint corrupt" are errors; a random-flip sweep over `inspect --verify`;
#   - a rank killed in the middle of a save (after the first tensor, and with the file complete
#     but not renamed yet; keep = 1): the partial file is never used and is cleaned up on resume;
#   - the disk full during a save (a small tmpfs; skipped when mount is not permitted) and the file
#     size limit (ulimit -f): the job ends within 30 s naming the file and "No space left on
#     device" / "File too large", the partial file is removed, the last checkpoint loads.
set -euo pipefail
source "$(dirname "$0")/ckpt_lib.sh"
same_as_ref() { same_as ref "$1"; }
copy_ref() { cp -a "$tmp/ref" "$tmp/$1"; }  # a finished run: step_2 .. step_8, latest -> step_8

say "reference: np 2, 8 steps, a checkpoint every 2"
ok_run ref 2
latest_is ref 8

say "flipped bit in a tensor of latest: auto skips it (saying why) and resumes from step 6, bit-identical"
copy_ref flipdata
/usr/bin/python3 tests/e2e/ckpt_flip.py flip "$tmp/flipdata/ckpt/step_00000008.h5" data
ok_run flipdata 2
expect_log flipdata "warning: checkpoint '.*step_00000008.h5' is corrupted: dataset 'model/h.0.mlp.c_fc.weight' does not match its checksum" "the corrupt file and the cause"
expect_log flipdata "resuming from step_00000006.h5 instead" "the fallback"
expect_log flipdata "^resumed from .*step_00000006.h5: step 6 " "resume from step 6"
same_as_ref flipdata
latest_is flipdata 8
timeout 60 "$MPITRON" inspect --verify "$tmp/flipdata/ckpt/latest" >/dev/null || fail "the rewritten step 8 does not verify"

say "flipped bit in HDF5 metadata (an object header) of latest: the same, caught by HDF5's checksum"
copy_ref fliphdr
/usr/bin/python3 tests/e2e/ckpt_flip.py flip "$tmp/fliphdr/ckpt/step_00000008.h5" header
ok_run fliphdr 2
expect_log fliphdr "warning: checkpoint '.*step_00000008.h5' is corrupted: .*metadata checksum" "the corrupt file and the cause"
expect_log fliphdr "resuming from step_00000006.h5 instead" "the fallback"
same_as_ref fliphdr

say "truncated latest (a partial file under the final name) and a corrupt step 6: back to step 4"
copy_ref trunc
size=$(stat -c %s "$tmp/trunc/ckpt/step_00000008.h5")
truncate -s $((size / 2)) "$tmp/trunc/ckpt/step_00000008.h5"
/usr/bin/python3 tests/e2e/ckpt_flip.py flip "$tmp/trunc/ckpt/step_00000006.h5" text
ok_run trunc 2
expect_log trunc "warning: cannot open checkpoint '.*step_00000008.h5': .*truncated file" "names truncation"
expect_log trunc "warning: checkpoint '.*step_00000006.h5' is corrupted: its metadata .* does not match its checksum" "names the metadata checksum"
expect_log trunc "resuming from step_00000004.h5 instead .*skipped step_00000008.h5, step_00000006.h5" "the fallback"
same_as_ref trunc

say "explicit train.resume = a corrupt file: an error naming it and the cause, no fallback"
copy_ref explicit
/usr/bin/python3 tests/e2e/ckpt_flip.py flip "$tmp/explicit/ckpt/step_00000006.h5" data
cp "$tmp/explicit/metrics.jsonl" "$tmp/explicit.metrics"
train explicit 2 --train.resume="$tmp/explicit/ckpt/step_00000006.h5"
[ $rc -eq 2 ] || { cat "$tmp/explicit.log"; fail "explicit corrupt path: exit $rc, want 2"; }
expect_log explicit "error: checkpoint '.*step_00000006.h5' is corrupted: dataset .* does not match its checksum" "file + cause"
! grep -q "resuming from\|^step " "$tmp/explicit.log" || fail "explicit corrupt path: fell back or trained"
cmp -s "$tmp/explicit/metrics.jsonl" "$tmp/explicit.metrics" || fail "explicit corrupt path: metrics.jsonl changed"

say "every checkpoint corrupt, four ways (one sends HDF5 into an endless loop): an error listing them"
copy_ref allbad
flip() { /usr/bin/python3 tests/e2e/ckpt_flip.py flip "$tmp/allbad/ckpt/step_0000000$1.h5" $2 >/dev/null; }
flip 8 gheap; flip 6 header; flip 4 data; flip 2 superblock
cp "$tmp/allbad/metrics.jsonl" "$tmp/allbad.metrics"
MPITRON_CKPT_CHECK_TIMEOUT_S=3 train allbad 2
[ $rc -eq 2 ] || { cat "$tmp/allbad.log"; fail "all corrupt: exit $rc, want 2"; }
expect_log allbad "step_00000008.h5' is corrupted: reading its HDF5 metadata did not finish within 3 s" "the hang, cut short"
expect_log allbad "error: train.resume = auto: no checkpoint in '.*' verifies \(tried step_00000008.h5, step_00000006.h5, step_00000004.h5, step_00000002.h5" "the list"
! grep -q "^step " "$tmp/allbad.log" || fail "all corrupt: trained anyway"
cmp -s "$tmp/allbad/metrics.jsonl" "$tmp/allbad.metrics" || fail "all corrupt: metrics.jsonl changed"

say "random bit flips: inspect --verify rejects each one naming the file, or it is in a byte nothing reads"
export MPITRON_CKPT_CHECK_TIMEOUT_S=3  # a flip that hangs HDF5 is reported after 3 s
/usr/bin/python3 tests/e2e/ckpt_flip.py sweep "$tmp/ref/ckpt/step_00000004.h5" 120 "${FLIP_SEED:-$RANDOM}"
for where in data header text superblock gheap gheapsize; do
  cp "$tmp/ref/ckpt/step_00000004.h5" "$tmp/one.h5"
  /usr/bin/python3 tests/e2e/ckpt_flip.py flip "$tmp/one.h5" $where >/dev/null
  if timeout 60 "$MPITRON" inspect --verify "$tmp/one.h5" >"$tmp/one.log" 2>&1; then fail "a flipped bit in the $where verifies"; fi
  grep -q "$tmp/one.h5" "$tmp/one.log" || fail "$where: the error does not name the file: $(cat "$tmp/one.log")"
  [ $where != gheapsize ] || grep -q "HDF5 crashed reading its metadata" "$tmp/one.log" ||
    fail "gheapsize: not HDF5's crash, contained in the checking child: $(cat "$tmp/one.log")"
  echo "  $where: $(tail -1 "$tmp/one.log" | sed "s|$tmp/||")"
done
unset MPITRON_CKPT_CHECK_TIMEOUT_S

say "rank 1 killed in the middle of a save (keep = 1): latest and step 2 intact; the partial file cleaned up"
MPITRON_FAULT=kill@ckpt_write,rank=1,step=4 train midsave 2 --checkpoint.keep=1
[ $rc -ne 0 ] && [ $secs -le 30 ] || { cat "$tmp/midsave.log"; fail "kill mid-save: exit $rc after $secs s"; }
expect_log midsave "MPITRON_FAULT: kill at ckpt_write \(step 4\)" "the fault fired"
latest_is midsave 2
[ -f "$tmp/midsave/ckpt/.step_00000004.h5.tmp" ] || fail "kill mid-save: no partial file (did the save start?)"
[ ! -e "$tmp/midsave/ckpt/step_00000004.h5" ] || fail "kill mid-save: a step_4 file exists"
timeout 60 "$MPITRON" inspect --verify "$tmp/midsave/ckpt/latest" >/dev/null || fail "kill mid-save: step 2 does not verify"
ok_run midsave 2 --checkpoint.keep=1
expect_log midsave "^removed .*/\.step_00000004\.h5\.tmp \(a partial checkpoint" "the cleanup"
expect_log midsave "^resumed from .*step_00000002.h5: step 2 " "resume from step 2"
no_temp_left midsave
same_as_ref midsave

say "rank 0 killed with the file complete but not renamed: never picked up"
MPITRON_FAULT=kill@ckpt_rename,rank=0,step=6 train prerename 2
[ $rc -ne 0 ] || fail "kill before rename: exit 0"
latest_is prerename 4
[ -f "$tmp/prerename/ckpt/.step_00000006.h5.tmp" ] && [ ! -e "$tmp/prerename/ckpt/step_00000006.h5" ] ||
  fail "kill before rename: $(ls -a "$tmp/prerename/ckpt")"
ok_run prerename 2
expect_log prerename "^resumed from .*step_00000004.h5: step 4 " "resume from step 4"
no_temp_left prerename
same_as_ref prerename

say "disk full during a save (tmpfs with room for one checkpoint and a half)"
ckpt_bytes=$(stat -c %s "$tmp/ref/ckpt/step_00000002.h5")
mkdir -p "$mnt"
if mount -t tmpfs -o size=$((ckpt_bytes * 3 / 2 / 1024))k tmpfs "$mnt" 2>"$tmp/mount.err"; then
  mkdir -p "$tmp/full" && ln -s "$mnt" "$tmp/full/ckpt"
  train full 2
  [ $rc -ne 0 ] && [ $secs -le 30 ] || { cat "$tmp/full.log"; fail "disk full: exit $rc after $secs s"; }
  expect_log full "error: cannot write checkpoint '.*/\.step_00000004\.h5\.tmp': .*No space left on device" "file + cause"
  expect_log full "step 4 was not saved \(the partial file was removed\)" "the cleanup"
  echo "disk full: exit $rc after $secs s: $(grep -o 'No space left on device[^;]*' "$tmp/full.log" | head -1)"
  latest_is full 2
  no_temp_left full
  timeout 60 "$MPITRON" inspect --verify "$tmp/full/ckpt/latest" >/dev/null || fail "disk full: step 2 does not verify"
  mount -o remount,size=$((ckpt_bytes * 6 / 1024))k "$mnt"  # room again: the run goes on from step 2
  ok_run full 2
  expect_log full "^resumed from .*step_00000002.h5: step 2 " "resume from step 2"
  same_as_ref full
  umount "$mnt"
else
  echo "SKIP disk-full case: cannot mount a tmpfs here ($(head -1 "$tmp/mount.err"))"
fi

say "file size limit (ulimit -f) below the checkpoint size: File too large, not a SIGXFSZ kill"
mkdir -p "$tmp/fsize/ckpt"
cp -a "$tmp/ref/ckpt/step_00000002.h5" "$tmp/ref/ckpt/step_00000004.h5" "$tmp/fsize/ckpt/"
ln -s step_00000004.h5 "$tmp/fsize/ckpt/latest"
# The limit applies to the ranks only (mpirun's own PMIx files are larger), and the ranks talk over
# tcp: the shared-memory transport's segment is a file too, bigger than the limit.
t0=$SECONDS
rc=0
timeout 120 $MPIRUN --mca btl self,tcp -np 2 bash -c "ulimit -f $((ckpt_bytes * 2 / 3 / 1024)); exec \"\$0\" \"\$@\"" \
  "$MPITRON" train jobs/tiny.toml "${common[@]}" --job.run_dir="$tmp/fsize" >"$tmp/fsize.log" 2>&1 || rc=$?
secs=$((SECONDS - t0))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $secs -le 30 ] || { cat "$tmp/fsize.log"; fail "ulimit -f: exit $rc after $secs s"; }
expect_log fsize "error: cannot write checkpoint '.*/\.step_00000006\.h5\.tmp': .*File too large \(the file size limit \(ulimit -f\)" "file + cause"
echo "ulimit -f: exit $rc after $secs s: $(grep -o 'File too large[^;]*' "$tmp/fsize.log" | head -1)"
latest_is fsize 4
no_temp_left fsize
timeout 60 "$MPITRON" inspect --verify "$tmp/fsize/ckpt/latest" >/dev/null || fail "ulimit -f: step 4 does not verify"
echo "ok"
