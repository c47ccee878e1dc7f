#!/usr/bin/python3
"""Independent reference for mpitron's LLaMA: PyTorch (Debian python3-torch 1.13), float64.

Written from the published architecture (Meta's llama reference model.py), not from mpitron's
sources: RMSNorm, rotary embeddings applied as a complex multiplication on interleaved pairs
(x[2i], x[2i+1]), grouped-query attention with Meta's repeat_kv (query head h reads kv head
h // (n_head / n_kv_head)), SwiGLU FFN, untied lm_head, no biases anywhere. Its own random weights
are named and shaped like mpitron's LLaMA parameter table (Hugging Face names, Linear weights
[out, in], embed_tokens and lm_head padded to a multiple of 64 rows with zero padding rows). It runs
one batch and writes an HDF5 fixture in the same layout as gpt_reference.py (same dataset names,
attribute names and dtypes, plus the LLaMA-only attributes n_kv_head d_ff norm_eps rope_theta
tie_embeddings rope_pairing): inputs, weights, logits, loss, every gradient of the mean loss, and
the parameters after 3 torch.optim.AdamW steps on the same batch (weight decay on 2-D tensors only).

Qwen's additions, as Hugging Face's Qwen2/Qwen3 models add them (--qkv-bias: biases on q_proj, k_proj,
v_proj; --qk-norm: an RMSNorm over each head's q and each head's k, weights [head_dim] shared by the
heads, before RoPE), in the same pairing as the rest (mpitron's order of a head's dimensions).

Run:  /usr/bin/python3 tests/reference/llama_reference.py [--out tests/reference/fixtures/llama_tiny.h5]
      /usr/bin/python3 tests/reference/llama_reference.py --qkv-bias --out tests/reference/fixtures/qwen2_tiny.h5
      /usr/bin/python3 tests/reference/llama_reference.py --qk-norm --head-dim 32 --out tests/reference/fixtures/qwen3_tiny.h5
(--head-dim: heads of that size whatever d_model / n_head is, as Qwen3-0.6B's 16 heads of 128 on
d_model 1024; here 4 heads of 32 on d_model 64.)
"""
import argparse
import math

import h5py
import numpy as np
import torch
import torch.nn.functional as F

from fixture_io import write_fixture

CFG = dict(vocab_size=100, n_layer=2, n_head=4, n_kv_head=2, d_model=32, d_ff=96, seq_len=32, batch=2,
           norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=0)
OPT = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-5, weight_decay=0.1, steps=3)
# eps 1e-5 (not torch's 1e-8), as in gpt_reference.py: AdamW's m/sqrt(v) is ill-conditioned where a
# gradient is within fp32 rounding of zero, and the comparison should be about the model.


def param_shapes(c):
    C, V, L, F_ = c["d_model"], c["padded_vocab"], c["n_layer"], c["d_ff"]
    hd = c.get("head_dim") or C // c["n_head"]
    Q, KV = c["n_head"] * hd, c["n_kv_head"] * hd
    shapes = [("embed_tokens.weight", (V, C))]
    for l in range(L):
        h = f"layers.{l}."
        shapes += [(h + "input_layernorm.weight", (C,)),
                   (h + "self_attn.q_proj.weight", (Q, C)),
                   (h + "self_attn.k_proj.weight", (KV, C)),
                   (h + "self_attn.v_proj.weight", (KV, C)),
                   *([(h + "self_attn.q_proj.bias", (Q,)), (h + "self_attn.k_proj.bias", (KV,)),
                      (h + "self_attn.v_proj.bias", (KV,))] if c.get("qkv_bias") else []),
                   *([(h + "self_attn.q_norm.weight", (hd,)), (h + "self_attn.k_norm.weight", (hd,))]
                     if c.get("qk_norm") else []),
                   (h + "self_attn.o_proj.weight", (C, Q)),
                   (h + "post_attention_layernorm.weight", (C,)),
                   (h + "mlp.gate_proj.weight", (F_, C)),
                   (h + "mlp.up_proj.weight", (F_, C)),
                   (h + "mlp.down_proj.weight", (C, F_))]
    shapes += [("norm.weight", (C,)), ("lm_head.weight", (V, C))]
    return shapes


def make_params(c, gen):
    p = {}
    for name, shape in param_shapes(c):
        if "norm" in name:  # RMSNorm weights near 1, perturbed so every path carries signal
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith(".bias"):  # Qwen2's q/k/v biases: large enough to matter
            t = 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:  # every Linear / embedding weight: normal(0, 0.02)
            t = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        if name in ("embed_tokens.weight", "lm_head.weight"):
            t[c["vocab_size"]:] = 0.0  # padded vocab rows
        p[name] = t.requires_grad_(True)
    return p


# ---- Meta's building blocks (llama/model.py), float64 / complex128 ----

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def precompute_freqs_cis(dim, end, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: dim // 2] / dim))
    t = torch.arange(end, dtype=torch.float64)
    freqs = torch.outer(t, freqs)  # [end, dim/2]: angle t * theta^(-2i/dim)
    return torch.polar(torch.ones_like(freqs), freqs)  # complex128


def apply_rotary_emb(x, freqs_cis):
    """x [B, T, nh, hd]; pairs (x[..., 2i], x[..., 2i+1]) are the real and imaginary parts."""
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))  # [B, T, nh, hd/2]
    fc = freqs_cis.view(1, xc.shape[1], 1, xc.shape[-1])
    return torch.view_as_real(xc * fc).flatten(3)


def repeat_kv(x, n_rep):
    """[B, T, n_kv, hd] -> [B, T, n_kv * n_rep, hd], each kv head repeated n_rep times consecutively."""
    B, T, n_kv, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(B, T, n_kv, n_rep, hd).reshape(B, T, n_kv * n_rep, hd)


def attention(x, p, h, c, freqs_cis):
    B, T, _ = x.shape
    H, KV = c["n_head"], c["n_kv_head"]
    hd = c.get("head_dim") or c["d_model"] // H  # Qwen3: heads of their own size (attention H hd wide)
    b = lambda n: p.get(h + f"self_attn.{n}_proj.bias")  # Qwen2: q/k/v biases (None: LLaMA's none)
    q = F.linear(x, p[h + "self_attn.q_proj.weight"], b("q")).view(B, T, H, hd)
    k = F.linear(x, p[h + "self_attn.k_proj.weight"], b("k")).view(B, T, KV, hd)
    v = F.linear(x, p[h + "self_attn.v_proj.weight"], b("v")).view(B, T, KV, hd)
    if h + "self_attn.q_norm.weight" in p:  # Qwen3: RMSNorm over each head's q and k, before RoPE
        q = rms_norm(q, p[h + "self_attn.q_norm.weight"], c["norm_eps"])
        k = rms_norm(k, p[h + "self_attn.k_norm.weight"], c["norm_eps"])
    q, k = apply_rotary_emb(q, freqs_cis), apply_rotary_emb(k, freqs_cis)
    k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, hd]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
    return F.linear(y, p[h + "self_attn.o_proj.weight"])


def forward(p, c, inputs):
    B, T = inputs.shape
    eps = c["norm_eps"]
    freqs_cis = precompute_freqs_cis(c.get("head_dim") or c["d_model"] // c["n_head"], T, c["rope_theta"])
    x = p["embed_tokens.weight"][inputs]
    for l in range(c["n_layer"]):
        h = f"layers.{l}."
        x = x + attention(rms_norm(x, p[h + "input_layernorm.weight"], eps), p, h, c, freqs_cis)
        n = rms_norm(x, p[h + "post_attention_layernorm.weight"], eps)
        g = F.silu(F.linear(n, p[h + "mlp.gate_proj.weight"])) * F.linear(n, p[h + "mlp.up_proj.weight"])
        x = x + F.linear(g, p[h + "mlp.down_proj.weight"])
    x = rms_norm(x, p["norm.weight"], eps)
    return F.linear(x, p["lm_head.weight"])  # [B, T, padded_vocab]; untied head


def loss_sum(logits, targets, V):
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1, reduction="sum")


def self_check(gen):
    """RoPE by complex multiply == explicit cos/sin on interleaved pairs; GQA with n_kv == n_head is MHA."""
    B, T, nh, hd, theta = 2, 7, 3, 8, 10000.0
    x = torch.randn(B, T, nh, hd, generator=gen, dtype=torch.float64)
    got = apply_rotary_emb(x, precompute_freqs_cis(hd, T, theta))
    want = torch.empty_like(x)
    for t in range(T):
        for i in range(hd // 2):
            a = t * theta ** (-2.0 * i / hd)
            x0, x1 = x[:, t, :, 2 * i], x[:, t, :, 2 * i + 1]
            want[:, t, :, 2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
            want[:, t, :, 2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    err = (got - want).abs().max().item()
    assert err < 1e-12, f"RoPE complex vs cos/sin: {err}"
    assert torch.equal(got[:, 0], x[:, 0]), "RoPE at position 0 must be the identity"

    # repeat_kv: query head h reads kv head h // n_rep
    kv = torch.randn(B, T, 2, hd, generator=gen, dtype=torch.float64)
    r = repeat_kv(kv, 2)
    assert r.shape == (B, T, 4, hd)
    for hh in range(4):
        assert torch.equal(r[:, :, hh], kv[:, :, hh // 2])

    # n_kv_head == n_head: shapes as plain MHA, repeat_kv the identity, and the same attention output
    c = dict(CFG, n_kv_head=CFG["n_head"])
    C, H = c["d_model"], c["n_head"]
    pm = {"l.self_attn." + k + "_proj.weight": 0.1 * torch.randn(C, C, generator=gen, dtype=torch.float64)
          for k in "qkvo"}
    assert dict(param_shapes(dict(c, padded_vocab=128)))["layers.0.self_attn.k_proj.weight"] == (C, C)
    assert repeat_kv(kv, 1) is kv
    xin = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    fc = precompute_freqs_cis(C // H, T, c["rope_theta"])
    y = attention(xin, pm, "l.", c, fc)
    assert y.shape == (B, T, C)
    # plain MHA written out directly (no repeat_kv)
    hd = C // H
    q = apply_rotary_emb(F.linear(xin, pm["l.self_attn.q_proj.weight"]).view(B, T, H, hd), fc).transpose(1, 2)
    k = apply_rotary_emb(F.linear(xin, pm["l.self_attn.k_proj.weight"]).view(B, T, H, hd), fc).transpose(1, 2)
    v = F.linear(xin, pm["l.self_attn.v_proj.weight"]).view(B, T, H, hd).transpose(1, 2)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y2 = F.linear((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C), pm["l.self_attn.o_proj.weight"])
    assert (y - y2).abs().max().item() < 1e-12
    print(f"self-check ok: RoPE complex vs cos/sin max err {err:.2e}; repeat_kv mapping; GQA(n_kv=n_head) == MHA")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/reference/fixtures/llama_tiny.h5")
    ap.add_argument("--qkv-bias", action="store_true", help="Qwen2: biases on q, k, v (d_model 64: head size 16)")
    ap.add_argument("--qk-norm", action="store_true", help="Qwen3: RMSNorm over each head's q and k before RoPE")
    ap.add_argument("--head-dim", type=int, default=0, help="heads of this size (Qwen3-0.6B: wider than d_model / n_head)")
    args = ap.parse_args()
    self_check(torch.Generator().manual_seed(99))  # own generator: does not disturb the fixture's stream

    c = dict(CFG)
    if args.qkv_bias or args.qk_norm:
        c.update(d_model=64, qkv_bias=int(args.qkv_bias), qk_norm=int(args.qk_norm))
    if args.head_dim:
        c["head_dim"] = args.head_dim
    c["padded_vocab"] = (c["vocab_size"] + 63) // 64 * 64
    assert c["d_model"] % c["n_head"] == 0 and c["n_head"] % c["n_kv_head"] == 0
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
    print(f"loss_sum {float(ls):.6f} over {n} targets (mean {float(ls) / n:.6f}, ln V = {math.log(V):.6f})")
    for k, g in grads.items():
        print(f"  max|grad| {g.abs().max().item():.3e}  {k}")

    decay = [t for t in p.values() if t.dim() >= 2]
    no_decay = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
    for _ in range(OPT["steps"]):
        opt.zero_grad()
        (loss_sum(forward(p, c, inputs), targets, V) / n).backward()
        opt.step()

    # rope_pairing: Meta's (x[2i], x[2i+1]); Hugging Face checkpoints use the half-split layout.
    attrs = {**c, **OPT, "rope_pairing": "interleaved", }
    write_fixture(args.out, attrs, f"tests/reference/llama_reference.py, torch {torch.__version__}, float64", inputs,
                  targets, logits, init, grads, p, n, ls)

if __name__ == "__main__":
    main()
