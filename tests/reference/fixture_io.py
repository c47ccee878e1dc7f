"""The HDF5 fixture both references write (README.md lists its datasets and attributes): the
config and optimizer settings as attributes, the batch, the logits, and per parameter its initial
value, its gradient of the mean loss and its value after the AdamW steps, all stored as float32."""
import h5py
import numpy as np


def write_fixture(path, attrs, generator, inputs, targets, logits, init, grads, params_after, n, loss_sum):
    f32 = lambda t: t.detach().numpy().astype(np.float32)
    with h5py.File(path, "w") as f:
        for k, v in attrs.items():
            f.attrs[k] = v
        f.attrs["n_targets"] = n
        f.attrs["loss_sum"] = float(loss_sum)
        f.attrs["generator"] = generator
        f["inputs"] = inputs.numpy().astype(np.int32)
        f["targets"] = targets.numpy().astype(np.int32)
        f.create_dataset("logits", data=f32(logits), compression="gzip")
        for k in params_after:
            f.create_dataset("params/" + k, data=f32(init[k]), compression="gzip")
            f.create_dataset("grads/" + k, data=f32(grads[k]), compression="gzip")
            f.create_dataset("params_after/" + k, data=f32(params_after[k]), compression="gzip")
    print(f"wrote {path}: loss_sum {float(loss_sum):.6f} over {n} targets")
