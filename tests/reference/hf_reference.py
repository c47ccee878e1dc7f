#!/usr/bin/env python3
"""An independent reader of Hugging Face model folders and an fp64 model in HF's conventions
(numpy only: it runs in every test, where PyTorch is not installed).

Written from the published formats, not from mpitron's sources:
- safetensors: an 8-byte little-endian header length N, N bytes of JSON
  {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
  little-endian data (offsets relative to the byte after the header); sharded folders list each
  tensor's file in model.safetensors.index.json's "weight_map".
- GPT2LMHeadModel: Conv1D weights [in, out] (y = x @ W + b), q|k|v fused in attn.c_attn,
  GELU "gelu_new" (tanh approximation), LayerNorm eps from layer_norm_epsilon, lm_head tied to wte.
- LlamaForCausalLM: RMSNorm, rotate-half RoPE (x * cos + rotate_half(x) * sin, rotate_half(x) =
  cat(-x2, x1) over the two halves of a head, inv_freq = theta^(-2i/head_dim) for both halves),
  grouped-query attention (kv head h // (n_head / n_kv_head)), SwiGLU MLP, lm_head (or tied).
- RoPE scaling (config.json's rope_scaling, or transformers 5's rope_parameters), as transformers'
  modeling_rope_utils.py computes the inverse frequencies: "llama3" (_compute_llama3_parameters:
  wavelength 2 pi / f below original_max_position_embeddings / high_freq_factor kept, above
  original / low_freq_factor divided by factor, between (1 - s) f / factor + s f with
  s = (original / wavelength - low) / (high - low)) and "yarn" (_compute_yarn_parameters, truncate:
  correction dims d(r) = dim ln(original / (2 pi r)) / (2 ln theta), low = max(floor(d(beta_fast)), 0),
  high = min(ceil(d(beta_slow)), dim - 1), ramp = clip((i - low) / (high - low), 0, 1) over the pair
  index i, f (1 - ramp) + f / factor ramp; cos and sin times attention_factor, by default
  0.1 ln(factor) + 1); "type" the older spelling of "rope_type", "default" or null plain RoPE.
- MixtralForCausalLM: LlamaForCausalLM with, in every layer, block_sparse_moe in place of mlp: router
  logits h @ gate.weight^T, probabilities softmax over all experts, the num_experts_per_tok largest
  kept (ties to the lower index) and renormalised to sum 1, output sum_e p_e * SwiGLU_e(h) with
  experts.E.w1 (gate), w3 (up), w2 (down).
- Qwen2ForCausalLM: LlamaForCausalLM with biases on q_proj, k_proj and v_proj (none on o_proj).
- Qwen3ForCausalLM: LlamaForCausalLM (no biases: attention_bias false) with config.json's head_dim
  (q_proj [heads * head_dim, hidden], o_proj [hidden, heads * head_dim]) and q_norm, k_norm: an
  RMSNorm of width head_dim (rms_norm_eps), shared by the heads, on each head's q and k after the
  projection and before RoPE.
- Qwen3MoeForCausalLM: Qwen3's attention; layer l's mlp sparse when l is not in mlp_only_layers,
  num_experts > 0 and (l + 1) % decoder_sparse_step == 0, else a SwiGLU of intermediate_size. Sparse:
  router logits h @ mlp.gate.weight^T, probabilities softmax over all experts, the num_experts_per_tok
  largest kept (ties to the lower index), renormalised to sum 1 if norm_topk_prob, else the softmax
  values as they are; output sum_e p_e * SwiGLU_e(h) with mlp.experts.E.{gate,up,down}_proj
  (moe_intermediate_size). Qwen sliding windows (use_sliding_window) are not in this reference.

Usage:
  hf_reference.py logprobs DIR LOGPROBS.json [--tol T] [--hub-names]
      the folder's model on LOGPROBS.json's ids (mpitron generate --logprobs-out) in float64;
      fails unless max |ours - theirs| / max |theirs| <= T (default 1e-5); --hub-names accepts
      GPT-2 tensors named as the Hub's gpt2 (write-random's)
  hf_reference.py write-random DIR gpt2|llama|mixtral|qwen2|qwen3|qwen3_moe [--bf16] [--shards N] [--heads H]
                   [--rope-scaling JSON] [--tied] [--head-dim N] [--no-norm-topk] [--mlp-only-layers JSON]
                   [--sparse-step N]
      this script's own writer: a random model in HF's conventions (GPT-2 named as the Hub's
      gpt2 is, without "transformer." and with its attn.bias mask buffers; LLaMA with grouped-query
      attention; Mixtral as that LLaMA with 4 experts, top 2; Qwen2 as that LLaMA with q, k, v
      biases; Qwen3 with q_norm, k_norm and config.json's head_dim; Qwen3-MoE as that Qwen3 with
      4 experts of width 48, top 2), config.json and a byte-level tokenizer.json, for `mpitron import` to read;
      --heads H: H query heads (H / 2 kv heads, H at 2; head size 32 / H), --rope-scaling: config.json's rope_scaling,
      --tied: tie_word_embeddings true (no lm_head.weight; not gpt2, always tied),
      --head-dim N: Qwen3 / Qwen3-MoE's head_dim (default 32 / H), --no-norm-topk: Qwen3-MoE's
      norm_topk_prob false (default true), --mlp-only-layers JSON, --sparse-step N: Qwen3-MoE's
      mlp_only_layers (default []) and decoder_sparse_step (default 1)
  hf_reference.py rounded FP32_DIR OTHER_DIR
      every tensor of OTHER_DIR (bf16 or fp16) equals FP32_DIR's rounded to nearest even (numpy's
      float16 cast; bf16: the top 16 bits of float32, rounded on the low 16), bit for bit
"""
import json
import math
import os
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw), f"{path}: header length {n} past the end"
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = data[b:end]
        if e["dtype"] == "BF16":  # the top half of a float32
            u16 = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=np.dtype(DTYPES[e["dtype"]]).newbyteorder("<"))
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        assert arr.size == count, f"{path}: {name}: {arr.size} values for shape {e['shape']}"
        out[name] = (e["dtype"], arr.reshape(e["shape"]))
    return out


def read_folder(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = [os.path.join(d, "model.safetensors")]
    if os.path.exists(index):
        wm = json.load(open(index))["weight_map"]
        files = sorted({os.path.join(d, f) for f in wm.values()})
    tensors = {}
    for f in files:
        for k, v in read_safetensors(f).items():
            assert k not in tensors, f"{k} in two files"
            tensors[k] = v
    if os.path.exists(index):
        assert set(wm) == set(tensors), "weight_map and the files name different tensors"
    return json.load(open(os.path.join(d, "config.json"))), tensors


def t64(tensors, name):
    return np.array(tensors[name][1], dtype=np.float64)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def causal_attention(q, k, v):  # [heads, T, hd]
    T, hd = q.shape[1], q.shape[2]
    att = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
    att = np.where(np.tril(np.ones((T, T), dtype=bool)), att, -np.inf)
    return softmax(att) @ v


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(c, p, ids):
    T, C, H = len(ids), c["n_embd"], c["n_head"]
    hd = C // H
    eps = c["layer_norm_epsilon"]
    x = t64(p, "transformer.wte.weight")[ids] + t64(p, "transformer.wpe.weight")[:T]
    heads = lambda t: t.reshape(T, H, hd).transpose(1, 0, 2)
    for l in range(c["n_layer"]):
        w = lambda n: t64(p, f"transformer.h.{l}.{n}")
        h = layer_norm(x, w("ln_1.weight"), w("ln_1.bias"), eps)
        qkv = h @ w("attn.c_attn.weight") + w("attn.c_attn.bias")  # Conv1D: [in, out]
        q, k, v = (heads(t) for t in np.split(qkv, 3, axis=-1))
        y = causal_attention(q, k, v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ w("attn.c_proj.weight") + w("attn.c_proj.bias")
        h = layer_norm(x, w("ln_2.weight"), w("ln_2.bias"), eps)
        h = gelu_tanh(h @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"))
        x = x + h @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
    x = layer_norm(x, t64(p, "transformer.ln_f.weight"), t64(p, "transformer.ln_f.bias"), eps)
    return x @ t64(p, "transformer.wte.weight").T


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return np.concatenate((-x2, x1), axis=-1)


def rope_inv_freq(c, hd):
    """transformers' inverse frequencies and attention factor for config c (float64)."""
    scaling = c.get("rope_scaling") or c.get("rope_parameters") or {}
    theta = scaling.get("rope_theta", c.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq, 1.0
    factor = scaling["factor"]
    if kind == "llama3":
        old = scaling["original_max_position_embeddings"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return np.where(medium, smoothed, scaled), 1.0
    assert kind == "yarn", f"rope_type {kind!r}: not in this reference"
    old = scaling.get("original_max_position_embeddings") or c["max_position_embeddings"]
    attention = scaling.get("attention_factor")
    if attention is None:
        attention = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1
    dim_of = lambda rot: (hd * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(theta))
    low, high = max(math.floor(dim_of(beta_fast)), 0), min(math.ceil(dim_of(beta_slow)), hd - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(hd // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    return (inv_freq / factor) * (1 - extrapolation) + inv_freq * extrapolation, attention


QWEN = ("qwen2", "qwen3", "qwen3_moe")


def qwen3_moe_sparse(c, l):
    """Whether Qwen3MoeDecoderLayer l has the sparse (experts) mlp."""
    return (l not in (c.get("mlp_only_layers") or []) and c["num_experts"] > 0
            and (l + 1) % c["decoder_sparse_step"] == 0)


def route(probs, top_k, renormalise):
    """Per row, the top_k largest of probs (ties to the lower index) kept, the rest 0."""
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :top_k]
    keep = np.zeros_like(probs)
    np.put_along_axis(keep, top, np.take_along_axis(probs, top, -1), -1)
    if renormalise:
        keep /= keep.sum(-1, keepdims=True)
    return keep


def llama_logits(c, p, ids):
    """LLaMA, Mixtral, Qwen2, Qwen3 and Qwen3-MoE logits [T, vocab] in float64."""
    T, C, H, KV = len(ids), c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    kind = c["model_type"]
    hd = c.get("head_dim") or C // H
    if kind in QWEN:
        assert not c.get("attention_bias"), "attention_bias true: not in this reference"
        window = c.get("sliding_window") if c.get("use_sliding_window") else None
        assert window is None or T <= window or c.get("max_window_layers", 0) >= c["num_hidden_layers"], \
            "a Qwen sliding window shorter than the ids: not in this reference"
    eps = c["rms_norm_eps"]
    rms = lambda x, w: w * (x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps))
    inv_freq, attention = rope_inv_freq(c, hd)
    freqs = np.outer(np.arange(T, dtype=np.float64), inv_freq)
    emb = np.concatenate((freqs, freqs), axis=-1)
    cos, sin = np.cos(emb) * attention, np.sin(emb) * attention
    x = t64(p, "model.embed_tokens.weight")[ids]
    for l in range(c["num_hidden_layers"]):
        w = lambda n: t64(p, f"model.layers.{l}.{n}")
        h = rms(x, w("input_layernorm.weight"))
        q, k, v = (h @ w(f"self_attn.{n}_proj.weight").T for n in "qkv")
        if kind == "qwen2":
            q, k, v = (t + w(f"self_attn.{n}_proj.bias") for t, n in zip((q, k, v), "qkv"))
        q = q.reshape(T, H, hd).transpose(1, 0, 2)
        k = k.reshape(T, KV, hd).transpose(1, 0, 2)
        v = v.reshape(T, KV, hd).transpose(1, 0, 2)
        if kind in ("qwen3", "qwen3_moe"):  # per head, over head_dim, before RoPE
            q, k = rms(q, w("self_attn.q_norm.weight")), rms(k, w("self_attn.k_norm.weight"))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
        y = causal_attention(q, k, v).transpose(1, 0, 2).reshape(T, H * hd)
        x = x + y @ w("self_attn.o_proj.weight").T
        h = rms(x, w("post_attention_layernorm.weight"))
        swiglu = lambda g, u, d: ((h @ w(g).T) / (1 + np.exp(-(h @ w(g).T))) * (h @ w(u).T)) @ w(d).T
        if kind == "mixtral":
            probs = softmax(h @ w("block_sparse_moe.gate.weight").T)  # [T, experts]
            keep = route(probs, c["num_experts_per_tok"], True)
            e = "block_sparse_moe.experts.{}.{}.weight"
            for i in range(c["num_local_experts"]):
                x = x + keep[:, i:i + 1] * swiglu(e.format(i, "w1"), e.format(i, "w3"), e.format(i, "w2"))
        elif kind == "qwen3_moe" and qwen3_moe_sparse(c, l):
            probs = softmax(h @ w("mlp.gate.weight").T)  # [T, experts]
            keep = route(probs, c["num_experts_per_tok"], c["norm_topk_prob"])
            e = "mlp.experts.{}.{}.weight"
            out = np.zeros_like(x)
            for i in range(c["num_experts"]):
                out += keep[:, i:i + 1] * swiglu(e.format(i, "gate_proj"), e.format(i, "up_proj"), e.format(i, "down_proj"))
            x = x + out
        else:
            x = x + swiglu("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
    x = rms(x, t64(p, "model.norm.weight"))
    head = "model.embed_tokens.weight" if c.get("tie_word_embeddings") else "lm_head.weight"
    return x @ t64(p, head).T


def expected_names(c):
    if c["model_type"] == "gpt2":
        per = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
               "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
               "mlp.c_proj.weight", "mlp.c_proj.bias"]
        names = ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"]
        names += [f"transformer.h.{l}.{n}" for l in range(c["n_layer"]) for n in per]
    else:
        kind = c["model_type"]
        attn = ["input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight"]
        if kind == "qwen2":
            attn += ["self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"]
        if kind in ("qwen3", "qwen3_moe"):
            attn += ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]
        dense = ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]

        def per(l):
            if kind == "mixtral":
                return attn + ["block_sparse_moe.gate.weight"] + [
                    f"block_sparse_moe.experts.{e}.{w}.weight" for e in range(c["num_local_experts"]) for w in ("w1", "w2", "w3")]
            if kind == "qwen3_moe" and qwen3_moe_sparse(c, l):
                return attn + ["mlp.gate.weight"] + [f"mlp.experts.{e}.{w}.weight" for e in range(c["num_experts"])
                                                     for w in ("gate_proj", "up_proj", "down_proj")]
            return attn + dense
        names = ["model.embed_tokens.weight", "model.norm.weight"]
        names += [f"model.layers.{l}.{n}" for l in range(c["num_hidden_layers"]) for n in per(l)]
        if not c.get("tie_word_embeddings"):
            names.append("lm_head.weight")
    return set(names)


def cmd_logprobs(d, ref_path, tol, hub_names=False):
    c, p = read_folder(d)
    if hub_names and c["model_type"] == "gpt2":  # the Hub's gpt2 naming: no prefix, mask buffers
        p = {(k if k.startswith("transformer.") else "transformer." + k): v for k, v in p.items()
             if not k.endswith(".attn.bias")}
    assert set(p) == expected_names(c), f"tensors: extra {set(p) - expected_names(c)}, missing {expected_names(c) - set(p)}"
    want = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}[c["torch_dtype"]]
    assert all(dt == want for dt, _ in p.values()), f"dtypes other than {want}"
    ref = json.load(open(ref_path))
    ids = np.array(ref["ids"])
    logits = gpt2_logits(c, p, ids) if c["model_type"] == "gpt2" else llama_logits(c, p, ids)
    assert logits.shape[1] == c["vocab_size"], logits.shape
    mx = logits.max(-1, keepdims=True)
    ours = logits - mx - np.log(np.exp(logits - mx).sum(-1, keepdims=True))
    theirs = np.array(ref["logprobs"], dtype=np.float64)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    rel = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    print(f"{c['model_type']} {c['torch_dtype']}: {len(ids)} positions x {c['vocab_size']} log-probs, "
          f"max |HF fp64 - mpitron| / max |mpitron| = {rel:.2e} (bound {tol:g})")
    assert rel <= tol, f"log-probs differ: {rel:.3e} > {tol:g}"


def cmd_rounded(d32, d):
    c32, p32 = read_folder(d32)
    c, p = read_folder(d)
    assert set(p) == set(p32), "different tensor names"
    kind = c["torch_dtype"]
    for name, (dt, a) in p.items():
        x = np.array(p32[name][1], dtype=np.float32)
        if kind == "bfloat16":
            assert dt == "BF16", (name, dt)
            u = x.view(np.uint32).astype(np.uint64)
            want = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
            same = np.array_equal(a.view(np.uint32), want.view(np.uint32))
        else:
            assert kind == "float16" and dt == "F16", (name, dt)
            want = x.astype(np.float16)
            same = np.array_equal(a.view(np.uint16), want.view(np.uint16))
        assert a.shape == want.shape and same, f"{name}: not the {kind} rounding of the fp32 export"
    print(f"{kind}: {len(p)} tensors equal the fp32 export rounded to nearest even")


def write_safetensors(path, tensors):  # name -> (dtype string, numpy array of that dtype's bits)
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dt, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def llama_shapes(C, H, KV, F, V, L, hd=None):
    """HF LlamaForCausalLM tensor shapes (untied), by name, in the usual order (head size hd, default C // H)."""
    hd = hd or C // H
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (C,), p + "self_attn.q_proj.weight": (H * hd, C),
                       p + "self_attn.k_proj.weight": (KV * hd, C), p + "self_attn.v_proj.weight": (KV * hd, C),
                       p + "self_attn.o_proj.weight": (C, H * hd), p + "post_attention_layernorm.weight": (C,),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
    return shapes


def qwen_shapes(c):
    """HF Qwen2 / Qwen3 / Qwen3-MoE ForCausalLM tensor shapes (untied) for config c, by name, in the usual order."""
    kind, C, V = c["model_type"], c["hidden_size"], c["vocab_size"]
    H, KV, F = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
    hd = c.get("head_dim") or C // H
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes[p + "input_layernorm.weight"] = (C,)
        for n, width in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
            shapes[p + f"self_attn.{n}_proj.weight"] = (width, C)
            if kind == "qwen2":
                shapes[p + f"self_attn.{n}_proj.bias"] = (width,)
        shapes[p + "self_attn.o_proj.weight"] = (C, H * hd)
        if kind != "qwen2":
            shapes.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
        shapes[p + "post_attention_layernorm.weight"] = (C,)
        if kind == "qwen3_moe" and qwen3_moe_sparse(c, l):
            E, M = c["num_experts"], c["moe_intermediate_size"]
            shapes[p + "mlp.gate.weight"] = (E, C)
            for e in range(E):
                x = p + f"mlp.experts.{e}."
                shapes.update({x + "gate_proj.weight": (M, C), x + "up_proj.weight": (M, C), x + "down_proj.weight": (C, M)})
        else:
            shapes.update({p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                           p + "mlp.down_proj.weight": (C, F)})
    return shapes


def byte_tokenizer_json():
    # GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest map to 256 + n.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    char = dict(zip(bs, map(chr, cs)))
    vocab = {char[b]: b for b in range(256)}
    vocab["<|endoftext|>"] = 256
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "added_tokens": [{"id": 256, "content": "<|endoftext|>", "special": True}],
            "pre_tokenizer": bl, "decoder": bl, "model": {"type": "BPE", "vocab": vocab, "merges": []}}


def cmd_write_random(d, arch, bf16, shards, heads=4, rope_scaling=None, tied=False, head_dim=None,
                     norm_topk=True, mlp_only_layers=(), sparse_step=1):
    assert arch in ("gpt2", "llama", "mixtral") + QWEN, f"write-random: no arch {arch!r}"
    assert head_dim is None or arch in ("qwen3", "qwen3_moe"), "--head-dim: qwen3 and qwen3_moe only"
    assert not tied or arch != "gpt2", "--tied: gpt2 is always tied"
    rng = np.random.default_rng(7)
    os.makedirs(d, exist_ok=True)
    V, C, L = 257, 32, 2
    if arch == "gpt2":
        c = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": 64,
             "n_ctx": 64, "n_embd": C, "n_layer": L, "n_head": 4, "n_inner": None, "activation_function": "gelu_new",
             "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
        shapes = {"wte.weight": (V, C), "wpe.weight": (64, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
        for l in range(L):
            shapes.update({f"h.{l}.ln_1.weight": (C,), f"h.{l}.ln_1.bias": (C,), f"h.{l}.attn.c_attn.weight": (C, 3 * C),
                           f"h.{l}.attn.c_attn.bias": (3 * C,), f"h.{l}.attn.c_proj.weight": (C, C),
                           f"h.{l}.attn.c_proj.bias": (C,), f"h.{l}.ln_2.weight": (C,), f"h.{l}.ln_2.bias": (C,),
                           f"h.{l}.mlp.c_fc.weight": (C, 4 * C), f"h.{l}.mlp.c_fc.bias": (4 * C,),
                           f"h.{l}.mlp.c_proj.weight": (4 * C, C), f"h.{l}.mlp.c_proj.bias": (C,)})
    else:
        H, KV, F = heads, heads // 2 if heads > 2 else heads, 80
        c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
             "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
             "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
             "tie_word_embeddings": False}
        if rope_scaling is not None:
            c["rope_scaling"] = rope_scaling
        shapes = llama_shapes(C, H, KV, F, V, L)
        if arch == "mixtral":  # 4 experts of width F, top 2, in every layer
            c.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
                      "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, "sliding_window": None})
            for l in range(L):
                p = f"model.layers.{l}."
                for n in ("gate_proj", "up_proj", "down_proj"):
                    del shapes[p + f"mlp.{n}.weight"]
                shapes[p + "block_sparse_moe.gate.weight"] = (4, C)
                for e in range(4):
                    x = p + f"block_sparse_moe.experts.{e}."
                    shapes.update({x + "w1.weight": (F, C), x + "w2.weight": (C, F), x + "w3.weight": (F, C)})
        elif arch in QWEN:  # Qwen2Config / Qwen3Config / Qwen3MoeConfig as transformers writes them
            c.update({"architectures": [{"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                                         "qwen3_moe": "Qwen3MoeForCausalLM"}[arch]], "model_type": arch,
                      "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": L,
                      "attention_dropout": 0.0})
            if arch != "qwen2":
                c.update({"head_dim": head_dim or C // H, "attention_bias": False})
            if arch == "qwen3_moe":
                c.update({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                          "norm_topk_prob": norm_topk, "decoder_sparse_step": sparse_step,
                          "mlp_only_layers": list(mlp_only_layers), "router_aux_loss_coef": 0.001})
            shapes = qwen_shapes(c)
        if tied:
            c["tie_word_embeddings"] = True
            del shapes["lm_head.weight"]
    c["torch_dtype"] = "bfloat16" if bf16 else "float32"
    tensors = {}
    for name, shape in shapes.items():
        norm = name.endswith("norm.weight") or ".ln_" in name or name.startswith("ln_f")
        a = (1 + 0.1 * rng.standard_normal(shape) if norm and name.endswith("weight") else 0.1 * rng.standard_normal(shape))
        a = a.astype(np.float32)
        if bf16:  # truncation is as good as rounding for random weights; the reader widens them exactly
            tensors[name] = ("BF16", (a.view(np.uint32) >> 16).astype(np.uint16))
        else:
            tensors[name] = ("F32", a)
    if arch == "gpt2":  # the Hub's gpt2 stores its causal-mask buffers too
        for l in range(L):
            tensors[f"h.{l}.attn.bias"] = ("F32", np.tril(np.ones((1, 1, 64, 64), dtype=np.float32)))
    names = list(tensors)
    if shards > 1:
        parts = [names[i::shards] for i in range(shards)]
        wm = {}
        for i, part in enumerate(parts):
            f = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(os.path.join(d, f), {n: tensors[n] for n in part})
            wm.update({n: f for n in part})
        json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
    json.dump(byte_tokenizer_json(), open(os.path.join(d, "tokenizer.json"), "w"))
    print(f"wrote a random {arch} ({c['torch_dtype']}, {max(shards, 1)} file(s)) to {d}")


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "logprobs":
        tol = float(a[a.index("--tol") + 1]) if "--tol" in a else 1e-5
        cmd_logprobs(a[1], a[2], tol, "--hub-names" in a)
    elif a and a[0] == "write-random":
        opt = lambda name, conv, default: conv(a[a.index(name) + 1]) if name in a else default
        cmd_write_random(a[1], a[2], "--bf16" in a, opt("--shards", int, 1), opt("--heads", int, 4),
                         opt("--rope-scaling", json.loads, None), "--tied" in a, opt("--head-dim", int, None),
                         "--no-norm-topk" not in a, opt("--mlp-only-layers", json.loads, []), opt("--sparse-step", int, 1))
    elif a and a[0] == "rounded":
        cmd_rounded(a[1], a[2])
    else:
        sys.exit(__doc__)
