#!/usr/bin/python3
"""PyTorch peer for bench/train_cpu: a GPT-2 of the same shape as mpitron's, trained with AdamW
on random tokens, same batch, 2 threads. Prints one JSON line with ms/step and tokens/s.

Debian's python3-torch 1.13 uses whatever libblas.so.3 points to; the fairest setup here is the
OpenMP OpenBLAS build (libopenblas0-openmp), which bench/train_cpu/run.sh selects via
LD_LIBRARY_PATH. OPENBLAS_CORETYPE is left as the environment sets it.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, L, H, d, T):
        super().__init__()
        self.wte = nn.Embedding(V, d)
        self.wpe = nn.Embedding(T, d)
        self.blocks = nn.ModuleList([Block(d, H) for _ in range(L)])
        self.lnf = nn.LayerNorm(d)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = GPT(a.vocab, a.layers, a.heads, a.d, a.seq)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1)
    x = torch.randint(0, a.vocab, (a.batch, a.seq))
    y = torch.randint(0, a.vocab, (a.batch, a.seq))
    times = []
    for i in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = m(x, y)
        loss.backward()
        opt.step()
        if i > 0:  # the first step warms up allocators and kernels
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"impl": "pytorch-" + torch.__version__, "ms_per_step": med * 1e3,
                      "tokens_per_s": a.batch * a.seq / med, "threads": a.threads}))


if __name__ == "__main__":
    main()
