#!/usr/bin/python3
"""PyTorch DDP peer for bench/dp: the GPT-2 of bench/train_cpu/torch_gpt.py wrapped in
DistributedDataParallel (gloo, default 25 MB buckets, overlapped with backward), N processes x T
threads on this host, AdamW, random tokens, `--batch` sequences per rank per step. Prints one JSON
line (rank 0) with the median ms/step and the global tokens/s.

Run with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp (bench/dp/run.sh does): Debian's
torch 1.13 otherwise picks the pthread OpenBLAS, which ignores the thread count.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_cpu"))
from torch_gpt import GPT, gemm_blas  # noqa: E402  (gemm_blas: the BLAS torch's sgemm_ resolves to)


def worker(rank, a, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.procs)
    torch.manual_seed(0)
    m = GPT(a.vocab, a.layers, a.heads, a.d, a.seq)
    model = DDP(m, bucket_cap_mb=a.bucket_mb) if a.procs > 1 else m
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    times = []
    for i in range(a.steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()  # DDP all-reduces its buckets during this
        opt.step()
        if i > 0:  # the first step warms up allocators and kernels
            times.append(time.perf_counter() - t0)
    if rank == 0:
        times.sort()
        med = times[len(times) // 2]
        blas = gemm_blas()
        out.put({"impl": f"pytorch-{torch.__version__}-ddp-gloo", "procs": a.procs, "threads": a.threads,
                 "ms_per_step": med * 1e3, "tokens_per_s": a.procs * a.batch * a.seq / med,
                 "blas": blas, "netlib": "/blas/libblas" in blas})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    for k in ("vocab", "layers", "heads", "d", "seq", "batch"):
        ap.add_argument(f"--{k}", type=int, required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--port", type=int, default=29517)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.spawn(worker, args=(a, a.port, out), nprocs=a.procs, join=True)
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
