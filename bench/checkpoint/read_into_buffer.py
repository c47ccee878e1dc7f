"""The read reference of bench/checkpoint/io_rate.sh: FILE read with readv() into a buffer of its
size that was touched before the clock starts (a resume reads into model and optimizer buffers
that exist already), in 64 MiB calls. Prints the seconds of the best of 3 reads.
    /usr/bin/python3 bench/checkpoint/read_into_buffer.py FILE"""
import os
import sys
import time

path = sys.argv[1]
size = os.path.getsize(path)
buf = bytearray(size)  # zero-filled: every page touched
view = memoryview(buf)
best = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    at = 0
    while at < size:
        got = os.readv(fd, [view[at:at + (64 << 20)]])
        if got <= 0:
            sys.exit(f"{path}: short read at byte {at}")
        at += got
    os.close(fd)
    best = min(best, time.perf_counter() - t0)
print(f"{best:.4f}")
