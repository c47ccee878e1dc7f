#!/usr/bin/python3
"""Flipped bits in mpitron checkpoints, for tests/e2e/test_checkpoint_disk.sh (h5py finds where).

usage:
  ckpt_flip.py flip FILE data|header|text|superblock|gheap|gheapsize   flip one bit there, in place
  ckpt_flip.py sweep FILE N SEED                       N copies of FILE with one random bit flipped
        (half of them outside tensor data, where HDF5's metadata lives): `mpitron inspect --verify`
        must reject each one naming the file (exit 2), or -- a bit nothing reads -- report the
        original digest. A crash, a hang, or exit 0 with another digest (a silently different
        checkpoint) fails. $MPITRON is the binary.

Where `flip` hits:
  data        a float of model/h.0.mlp.c_fc.weight         -> its tensor checksum
  header      that dataset's object header                  -> HDF5's metadata checksum
  text        the raw bytes of config/job_toml              -> the meta_checksum attribute
  superblock  the superblock's end-of-file address          -> HDF5's superblock checksum
  gheap       the size of the first string in the global heap (no checksum; HDF5 1.10.8 loops
              forever on it)                               -> the checking child process's time limit
  gheapsize   the same size made 8 GiB larger (HDF5 memcpys past its 4 KiB block and crashes; found
              by the random sweep)                         -> the child's crash, "HDF5 crashed"
"""
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import h5py

DS = "model/h.0.mlp.c_fc.weight"


def flip_at(path, pos, bit):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ (1 << bit)]))


def where(path, what):
    with h5py.File(path, "r") as f:
        if what == "data":
            return f[DS].id.get_offset() + 1001
        if what == "header":
            return h5py.h5o.get_info(f[DS].id).addr + 20
        if what == "text":
            return f["config/job_toml"].id.get_offset() + 3
        if what in ("gheap", "gheapsize"):
            pass  # below: h5py does not say where the global heap is
        elif what == "superblock":
            return 8 + 4 + 8 + 8  # v2: signature, version + sizes + flags, base, extension address, then EOF
    if what in ("gheap", "gheapsize"):
        at = open(path, "rb").read().find(b"GCOL")  # the global heap collection's signature
        assert at >= 0, "no global heap"
        # The first object's 8-byte little-endian size (after 16 bytes of collection header, 8 of
        # object header): its byte 1 (gheap), or its byte 4 (gheapsize: bit 1 there is 2^33).
        return at + (25 if what == "gheap" else 28)
    sys.exit(f"unknown place '{what}'")


def tensor_ranges(path):
    out = []
    with h5py.File(path, "r") as f:
        def visit(name, o):
            if isinstance(o, h5py.Dataset) and o.dtype.kind == "f" and o.id.get_offset() is not None:
                out.append((o.id.get_offset(), o.id.get_offset() + o.id.get_storage_size()))
        f.visititems(visit)
    return out


def verify(exe, path):
    try:
        r = subprocess.run([exe, "inspect", "--verify", path], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None, "", "hung for 30 s"
    return r.returncode, r.stdout, r.stderr


def sweep(path, n, seed):
    exe = os.environ.get("MPITRON", "build/mpitron")
    rc, out, err = verify(exe, path)
    assert rc == 0, f"the original does not verify: {err}"
    digest = re.search(r"digest (\w+)", out).group(1)
    size = os.path.getsize(path)
    data = tensor_ranges(path)
    outside = [p for p in range(size) if not any(a <= p < b for a, b in data)]
    rng = random.Random(seed)
    detected, harmless, causes = 0, 0, {}
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "flipped.h5")
        for i in range(n):
            pos, bit = (rng.choice(outside) if i % 2 == 0 else rng.randrange(size)), rng.randrange(8)
            shutil.copyfile(path, copy)
            flip_at(copy, pos, bit)
            rc, out, err = verify(exe, copy)
            what = f"bit {bit} of byte {pos}"
            if rc == 0:
                assert re.search(r"digest (\w+)", out).group(1) == digest, f"{what}: verifies, but loads differently"
                harmless += 1
            else:
                assert rc == 2 and copy in err and "Traceback" not in err, f"{what}: exit {rc}: {err.strip()[-500:]}"
                detected += 1
                cause = re.sub(r"'[^']*'", "'...'", err.strip().splitlines()[-1])[:110]
                causes[cause] = causes.get(cause, 0) + 1
    print(f"{n} random bit flips (seed {seed}, half outside tensor data): {detected} rejected naming the file, "
          f"{harmless} in bytes nothing reads (same digest); no crash, no hang, nothing silently different")
    for c, k in sorted(causes.items(), key=lambda x: -x[1]):
        print(f"  {k:4d} x {c}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "flip":
        pos = where(sys.argv[2], sys.argv[3])
        # gheap: 0x12 -> 0x112 bytes, inside the collection; gheapsize: + 8 GiB
        bit = {"gheap": 0, "gheapsize": 1}.get(sys.argv[3], 4)
        flip_at(sys.argv[2], pos, bit)
        print(f"flipped bit {bit} of byte {pos} ({sys.argv[3]}) of {sys.argv[2]}")
    elif len(sys.argv) == 5 and sys.argv[1] == "sweep":
        sweep(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
