"""`tfx train-transcoder COLLECT_DIR --layer I -o DIR`: per-layer transcoders trained on a
collect folder's pairs (an MLP's input and its output, collected in one pass), written in
circuit-tracer's layout.

For each layer: x = blocks.{i}.ln2.out (or resid_mid), y = blocks.{i}.ffn.out; the
transcoder f = act(x·W_encᵀ + b_enc) (TopK, ReLU, or JumpReLU whose threshold the file
holds as `activation_function.threshold`), ŷ = f·W_dec + b_dec (+ x·W_skipᵀ with --skip) is
trained by train-sae's trainer (trainer.py, transcoder=True) with the same options,
checkpoints and resumption (training.py's RunFolder and step loop), each layer's run in
DIR/state/layer_{i}/. DIR gets, per layer, layer_{i}.safetensors: W_enc (F, D), W_dec
(F, D), b_enc (F), b_dec (D) and W_skip (D, D) with --skip, as circuit-tracer 0.5.0's
load_relu_transcoder reads them (ReLU, or JumpReLU with a threshold);
once every layer of the model has its file, DIR/config.yaml names the set:
model_kind transcoder_set, feature_input_hook / feature_output_hook (TransformerLens
names inside a block: mlp.hook_in = ln2's output, hook_resid_mid, hook_mlp_out) and
`transcoders:` the files in layer order, relative to DIR. A TopK set's files carry
k in their metadata; circuit-tracer has no TopK loader and would read one as ReLU.
The MLP output's FVU on the held-out last tokens is reported per layer.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import torch

from ...errors import OutputFileError, RangeError, SelectError, UsageError, write_error
from ..outputs import make_folder
from . import metrics
from .trainer import Trainer
from .training import (NEVER, RunFolder, split, _b_dec_start, _curve,
                       _forget_run, _train, resolve_options)

# the MLP's input as tfx names it in a block -> circuit-tracer's feature_input_hook
INPUT_SITES = {"ln2.out": "mlp.hook_in", "resid_mid": "hook_resid_mid"}
OUTPUT_SITE, OUTPUT_HOOK = "ffn.out", "hook_mlp_out"
CONFIG = "config.yaml"
META_KEY = "tfx"  # the safetensors metadata key holding what the file is, as JSON
STATE_DIR = "state"


def layer_file(layer: int) -> str:
    return f"layer_{layer}.safetensors"


def _ours(name: str) -> bool:
    return name in (CONFIG, STATE_DIR) or (name.startswith("layer_") and
                                           name.endswith(".safetensors"))


def parse_layers(layers, n_layers: int) -> list[int]:
    """--layer I (repeatable) or --layers all / 0,3 / 0:4 -> the layers, in order."""
    if layers is None or (isinstance(layers, (list, tuple)) and not layers):
        raise UsageError("--layer is missing; name the layer to train (--layer 3), or "
                         "--layers all for a transcoder on every layer")
    items = [layers] if isinstance(layers, (str, int)) else list(layers)
    out: list[int] = []
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if part == "all":
                span = range(n_layers)
            else:
                try:
                    lo, sep, hi = part.partition(":")
                    span = range(int(lo or 0), int(hi) if hi else n_layers) if sep \
                        else [int(part)]
                except ValueError:
                    raise UsageError(f"--layer {part!r} is not a layer number, a range such "
                                     "as 0:4, or all") from None
            for layer in span:
                if not 0 <= layer < n_layers:
                    raise RangeError(f"--layer {layer} is out of range: the model of the "
                                     f"collect folder has {n_layers} layers (0 to "
                                     f"{n_layers - 1})")
                if layer not in out:
                    out.append(layer)
    if not out:
        raise UsageError(f"--layer {','.join(map(str, items))!r} names no layer; e.g. "
                         "--layer 0 or --layers all")
    return sorted(out)


def check_sites(acts, layers: list[int], input_site: str) -> None:
    """Both sites of every layer must be in the collect folder, collected together."""
    if input_site not in INPUT_SITES:
        raise UsageError(f"--input-site {input_site!r} is not one tfx trains transcoders on; "
                         f"use one of {', '.join(INPUT_SITES)} (the MLP's input)")
    for layer in layers:
        for site in (f"blocks.{layer}.{input_site}", f"blocks.{layer}.{OUTPUT_SITE}"):
            if site not in acts.sites:
                raise SelectError(
                    f"{acts.path} has no {site} (it holds {', '.join(acts.sites)}); a "
                    f"transcoder of layer {layer} trains on blocks.{layer}.{input_site} and "
                    f"blocks.{layer}.{OUTPUT_SITE}: collect both in one pass, e.g. tfx collect "
                    f"CORPUS --select 'blocks.*.{input_site}' --select 'blocks.*.{OUTPUT_SITE}'"
                    " -o acts")


def open_output(path: Path, force: bool) -> Path:
    """DIR: new, empty, or holding only a transcoder set's own files (or --force)."""
    make_folder(path, "-o {path} is a file; give a folder for the transcoders")
    others = [p.name for p in path.iterdir() if not _ours(p.name)]
    if others and not force:
        raise OutputFileError(f"-o {path} holds files tfx train-transcoder did not write "
                              f"({others[0]}); give a new or empty folder, or pass --force "
                              "to write the transcoders beside them")
    (path / STATE_DIR).mkdir(exist_ok=True)
    return path


def _atomic_tensors(path: Path, tensors: dict, metadata: dict) -> None:
    from safetensors.torch import save_file

    tmp = path.parent / f".{path.name}.tmp"
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(path, exc, "") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def circuit_tracer_tensors(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The trained transcoder in circuit-tracer's names and shapes (raw activations in
    and out: the training scales folded out)."""
    w = trainer.weights()
    out = {"W_enc": w["W_enc"].T.contiguous(), "W_dec": w["W_dec"], "b_enc": w["b_enc"],
           "b_dec": w["b_dec"]}
    if "W_skip" in w:
        out["W_skip"] = w["W_skip"]
    if "threshold" in w:  # JumpReLU: circuit-tracer's name, inside its activation module
        out["activation_function.threshold"] = w["threshold"]
    return out


def encode(tensors: dict, x: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """A layer file's features of x (..., D): ReLU(x·W_encᵀ + b_enc), JumpReLU where the
    file has circuit-tracer's threshold (pre kept where pre > θ), TopK with k."""
    pre = x @ tensors["W_enc"].T + tensors["b_enc"]
    theta = tensors.get("activation_function.threshold")
    if theta is not None:
        return pre * (pre > theta)
    if k is None:
        return torch.relu(pre)
    values, index = torch.topk(pre, k, dim=-1)
    return torch.zeros_like(pre).scatter_(-1, index, torch.relu(values))


def decode(tensors: dict, f: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """f·W_dec + b_dec, plus x·W_skipᵀ where the file has a skip path."""
    out = f @ tensors["W_dec"] + tensors["b_dec"]
    return out + x @ tensors["W_skip"].T if "W_skip" in tensors else out


def judge(tensors: dict, x: torch.Tensor, y: torch.Tensor, k: int | None,
          rows_at_once: int = 4096) -> dict:
    """The written transcoder on held-out pairs: FVU of y, mean L0, dead latents."""
    recon, l0_sum = [], 0
    fired = torch.zeros(tensors["W_enc"].shape[0], dtype=torch.bool)
    with torch.inference_mode():
        for i in range(0, len(x), rows_at_once):
            xs = x[i:i + rows_at_once]
            f = encode(tensors, xs, k)
            recon.append(decode(tensors, f, xs))
            l0_sum += int(metrics.l0(f).sum())
            fired |= (f != 0).any(dim=0)
    return {"fvu": metrics.fvu(y, torch.cat(recon)), "l0": l0_sum / max(len(x), 1),
            "dead": int((~fired).sum()), "tokens": len(x)}


def _scale(rows: torch.Tensor) -> float:
    return float(math.sqrt(rows.shape[1]) /
                 rows.to(torch.float64).norm(dim=1).mean().clamp_min(1e-12))


def config_text(n_layers: int, input_site: str, model_name) -> str:
    lines = ["# a per-layer transcoder set written by tfx train-transcoder",
             "model_kind: transcoder_set"]
    if model_name:
        lines.append(f"model_name: {model_name}")
    lines += [f"feature_input_hook: {INPUT_SITES[input_site]}",
              f"feature_output_hook: {OUTPUT_HOOK}", "transcoders:"]
    lines += [f"  - {layer_file(i)}" for i in range(n_layers)]
    return "\n".join(lines) + "\n"


# -- the run ---------------------------------------------------------------------------------
def _pairs(acts, layer: int, input_site: str, keep) -> tuple[torch.Tensor, torch.Tensor]:
    def rows(site: str) -> torch.Tensor:
        data = acts[site] if keep is None else acts[site][keep]
        return torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))

    return rows(f"blocks.{layer}.{input_site}"), rows(f"blocks.{layer}.{OUTPUT_SITE}")


def _finite(tensors: dict, judged: dict, curve: list, folder: RunFolder, lr: float,
            layer: int) -> None:
    """A diverged layer writes no file and leaves no state (as train-sae's SAE)."""
    from ...errors import NonFiniteError

    broken = [n for n, t in tensors.items() if not bool(torch.isfinite(t).all())]
    if broken or any(v is not None and not math.isfinite(v)
                     for v in (judged["fvu"], judged["l0"], *curve)):
        _forget_run(folder)
        what = f"its {broken[0]} holds NaN or infinite values" if broken else \
            "its loss or held-out FVU is not a finite number"
        raise NonFiniteError(f"layer {layer}'s transcoder diverged in training: {what}, so no "
                             f"file is written for it; train with a lower --lr (now {lr:g})")


def train_layer(acts, layer: int, *, out_dir: Path, input_site: str, options: dict,
                skip: bool, seed: int, holdout: float, skip_first: int, force: bool,
                progress, checkpoint_every: int) -> tuple[dict, float]:
    """One layer's transcoder trained (or resumed, or found finished) and its file written:
    (its row for the result, the seconds this run trained)."""
    keep, n_train, held = split(acts, holdout, skip_first)
    n = n_train + held
    widths = {s["name"]: int(s["shape"][1]) for s in acts.manifest["sites"]}
    d_in = widths[f"blocks.{layer}.{input_site}"]
    d_out = widths[f"blocks.{layer}.{OUTPUT_SITE}"]
    opts = resolve_options(d_in=d_in, train_tokens=n_train, **options)
    identity = {"layer": layer, "input": f"blocks.{layer}.{input_site}",
                "output": f"blocks.{layer}.{OUTPUT_SITE}", "skip": skip, "seed": seed,
                "holdout": holdout, **opts.recorded(),
                **({"skip_first": int(skip_first)} if skip_first else {}),
                "collect": str(Path(acts.path).resolve()), "collect_tokens": n,
                "collect_sha256": acts.manifest.get("tokens_sha256")}
    file = out_dir / layer_file(layer)
    folder = RunFolder(out_dir / STATE_DIR / f"layer_{layer}", identity, force,
                       products=[file])
    with folder:
        if folder.finished is not None:
            return {**folder.finished, "resumed_from": opts.steps}, 0.0
        x, y = _pairs(acts, layer, input_site, keep)
        scale_in, scale_out = _scale(x[:n_train]), _scale(y[:n_train])
        trainer = Trainer(d_in, opts.latents, activation=opts.activation, k=opts.k,
                          l1=opts.l1 or 0.0, lr=opts.lr, aux_k=opts.aux_k,
                          aux_coef=opts.aux_coef or 0.0, dead_after=min(opts.dead_after, NEVER),
                          scale=scale_in, seed=seed, transcoder=True, d_out=d_out,
                          scale_out=scale_out, skip=skip,
                          b_dec=_b_dec_start(y[:n_train], scale_out, opts.b_dec_init, seed))
        losses, start, seconds = _train(
            folder, trainer, x[:n_train], opts, seed=seed, progress=progress,
            checkpoint_every=checkpoint_every, targets=y[:n_train],
            what=f"tfx train-transcoder layer {layer}")
        tensors = circuit_tracer_tensors(trainer)
        judged = judge(tensors, x[n_train:], y[n_train:], opts.k)
        curve = _curve(losses)
        _finite(tensors, judged, curve, folder, opts.lr, layer)
        meta = {"format": "circuit-tracer transcoder", "activation": opts.activation,
                "layer": str(layer), "input_site": identity["input"],
                "output_site": identity["output"], "feature_input_hook": INPUT_SITES[input_site],
                "feature_output_hook": OUTPUT_HOOK, **({"k": str(opts.k)} if opts.k else {})}
        # one key: safetensors writes a metadata map in no fixed order, and a rerun must
        # give the same bytes
        _atomic_tensors(file, tensors, {META_KEY: json.dumps(meta, sort_keys=True)})
        row = dict(layer=layer, file=str(file), fvu=judged["fvu"], l0=judged["l0"],
                   dead=judged["dead"], dead_in_training=int(trainer.dead.sum()),
                   loss_first=curve[0], loss_last=curve[-1], losses=curve,
                   resumed_from=start, train_tokens=n_train, holdout_tokens=held,
                   steps=opts.steps, epochs=opts.steps * opts.batch_size / n_train)
        folder.write_manifest(complete=True, result=row)
        (folder.path / "train-state.safetensors").unlink(missing_ok=True)
    return row, seconds


def write_config(out_dir: Path, n_layers: int, input_site: str, model_name) -> Path | None:
    """DIR/config.yaml once every layer's file is there (None until then)."""
    if not all((out_dir / layer_file(i)).is_file() for i in range(n_layers)):
        return None
    path = out_dir / CONFIG
    tmp = out_dir / f".{CONFIG}.tmp"
    try:
        tmp.write_text(config_text(n_layers, input_site, model_name), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(path, exc, "") from None
    return path


def file_metadata(opened) -> dict:
    """What a layer file says it is (its META_KEY entry), from an opened safetensors."""
    try:
        meta = json.loads((opened.metadata() or {}).get(META_KEY) or "{}")
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def check_set(out_dir: Path, layers: list[int], input_site: str, latents: int,
              skip: bool) -> None:
    """The layer files DIR already holds (other layers') must belong to one set with this
    run's: the same input hook, width and skip path."""
    from safetensors import safe_open

    for file in sorted(out_dir.glob("layer_*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                meta = file_metadata(f)
                width = f.get_slice("W_enc").get_shape()[0]
                has_skip = "W_skip" in f.keys()
        except Exception:  # noqa: BLE001 - any unreadable file: refused by name below
            meta, width, has_skip = {}, None, None
        if f"layer_{meta.get('layer')}.safetensors" != file.name or \
                int(meta["layer"]) in layers:
            continue  # retrained by this run (or not one of ours: --force wrote beside it)
        theirs = (meta.get("feature_input_hook"), width, has_skip)
        if theirs != (INPUT_SITES[input_site], latents, skip):
            raise UsageError(
                f"-o {out_dir} holds {file.name} ({theirs[1]} latents, input "
                f"{theirs[0]}, {'with' if theirs[2] else 'no'} skip), another set than this "
                f"run's ({latents} latents, input {INPUT_SITES[input_site]}, "
                f"{'with' if skip else 'no'} skip); a set's layers must match: use the same "
                "options, or another folder")


def train_transcoders(acts, *, layers, output, input_site="ln2.out", skip=False, k=None,
                      latents=None, expansion=None, l1=None, lr=4e-4, batch_size=4096,
                      steps=None, epochs=None, seed=0, holdout=0.05, skip_first=0,
                      b_dec_init="median", dead_after=None, aux_k=None, aux_coef=1 / 32,
                      jumprelu=None, force=False, progress=None, checkpoint_every=500):
    from ..results import TrainTranscoderResult, TranscoderLayer

    model = acts.manifest.get("model") or {}
    n_layers = int(model.get("n_layers") or 0)
    if n_layers < 1:
        raise UsageError(f"{acts.path}'s manifest names no model with layers; train "
                         "transcoders on a folder written by tfx collect")
    chosen = parse_layers(layers, n_layers)
    check_sites(acts, chosen, input_site)
    _, n_train, _ = split(acts, holdout, skip_first)  # bad input refused before DIR is made
    options = dict(k=k, latents=latents, expansion=expansion, l1=l1, lr=lr,
                   batch_size=batch_size, steps=steps, epochs=epochs, b_dec_init=b_dec_init,
                   dead_after=dead_after, aux_k=aux_k, aux_coef=aux_coef, jumprelu=jumprelu)
    d_in = {s["name"]: int(s["shape"][1]) for s in acts.manifest["sites"]}[
        f"blocks.{chosen[0]}.{input_site}"]
    opts = resolve_options(d_in=d_in, train_tokens=n_train, **options)
    out_dir = open_output(Path(output).expanduser(), force)
    check_set(out_dir, chosen, input_site, opts.latents, skip)
    rows, seconds, trained = [], 0.0, 0
    for layer in chosen:
        row, took = train_layer(acts, layer, out_dir=out_dir, input_site=input_site,
                                options=options, skip=skip, seed=seed, holdout=holdout,
                                skip_first=skip_first, force=force, progress=progress,
                                checkpoint_every=checkpoint_every)
        rows.append(TranscoderLayer(**row))
        seconds += took
        trained += (row["steps"] - row["resumed_from"]) * opts.batch_size
    config = write_config(out_dir, n_layers, input_site, model.get("config"))
    return TrainTranscoderResult(
        collect=str(acts.path), output=str(out_dir), input_site=input_site,
        feature_input_hook=INPUT_SITES[input_site], feature_output_hook=OUTPUT_HOOK,
        architecture=opts.architecture, d_in=d_in, latents=opts.latents, k=opts.k,
        l1=None if jumprelu else opts.l1, jumprelu=jumprelu, skip=skip, lr=opts.lr, batch_size=opts.batch_size, seed=seed,
        holdout=holdout, layers=rows, n_layers=n_layers,
        config=None if config is None else str(config),
        missing=[i for i in range(n_layers) if not (out_dir / layer_file(i)).is_file()],
        seconds=seconds, tokens_per_s=trained / seconds if seconds > 0 and trained else None)


__all__ = ["train_transcoders", "train_layer", "write_config", "check_set", "file_metadata",
           "INPUT_SITES", "OUTPUT_SITE", "OUTPUT_HOOK", "layer_file", "parse_layers",
           "check_sites", "open_output", "circuit_tracer_tensors", "encode", "decode",
           "judge", "config_text", "CONFIG", "META_KEY"]
