#!/usr/bin/env python3
"""A random LLaMA-shaped Hugging Face folder for bench/export/run.sh (F32, one model.safetensors,
written tensor by tensor so a 4 GB model needs one tensor of memory).

usage: random_hf.py DIR LAYERS [SEQ]   (llama-1b's shape: d 2048, 32 heads, 4 kv heads, d_ff 5632,
vocab 32000, seq 2048 unless SEQ; LAYERS 22 for the whole 1.1B model)
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../tests/reference"))
from hf_reference import byte_tokenizer_json, llama_shapes  # noqa: E402

d, L = sys.argv[1], int(sys.argv[2])
C, H, KV, F, V, T = 2048, 32, 4, 5632, 32000, int(sys.argv[3]) if len(sys.argv) > 3 else 2048
shapes = llama_shapes(C, H, KV, F, V, L)
header, at = {"__metadata__": {"format": "pt"}}, 0
for n, s in shapes.items():
    size = 4 * int(np.prod(s))
    header[n] = {"dtype": "F32", "shape": list(s), "data_offsets": [at, at + size]}
    at += size
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(1)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for n, s in shapes.items():
        f.write((0.02 * rng.standard_normal(s, dtype=np.float32)).tobytes())
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
          "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
          "max_position_embeddings": T, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
          "tie_word_embeddings": False, "torch_dtype": "float32"}
json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=1)
json.dump(byte_tokenizer_json(), open(os.path.join(d, "tokenizer.json"), "w"))  # GGUF export needs one
print(f"{d}: {at / 1e9:.2f} GB of F32 tensors, {L} layers")
