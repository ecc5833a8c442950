"""Random transcoder sets in circuit-tracer's layout, for the graph tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file


def write_transcoders(folder: Path, n_layers: int, d_model: int, width: int, *,
                      hook_in: str = "ln2.hook_normalized", skip: bool = False,
                      jump: bool = False, seed: int = 0, npz: bool = False) -> Path:
    """One file per layer; biases chosen so that a few features fire per token."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for layer in range(n_layers):
        t = {"W_enc": torch.randn(width, d_model, generator=g) / d_model ** 0.5,
             "W_dec": torch.randn(width, d_model, generator=g) / width ** 0.5,
             "b_enc": torch.randn(width, generator=g) * 0.1 - 0.3,
             "b_dec": torch.randn(d_model, generator=g) * 0.1}
        if skip:
            t["W_skip"] = torch.randn(d_model, d_model, generator=g) * 0.02
        if jump:
            t["activation_function.threshold"] = torch.rand(width, generator=g) * 0.2
        if npz:  # Gemma Scope's params.npz: W_enc stored (d_model, width), `threshold`
            name = f"layer_{layer}.npz"
            arrays = {k: v.numpy() for k, v in t.items() if k != "activation_function.threshold"}
            arrays["W_enc"] = arrays["W_enc"].T.copy()
            arrays["threshold"] = t.get("activation_function.threshold",
                                        torch.zeros(width)).numpy()
            np.savez(folder / name, **arrays)
        else:
            name = f"layer_{layer}.safetensors"
            save_file(t, str(folder / name))
        files.append(name)
    (folder / "config.yaml").write_text(
        "model_kind: transcoder_set\n"
        f"feature_input_hook: {hook_in}\nfeature_output_hook: hook_mlp_out\n"
        "transcoders:\n" + "".join(f"  - {f}\n" for f in files), encoding="utf-8")
    return folder


def write_clt(folder: Path, n_layers: int, d_model: int, width: int, *, seed: int = 0,
              hook_in: str = "hook_resid_mid") -> Path:
    """A cross-layer transcoder in circuit-tracer's layout: W_enc_I and W_dec_I files."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_layers):
        save_file({f"W_enc_{i}": torch.randn(width, d_model, generator=g) / d_model ** 0.5,
                   f"b_enc_{i}": torch.randn(width, generator=g) * 0.1 - 0.3,
                   f"b_dec_{i}": torch.randn(d_model, generator=g) * 0.1},
                  str(folder / f"W_enc_{i}.safetensors"))
        save_file({f"W_dec_{i}": torch.randn(width, n_layers - i, d_model, generator=g)
                   / width ** 0.5}, str(folder / f"W_dec_{i}.safetensors"))
    (folder / "config.yaml").write_text(
        f"model_kind: cross_layer_transcoder\nfeature_input_hook: {hook_in}\n"
        "feature_output_hook: hook_mlp_out\n", encoding="utf-8")
    return folder
