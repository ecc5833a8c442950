"""Writing an SAE folder: SAELens's format (cfg.json v6 + sae_weights.safetensors), the
one `tfx train-sae` is to write so that SAELens, Neuronpedia's tooling and tfx itself
read it, and tfx's own (tfx-sae.json + sae.safetensors, the site as a tfx trace name).

A folder is written beside its final name and renamed into place: a reader never sees
half of one, and an existing folder is replaced only when `force` says so.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..outputs import atomic_folder
from .architectures import TFX
from .formats import SAELENS_CFG, SAELENS_WEIGHTS, TFX_CFG, TFX_FORMAT, TFX_WEIGHTS

# SAELens's v6 architecture names for tfx's activations (relu: standard)
_SAELENS_ARCH = {name: kind.saelens[0] for name, kind in TFX.items()}
SAELENS_VERSION = "6.0.0"  # the config layout written: v6 (top-level architecture, metadata)


def _tensors(W_enc, W_dec, b_enc, b_dec, threshold) -> dict:
    import torch

    out = {"W_enc": W_enc, "W_dec": W_dec, "b_enc": b_enc, "b_dec": b_dec}
    if threshold is not None:
        out["threshold"] = threshold
    return {k: torch.as_tensor(v).detach().to("cpu", torch.float32).contiguous()
            for k, v in out.items()}


def saelens_files(*, activation: str, W_enc, W_dec, b_enc, b_dec, hook_name: str,
                  threshold=None, k: int | None = None, apply_b_dec_to_input: bool = True,
                  model_name: str | None = None, metadata: dict | None = None
                  ) -> tuple[dict, dict]:
    """(cfg.json's content, sae_weights.safetensors' tensors) of an SAE in SAELens's
    format."""
    tensors = _tensors(W_enc, W_dec, b_enc, b_dec, threshold)
    d_in, d_sae = tensors["W_enc"].shape
    cfg = {"architecture": _SAELENS_ARCH[activation], "d_in": int(d_in), "d_sae": int(d_sae),
           "dtype": "float32", "device": "cpu", "apply_b_dec_to_input": apply_b_dec_to_input,
           "normalize_activations": "none", "reshape_activations":
               "hook_z" if hook_name.endswith("hook_z") else "none",
           "metadata": {"sae_lens_version": SAELENS_VERSION,
                        "sae_lens_training_version": SAELENS_VERSION,
                        "hook_name": hook_name, "model_name": model_name,
                        **(metadata or {})}}
    if TFX[activation].needs_k:
        cfg["k"] = int(k)
    return cfg, tensors


def write_saelens(folder: str | Path, *, activation: str, W_enc, W_dec, b_enc, b_dec,
                  hook_name: str, threshold=None, k: int | None = None,
                  apply_b_dec_to_input: bool = True, model_name: str | None = None,
                  metadata: dict | None = None, force: bool = False) -> Path:
    """An SAE in SAELens's folder format. `hook_name` is the site as TransformerLens
    names it (blocks.3.hook_resid_post) or a tfx name; `activation` relu, jumprelu or
    topk (with k)."""
    from safetensors.torch import save_file

    cfg, tensors = saelens_files(activation=activation, W_enc=W_enc, W_dec=W_dec,
                                 b_enc=b_enc, b_dec=b_dec, hook_name=hook_name,
                                 threshold=threshold, k=k,
                                 apply_b_dec_to_input=apply_b_dec_to_input,
                                 model_name=model_name, metadata=metadata)

    def write(tmp: Path) -> None:
        (tmp / SAELENS_CFG).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / SAELENS_WEIGHTS))

    return atomic_folder(folder, write, force=force)


def write_tfx(folder: str | Path, *, activation: str, W_enc, W_dec, b_enc, b_dec,
              site: str, threshold=None, k: int | None = None,
              apply_b_dec_to_input: bool = True, force: bool = False) -> Path:
    """An SAE in tfx's own format: tfx-sae.json names the site as a trace name."""
    from safetensors.torch import save_file

    tensors = _tensors(W_enc, W_dec, b_enc, b_dec, threshold)
    d_in, d_sae = tensors["W_enc"].shape
    cfg = {"format": TFX_FORMAT, "architecture": activation, "d_in": int(d_in),
           "d_sae": int(d_sae), "k": None if k is None else int(k),
           "apply_b_dec_to_input": apply_b_dec_to_input, "site": site}

    def write(tmp: Path) -> None:
        (tmp / TFX_CFG).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / TFX_WEIGHTS))

    return atomic_folder(folder, write, force=force)


__all__ = ["write_saelens", "write_tfx", "saelens_files"]
