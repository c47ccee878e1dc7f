#!/usr/bin/python3
"""Independent reference for mpitron's mixture-of-experts LLaMA: PyTorch (python3-torch), float64.

The dense parts are llama_reference.py's (Meta's LLaMA). The MoE MLP is written from the published
equations, not from mpitron's sources:
  - Mixtral (Hugging Face MixtralSparseMoeBlock): router logits = x Wg^T; p = softmax(logits);
    top-k of p; routing weights = the k probabilities renormalised to sum 1 (router "softmax_topk",
    the same as a softmax over the k selected logits); each expert is a SwiGLU
    w2(silu(w1 x) * w3 x); output = sum_j weight_j expert_j(x).
  - Switch Transformer / OLMoE (router "topk_softmax"): the weights are the top-k probabilities
    themselves (norm_topk_prob false).
  - Shared experts (DeepSeek-MoE / Qwen-MoE): one always-on SwiGLU of width n_shared * expert_d_ff
    added to the routed output.
  - Load balancing (Switch, per sequence as DeepSeek-V3's sequence-wise loss):
    aux_s = E * sum_e f_se P_se, f_se = copies of sequence s's tokens routed to e / (T k),
    P_se = mean of p over s's tokens. Router z-loss (ST-MoE): z_t = logsumexp(logits_t)^2.
  - Capacity (GShard / Megatron "position" policy): each expert keeps the first
    ceil(capacity_factor * tokens * k / E) copies in token order (token t, then its j-th choice)
    over the whole batch; the rest contribute nothing.
The objective whose gradients are recorded: (CE_sum + sum over MoE layers of
aux_coef * sum_s T aux_s + z_coef * sum_t z_t) / n_targets.

Writes two fixtures in the layout of llama_reference.py (fixture_io.py) plus the moe_* attributes
and the per-layer aux / z values:
  fixtures/moe_tiny.h5       softmax_topk, 4 experts top 2, 1 shared expert, every block MoE
  fixtures/moe_switch.h5     topk_softmax top 2 of 4 (weights not renormalised), no shared expert,
                             MoE in block 0 only (layer_freq 2), capacity_factor 1.0 (drops)

Run:  /usr/bin/python3 tests/reference/moe_reference.py
"""
import math

import torch
import torch.nn.functional as F

from fixture_io import write_fixture
from llama_reference import OPT, attention, loss_sum, precompute_freqs_cis, rms_norm

BASE = dict(vocab_size=100, n_layer=2, n_head=4, n_kv_head=2, d_model=32, d_ff=96, seq_len=32, batch=2,
            norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=0)
VARIANTS = {
    "moe_tiny": dict(moe_n_experts=4, moe_top_k=2, moe_d_ff=48, moe_n_shared=1, moe_layer_freq=1,
                     moe_router=0, moe_norm_topk_prob=0, moe_aux_coef=0.1, moe_z_coef=0.01,
                     moe_capacity_factor=0.0),
    "moe_switch": dict(moe_n_experts=4, moe_top_k=2, moe_d_ff=48, moe_n_shared=0, moe_layer_freq=2,
                       moe_router=1, moe_norm_topk_prob=0, moe_aux_coef=0.1, moe_z_coef=0.01,
                       moe_capacity_factor=1.0),
}


def is_moe(c, l):
    return l % c["moe_layer_freq"] == 0


def param_shapes(c):
    C, V, Fd, Fe, E = c["d_model"], c["padded_vocab"], c["d_ff"], c["moe_d_ff"], c["moe_n_experts"]
    hd = C // c["n_head"]
    Q, KV = c["n_head"] * hd, c["n_kv_head"] * hd
    shapes = [("embed_tokens.weight", (V, C))]
    for l in range(c["n_layer"]):
        h = f"layers.{l}."
        shapes += [(h + "input_layernorm.weight", (C,)), (h + "self_attn.q_proj.weight", (Q, C)),
                   (h + "self_attn.k_proj.weight", (KV, C)), (h + "self_attn.v_proj.weight", (KV, C)),
                   (h + "self_attn.o_proj.weight", (C, Q)), (h + "post_attention_layernorm.weight", (C,))]
        if not is_moe(c, l):
            shapes += [(h + "mlp.gate_proj.weight", (Fd, C)), (h + "mlp.up_proj.weight", (Fd, C)),
                       (h + "mlp.down_proj.weight", (C, Fd))]
            continue
        m = h + "block_sparse_moe."
        shapes.append((m + "gate.weight", (E, C)))
        for e in range(E):
            shapes += [(m + f"experts.{e}.w1.weight", (Fe, C)), (m + f"experts.{e}.w3.weight", (Fe, C)),
                       (m + f"experts.{e}.w2.weight", (C, Fe))]
        Fs = c["moe_n_shared"] * Fe
        if Fs:
            shapes += [(m + "shared_experts.gate_proj.weight", (Fs, C)), (m + "shared_experts.up_proj.weight", (Fs, C)),
                       (m + "shared_experts.down_proj.weight", (C, Fs))]
    shapes += [("norm.weight", (C,)), ("lm_head.weight", (V, C))]
    return shapes


def make_params(c, gen):
    p = {}
    for name, shape in param_shapes(c):
        if "norm" in name:
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("gate.weight") and "block_sparse_moe" in name:
            t = 0.5 * torch.randn(shape, generator=gen, dtype=torch.float64)  # a router with clear preferences
        else:
            t = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        if name in ("embed_tokens.weight", "lm_head.weight"):
            t[c["vocab_size"]:] = 0.0
        p[name] = t.requires_grad_(True)
    return p


def swiglu(x, gate, up, down):
    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)


def moe_mlp(x, p, m, c):
    """x [B, T, C] -> (out [B, T, C], aux_sum over sequences of T * aux_s, z_sum over tokens, aux mean)."""
    B, T, C = x.shape
    E, k = c["moe_n_experts"], c["moe_top_k"]
    xs = x.reshape(-1, C)
    logits = F.linear(xs, p[m + "gate.weight"])  # [N, E]
    probs = F.softmax(logits, dim=-1)
    weights, selected = torch.topk(probs, k, dim=-1)  # best first
    if c["moe_router"] == 0 or c["moe_norm_topk_prob"]:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    keep = torch.ones_like(selected, dtype=torch.bool)
    if c["moe_capacity_factor"] > 0:
        cap = math.ceil(c["moe_capacity_factor"] * xs.shape[0] * k / E)
        used = [0] * E
        for t in range(xs.shape[0]):
            for j in range(k):
                e = int(selected[t, j])
                keep[t, j] = used[e] < cap
                used[e] += int(keep[t, j])
    out = torch.zeros_like(xs)
    for e in range(E):
        t_idx, j_idx = torch.where((selected == e) & keep)
        if len(t_idx) == 0:
            continue
        y = swiglu(xs[t_idx], p[m + f"experts.{e}.w1.weight"], p[m + f"experts.{e}.w3.weight"],
                   p[m + f"experts.{e}.w2.weight"])
        out = out.index_add(0, t_idx, weights[t_idx, j_idx, None] * y)
    if c["moe_n_shared"]:
        out = out + swiglu(xs, p[m + "shared_experts.gate_proj.weight"], p[m + "shared_experts.up_proj.weight"],
                           p[m + "shared_experts.down_proj.weight"])
    # Load balancing per sequence (routed copies counted before capacity drops), and z-loss.
    onehot = F.one_hot(selected, E).to(torch.float64).reshape(B, T, k, E)
    f = onehot.sum(dim=(1, 2)) / (T * k)              # [B, E]
    P = probs.reshape(B, T, E).mean(dim=1)            # [B, E]
    aux_s = E * (f * P).sum(dim=-1)                   # [B]
    z = torch.logsumexp(logits, dim=-1).pow(2)        # [N]
    return out.reshape(B, T, C), T * aux_s.sum(), z.sum(), float(aux_s.mean()), float(z.mean())


def forward(p, c, inputs, stats=None):
    B, T = inputs.shape
    eps = c["norm_eps"]
    freqs_cis = precompute_freqs_cis(c["d_model"] // c["n_head"], T, c["rope_theta"])
    x = p["embed_tokens.weight"][inputs]
    extra = torch.zeros((), dtype=torch.float64)
    for l in range(c["n_layer"]):
        h = f"layers.{l}."
        x = x + attention(rms_norm(x, p[h + "input_layernorm.weight"], eps), p, h, c, freqs_cis)
        n = rms_norm(x, p[h + "post_attention_layernorm.weight"], eps)
        if is_moe(c, l):
            y, aux_sum, z_sum, aux_mean, z_mean = moe_mlp(n, p, h + "block_sparse_moe.", c)
            extra = extra + c["moe_aux_coef"] * aux_sum + c["moe_z_coef"] * z_sum
            if stats is not None:
                stats[l] = (aux_mean, z_mean)
            x = x + y
        else:
            x = x + swiglu(n, p[h + "mlp.gate_proj.weight"], p[h + "mlp.up_proj.weight"], p[h + "mlp.down_proj.weight"])
    x = rms_norm(x, p["norm.weight"], eps)
    return F.linear(x, p["lm_head.weight"]), extra


def self_check(gen):
    """The expert loop equals a dense evaluation of every expert masked by the routing weights."""
    c = dict(BASE, **VARIANTS["moe_tiny"], padded_vocab=128)
    p = make_params(c, gen)
    x = torch.randn(2, 5, c["d_model"], generator=gen, dtype=torch.float64)
    m = "layers.0.block_sparse_moe."
    got = moe_mlp(x, p, m, c)[0].reshape(-1, c["d_model"])
    xs = x.reshape(-1, c["d_model"])
    logits = xs @ p[m + "gate.weight"].T
    w = torch.zeros_like(logits)
    for t in range(xs.shape[0]):  # softmax over the two largest logits
        top = sorted(range(4), key=lambda e: -float(logits[t, e]))[:2]
        s = torch.softmax(logits[t, top], dim=0)
        w[t, top] = s
    want = sum(w[:, e:e + 1] * swiglu(xs, p[m + f"experts.{e}.w1.weight"], p[m + f"experts.{e}.w3.weight"],
                                      p[m + f"experts.{e}.w2.weight"]) for e in range(4))
    want = want + swiglu(xs, p[m + "shared_experts.gate_proj.weight"], p[m + "shared_experts.up_proj.weight"],
                         p[m + "shared_experts.down_proj.weight"])
    err = (got - want).abs().max().item()
    assert err < 1e-12, err
    print(f"self-check ok: routed experts == dense masked evaluation (max err {err:.1e})")


def main():
    self_check(torch.Generator().manual_seed(99))
    for name, moe in VARIANTS.items():
        c = dict(BASE, **moe)
        c["padded_vocab"] = (c["vocab_size"] + 63) // 64 * 64
        gen = torch.Generator().manual_seed(1234)
        p = make_params(c, gen)
        B, T, V = c["batch"], c["seq_len"], c["vocab_size"]
        inputs = torch.randint(0, V, (B, T), generator=gen)
        targets = torch.randint(0, V, (B, T), generator=gen)
        targets[0, 5] = -1
        targets[1, 0] = -1
        n = int((targets >= 0).sum())
        init = {k: t.detach().clone() for k, t in p.items()}
        stats = {}
        logits, extra = forward(p, c, inputs, stats)
        ls = loss_sum(logits, targets, V)
        ((ls + extra) / n).backward()
        grads = {k: t.grad.detach().clone() for k, t in p.items()}
        print(f"{name}: loss_sum {float(ls):.6f} over {n} targets; aux/z per MoE layer {stats}")
        decay = [t for t in p.values() if t.dim() >= 2]
        no_decay = [t for t in p.values() if t.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
        for _ in range(OPT["steps"]):
            opt.zero_grad()
            lg, ex = forward(p, c, inputs)
            ((loss_sum(lg, targets, V) + ex) / n).backward()
            opt.step()
        attrs = {**c, **OPT, "rope_pairing": "interleaved"}
        for l, (a, z) in stats.items():
            attrs[f"aux_layer{l}"], attrs[f"z_layer{l}"] = a, z
        write_fixture(f"tests/reference/fixtures/{name}.h5", attrs,
                      f"tests/reference/moe_reference.py, torch {torch.__version__}, float64", inputs, targets, logits,
                      init, grads, p, n, ls)


if __name__ == "__main__":
    main()
