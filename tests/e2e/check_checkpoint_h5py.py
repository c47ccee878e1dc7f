#!/usr/bin/env python3
"""Reads an mpitron checkpoint with h5py only and checks the layout docs/checkpoint.md documents,
every tensor's checksum included (computed here with numpy from the documented formula).
usage: check_checkpoint_h5py.py CKPT.h5 [expected_step]"""
import json, os, sys
import h5py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_checksum import tensor_checksum

path = sys.argv[1]
f = h5py.File(path, "r")
assert f.attrs["format"] == "mpitron-checkpoint", dict(f.attrs)
version = int(f.attrs["format_version"])
assert version in (1, 2), version
assert int(f.attrs["complete"]) == 1
step = int(f.attrs["step"])
if len(sys.argv) > 2:
    assert step == int(sys.argv[2]), (step, sys.argv[2])
cfg = f["config"].attrs
L, C, V, T, F = (int(cfg[k]) for k in ("n_layer", "d_model", "vocab_size", "seq_len", "d_ff"))
want = {"wte.weight": (V, C), "wpe.weight": (T, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
for l in range(L):
    h = f"h.{l}."
    want.update({h + "ln_1.weight": (C,), h + "attn.c_attn.weight": (3 * C, C), h + "attn.c_attn.bias": (3 * C,),
                 h + "attn.c_proj.weight": (C, C), h + "mlp.c_fc.weight": (F, C), h + "mlp.c_proj.weight": (C, F)})
for group in ("model", "optim/exp_avg", "optim/exp_avg_sq"):
    for name, shape in want.items():
        ds = f[f"{group}/{name}"]
        assert ds.shape == shape and ds.dtype == "float32", (group, name, ds.shape, shape)
        data = ds[()]
        assert int(ds.attrs["checksum"]) == tensor_checksum(data, version), (group, name, "checksum")
lay = f["layout"].attrs
assert int(lay["world"]) == int(lay["tp"]) * int(lay["cp"]) * int(lay["dp"]) * int(lay["pp"])
s = f["sampler"].attrs
assert int(s["global_position"]) == int(s["position"]) * int(s["dp"])
tok = json.loads(f["tokenizer_json"][()].decode())
assert tok["format"] == "mpitron-tokenizer", tok
assert b"[train]" in f["config/job_toml"][()]
assert int(f["rng"].attrs["train_seed"]) >= 0
ln = f["model/h.0.ln_1.weight"][()]
print(f"ok: {path}: format {version}, checksums match, step {step}, {len(want)} tensors x 3, layout tp{int(lay['tp'])} dp{int(lay['dp'])} "
      f"pp{int(lay['pp'])} zero{int(lay['zero'])}, ln_1 mean {ln.mean():.4f}")
