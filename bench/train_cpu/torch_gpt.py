#!/usr/bin/python3
"""PyTorch peer for bench/train_cpu: a GPT-2 or a LLaMA (--arch llama: RMSNorm, RoPE on
interleaved pairs, grouped-query attention, SwiGLU, untied head) of the same shape as mpitron's,
trained with AdamW on random tokens, same batch, 2 threads. Prints one JSON line with ms/step,
tokens/s and the BLAS library torch's GEMMs actually call ("blas", see gemm_blas; run.sh refuses
to compare against the netlib reference BLAS).

Debian's python3-torch 1.13 uses whatever libblas.so.3 points to; the fairest setup here is the
OpenMP OpenBLAS build (libopenblas0-openmp), which bench/train_cpu/run.sh selects via
LD_LIBRARY_PATH. OPENBLAS_CORETYPE is left as the environment sets it.
"""
import argparse
import ctypes
import json
import math
import os
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


class LlamaBlock(nn.Module):
    def __init__(self, d, h, kv, f):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.n1 = nn.Parameter(torch.ones(d))
        self.qkv = nn.Linear(d, (h + 2 * kv) * self.hd, bias=False)
        self.o = nn.Linear(h * self.hd, d, bias=False)
        self.n2 = nn.Parameter(torch.ones(d))
        self.gate_up = nn.Linear(d, 2 * f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    @staticmethod
    def rope(x, cos, sin):  # x [B, n, T, hd]; pairs (2i, 2i+1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        hd = self.hd
        q, k, v = self.qkv(self.rms(x, self.n1)).split([self.h * hd, self.kv * hd, self.kv * hd], dim=2)
        q = self.rope(q.view(B, T, self.h, hd).transpose(1, 2), cos, sin)
        k = self.rope(k.view(B, T, self.kv, hd).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.kv, hd).transpose(1, 2)
        k, v = (t.repeat_interleave(self.h // self.kv, dim=1) for t in (k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(B, T, self.h * hd))
        g, u = self.gate_up(self.rms(x, self.n2)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, V, L, H, KV, d, f, T):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.blocks = nn.ModuleList([LlamaBlock(d, H, KV, f) for _ in range(L)])
        self.norm = nn.Parameter(torch.ones(d))
        self.head = nn.Linear(d, V, bias=False)
        hd = d // H
        ang = torch.arange(T, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())

    def forward(self, idx, targets):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        logits = self.head(LlamaBlock.rms(x, self.norm))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def gemm_blas():
    """The real path of the library torch's sgemm_ calls resolve to: dlsym(sgemm_) in the scope of
    libtorch_cpu (its dependency order, the order the dynamic linker binds its calls in), then
    dladdr. Which libraries are merely mapped is not enough: Debian's torch can map both the
    netlib libblas.so.3 and OpenBLAS, and the first one in load order serves the GEMMs."""
    torch.ones(64, 64) @ torch.ones(64, 64)
    libtorch = [line.split()[-1] for line in open("/proc/self/maps") if "libtorch_cpu" in line]
    if not libtorch:
        return "unknown"
    try:
        addr = ctypes.cast(ctypes.CDLL(libtorch[0]).sgemm_, ctypes.c_void_p).value
    except AttributeError:
        return "unknown (no sgemm_)"

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    info = DlInfo()
    if not ctypes.CDLL("libc.so.6").dladdr(ctypes.c_void_p(addr), ctypes.byref(info)):
        return "unknown (dladdr failed)"
    return os.path.realpath(info.dli_fname.decode())


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
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--d-ff", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.arch == "llama":
        m = Llama(a.vocab, a.layers, a.heads, a.kv_heads or a.heads, a.d, a.d_ff, a.seq)
    else:
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
    blas = gemm_blas()
    # Debian's netlib reference BLAS is .../blas/libblas.so.3*; OpenBLAS .../openblas*/...
    netlib = "/blas/libblas" in blas
    print(json.dumps({"impl": "pytorch-" + torch.__version__, "ms_per_step": med * 1e3,
                      "tokens_per_s": a.batch * a.seq / med, "threads": a.threads,
                      "blas": blas, "netlib": netlib}))


if __name__ == "__main__":
    main()
