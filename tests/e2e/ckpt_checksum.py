"""The tensor checksums of an mpitron checkpoint, from docs/checkpoint.md's formulas, in numpy:
the sum mod 2^64 over the elements of a hash of (full flat index i, the float's 32 bits b).
    format 2: k = (i + 1) * 0x9E3779B97F4A7C15 mod 2^64; (b ^ low32(k)) * (high32(k) | 1)
    format 1: splitmix64(splitmix64(i) ^ b)
Used by check_checkpoint_h5py.py (every tensor of a file) and ckpt_format1.py."""
import numpy as np

M32 = np.uint64(0xFFFFFFFF)


def splitmix64(x):
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def tensor_checksum(data, version):
    b = np.ascontiguousarray(data, dtype="<f4").reshape(-1).view("<u4").astype(np.uint64)
    i = np.arange(b.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        if version == 1:
            h = splitmix64(splitmix64(i) ^ b)
        else:
            k = (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
            h = (b ^ (k & M32)) * ((k >> np.uint64(32)) | np.uint64(1))
        return int(np.sum(h, dtype=np.uint64))
