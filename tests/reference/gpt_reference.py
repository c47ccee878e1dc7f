#!/usr/bin/python3
"""Independent reference for mpitron's GPT-2: PyTorch (Debian python3-torch 1.13), float64.

Builds GPT-2 with plain torch functional ops from its own random weights (named and shaped as
mpitron's parameter table: Hugging Face names, Linear weights [out, in], wte padded to a multiple
of 64 rows with zero padding rows), runs one batch, and writes an HDF5 fixture with the inputs,
the weights, the logits, the loss, every gradient of the mean loss, and the parameters after 3
torch.optim.AdamW steps on the same batch (weight decay on 2-D tensors only). The C++ test
(tests/unit/test_gpt_reference.cpp) loads the weights by name and compares.

Run:  /usr/bin/python3 tests/reference/gpt_reference.py [--out tests/reference/fixtures/gpt_tiny.h5]
"""
import argparse
import math

import h5py
import numpy as np
import torch
import torch.nn.functional as F

from fixture_io import write_fixture

CFG = dict(vocab_size=100, n_layer=2, n_head=4, d_model=32, seq_len=32, batch=2)
OPT = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-5, weight_decay=0.1, steps=3)
# eps 1e-5 (not torch's 1e-8): AdamW's m/sqrt(v) is ill-conditioned where a gradient is within fp32
# rounding of zero (the key part of attn.c_attn.bias has an exactly zero gradient; a few weights
# have |g| ~ 1e-8), and with eps 1e-8 any fp32 implementation moves those by +-lr. 1e-5 keeps the
# comparison about the model, not about the sign of rounding noise.


def param_shapes(c):
    C, V, T, L = c["d_model"], c["padded_vocab"], c["seq_len"], c["n_layer"]
    shapes = [("wte.weight", (V, C)), ("wpe.weight", (T, C))]
    for l in range(L):
        h = f"h.{l}."
        shapes += [(h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
                   (h + "attn.c_attn.weight", (3 * C, C)), (h + "attn.c_attn.bias", (3 * C,)),
                   (h + "attn.c_proj.weight", (C, C)), (h + "attn.c_proj.bias", (C,)),
                   (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
                   (h + "mlp.c_fc.weight", (4 * C, C)), (h + "mlp.c_fc.bias", (4 * C,)),
                   (h + "mlp.c_proj.weight", (C, 4 * C)), (h + "mlp.c_proj.bias", (C,))]
    shapes += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return shapes


def make_params(c, gen):
    p = {}
    for name, shape in param_shapes(c):
        if "ln_" in name:  # LN weight near 1, bias near 0, perturbed so every path carries signal
            base = 1.0 if name.endswith("weight") else 0.0
            t = base + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:  # weights and biases: normal(0, 0.02) (biases non-zero on purpose)
            t = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        if name == "wte.weight":
            t[c["vocab_size"]:] = 0.0  # padded vocab rows
        p[name] = t.requires_grad_(True)
    return p


def forward(p, c, inputs):
    B, T = inputs.shape
    C, H, L = c["d_model"], c["n_head"], c["n_layer"]
    hd = C // H
    x = p["wte.weight"][inputs] + p["wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        qkv = F.linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"])  # [B, T, 3C]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))  # [B, H, T, hd]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        s = s.masked_fill(~mask, float("-inf"))
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
        a = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        m = F.gelu(F.linear(a, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    return x @ p["wte.weight"].t()  # [B, T, padded_vocab]; tied head


def loss_sum(logits, targets, V):
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1, reduction="sum")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/reference/fixtures/gpt_tiny.h5")
    args = ap.parse_args()
    c = dict(CFG)
    c["padded_vocab"] = (c["vocab_size"] + 63) // 64 * 64
    gen = torch.Generator().manual_seed(1234)
    p = make_params(c, gen)
    B, T, V = c["batch"], c["seq_len"], c["vocab_size"]
    inputs = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)
    targets[0, 5] = -1  # ignored positions
    targets[1, 0] = -1
    n = int((targets >= 0).sum())

    init = {k: t.detach().clone() for k, t in p.items()}
    logits = forward(p, c, inputs)
    ls = loss_sum(logits, targets, V)
    (ls / n).backward()
    grads = {k: t.grad.detach().clone() for k, t in p.items()}

    decay = [t for t in p.values() if t.dim() >= 2]
    no_decay = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
    for _ in range(OPT["steps"]):
        opt.zero_grad()
        (loss_sum(forward(p, c, inputs), targets, V) / n).backward()
        opt.step()

    write_fixture(args.out, {**c, **OPT}, f"tests/reference/gpt_reference.py, torch {torch.__version__}, float64",
                  inputs, targets, logits, init, grads, p, n, ls)

if __name__ == "__main__":
    main()
