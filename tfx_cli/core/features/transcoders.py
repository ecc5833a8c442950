"""`tfx train-transcoder COLLECT_DIR --layer I -o DIR`: per-layer transcoders trained on a
collect folder's pairs (an MLP's input and its output, collected in one pass), written as
a transcoder set in circuit-tracer's layout (transcoder_set.py, the one type of a set).

For each layer: x = blocks.{i}.ln2.out (or resid_mid), y = blocks.{i}.ffn.out; the
transcoder f = act(x·W_encᵀ + b_enc) (TopK, ReLU, or JumpReLU), ŷ = f·W_dec + b_dec
(+ x·W_skipᵀ with --skip) is trained by train-sae's trainer (trainer.py,
transcoder=True) with the same options, checkpoints and resumption (training.py's
RunFolder and step loop), each layer's run in DIR/state/layer_{i}/. DIR gets, per
layer, layer_{i}.safetensors (transcoder_set.write_layer: circuit-tracer 0.5.0's
load_relu_transcoder reads it, ReLU or JumpReLU; a TopK file says k in its metadata) and,
once every layer of the model has a file tfx wrote and they are of one set (the same
input hook, width, activation and skip path), DIR/config.yaml naming the set. The MLP
output's FVU on the held-out last tokens is reported per layer.

DIR is held by one run from its opening to its end (SetFolder): a second run into it, on
any layer, is refused at once; a later run must match the layers DIR already holds,
finished or in progress. Files tfx did not write (another tool's set) are never
touched without --force.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ...errors import OutputFileError, RangeError, SelectError, UsageError
from ..outputs import FolderHold, make_folder
from . import metrics
from .formats import flip_encoder
from .trainer import Trainer
from .training import (ACTIVATIONS, NEVER, RunFolder, split, _b_dec_start, _curve, _train,
                       check_diverged, resolve_options)
from .transcoder_set import (CONFIG, OUTPUT_HOOK, OUTPUT_SITE, TranscoderSet, hook_of,
                             layer_file, layer_identity, write_config, write_layer,
                             written_by_tfx)

TRAINED_SITES = ("ln2.out", "resid_mid")  # the MLP's input, as tfx names it in a block
STATE_DIR = "state"


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
    if input_site not in TRAINED_SITES:
        raise UsageError(f"--input-site {input_site!r} is not one tfx trains transcoders on; "
                         f"use one of {', '.join(TRAINED_SITES)} (the MLP's input)")
    for layer in layers:
        for site in (f"blocks.{layer}.{input_site}", f"blocks.{layer}.{OUTPUT_SITE}"):
            if site not in acts.sites:
                raise SelectError(
                    f"{acts.path} has no {site} (it holds {', '.join(acts.sites)}); a "
                    f"transcoder of layer {layer} trains on blocks.{layer}.{input_site} and "
                    f"blocks.{layer}.{OUTPUT_SITE}: collect both in one pass, e.g. tfx collect "
                    f"CORPUS --select 'blocks.*.{input_site}' --select 'blocks.*.{OUTPUT_SITE}'"
                    " -o acts")


class SetFolder:
    """-o DIR, held by this run alone from its opening to its end (FolderHold on DIR
    itself, so two runs never write one set at once); refused when it holds files tfx
    train-transcoder did not write, unless --force (which writes beside them, replacing
    those of the layers it trains). A run that fails leaves no empty DIR/state, nor DIR
    when it made it and nothing is in it."""

    def __init__(self, path: Path, force: bool):
        self.path, self.hold = path, None
        self.created = make_folder(path, "-o {path} is a file; give a folder for the "
                                         "transcoders")
        try:
            self.hold = FolderHold(path)
            others = sorted(p.name for p in path.iterdir() if not self.ours(p))
            if others and not force:
                raise OutputFileError(
                    f"-o {path} holds files tfx train-transcoder did not write "
                    f"({', '.join(others[:3])}); give a new or empty folder, or pass --force "
                    "to write the transcoders beside them")
        except BaseException:
            self.close(failed=True)
            raise

    @staticmethod
    def ours(path: Path) -> bool:
        """A file this writer makes: the state folder, config.yaml and layer files tfx
        wrote, and their temporary names a killed run left."""
        name = path.name
        if name.startswith(".") and name.endswith(".tmp"):
            name = name[1:-4]
            return name == CONFIG or name.startswith("layer_")
        return (name == STATE_DIR and path.is_dir()) or written_by_tfx(path)

    def state(self, layer: int) -> Path:
        """DIR/state/layer_I, the folder of one layer's run (DIR/state made when needed)."""
        (self.path / STATE_DIR).mkdir(exist_ok=True)
        return self.path / STATE_DIR / f"layer_{layer}"

    def close(self, failed: bool = False) -> None:
        if failed:
            for folder in (self.path / STATE_DIR, *([self.path] if self.created else [])):
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        if self.hold is not None:
            self.hold.release()

    def __enter__(self) -> "SetFolder":
        return self

    def __exit__(self, kind, *_) -> None:
        self.close(failed=kind is not None)


def judge(tc: TranscoderSet, x: torch.Tensor, y: torch.Tensor, rows_at_once: int = 4096) -> dict:
    """A one-layer set on held-out pairs: FVU of y, mean L0, dead latents."""
    recon, l0_sum = [], 0
    fired = torch.zeros(tc.width, dtype=torch.bool)
    with torch.inference_mode():
        for i in range(0, len(x), rows_at_once):
            xs = x[i:i + rows_at_once]
            f = tc.encode(0, xs)
            recon.append(tc.decode(0, f, xs))
            l0_sum += int(metrics.l0(f).sum())
            fired |= (f != 0).any(dim=0)
    return {"fvu": metrics.fvu(y, torch.cat(recon)), "l0": l0_sum / max(len(x), 1),
            "dead": int((~fired).sum()), "tokens": len(x)}


def _scale(rows: torch.Tensor) -> float:
    return float(math.sqrt(rows.shape[1]) /
                 rows.to(torch.float64).norm(dim=1).mean().clamp_min(1e-12))


# -- the run ---------------------------------------------------------------------------------
def _pairs(acts, layer: int, input_site: str, keep) -> tuple[torch.Tensor, torch.Tensor]:
    def rows(site: str) -> torch.Tensor:
        data = acts[site] if keep is None else acts[site][keep]
        return torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))

    return rows(f"blocks.{layer}.{input_site}"), rows(f"blocks.{layer}.{OUTPUT_SITE}")


def train_layer(acts, layer: int, *, out: SetFolder, input_site: str, options: dict,
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
    file = out.path / layer_file(layer)
    folder = RunFolder(out.state(layer), identity, force, products=[file])
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
        weights = trainer.weights()  # SAELens's orientation: W_enc (D, F)
        tc = TranscoderSet.of([{**flip_encoder(weights), **({"k": opts.k} if opts.k else {})}],
                              folder=out.path, input_hook=hook_of(input_site))
        judged = judge(tc, x[n_train:], y[n_train:])
        curve = _curve(losses)
        check_diverged(weights, judged, curve, folder, opts.lr,
                       f"layer {layer}'s transcoder", "no file is written for it")
        write_layer(file, tc.layer(0), {
            "format": "circuit-tracer transcoder", "activation": opts.activation,
            "layer": str(layer), "input_site": identity["input"],
            "output_site": identity["output"], "feature_input_hook": tc.input_hook,
            "feature_output_hook": OUTPUT_HOOK, **({"k": str(opts.k)} if opts.k else {})})
        row = dict(layer=layer, file=str(file), fvu=judged["fvu"], l0=judged["l0"],
                   dead=judged["dead"], dead_in_training=int(trainer.dead.sum()),
                   loss_first=curve[0], loss_last=curve[-1], losses=curve,
                   resumed_from=start, train_tokens=n_train, holdout_tokens=held,
                   steps=opts.steps, epochs=opts.steps * opts.batch_size / n_train)
        folder.write_manifest(complete=True, result=row)
        (folder.path / "train-state.safetensors").unlink(missing_ok=True)
    return row, seconds


# -- one set ----------------------------------------------------------------------------------
def _describe(ident: dict) -> str:
    k = f" k={ident['k']}" if ident.get("k") else ""
    return (f"{ident['latents']} latents, {ident['activation']}{k}, input {ident['input']}, "
            f"{'with' if ident['skip'] else 'no'} skip")


def _held(out_dir: Path, layer: int) -> tuple[dict | None, str]:
    """What DIR holds of `layer`, as layer_identity says it: its file tfx wrote, else
    the run in progress in DIR/state/layer_I (None: neither)."""
    file = out_dir / layer_file(layer)
    if file.is_file() and written_by_tfx(file):
        return layer_identity(file), file.name
    record = RunFolder.MANIFEST.read(out_dir / STATE_DIR / f"layer_{layer}")
    if record is None:
        return None, ""
    run = record.identity
    k = run.get("k")
    return ({"input": str(run.get("input", "")).split(".", 2)[-1], "latents": run.get("latents"),
             "activation": ACTIVATIONS.get(run.get("architecture")),
             "k": str(k) if k else None, "skip": bool(run.get("skip"))},
            f"layer {layer}'s unfinished run in state/layer_{layer}")


def check_set(out_dir: Path, layers: list[int], n_layers: int, mine: dict) -> None:
    """The other layers DIR holds, finished or in progress, must be of one set with this
    run's (`mine`, as layer_identity says it): the same input site, width, activation
    (and k) and skip path."""
    for layer in range(n_layers):
        if layer in layers:
            continue
        theirs, what = _held(out_dir, layer)
        if theirs is not None and theirs != mine:
            raise UsageError(
                f"-o {out_dir} holds {what} ({_describe(theirs)}), another set than this "
                f"run's ({_describe(mine)}); a set's layers must match: use the same "
                "options, or another folder")


def _write_config(out_dir: Path, n_layers: int, model_name) -> tuple[Path | None, list[int]]:
    """DIR/config.yaml once every layer has a file tfx wrote, all of one set; and the
    layers without one."""
    held = [layer_identity(out_dir / layer_file(i)) if written_by_tfx(
        out_dir / layer_file(i)) else None for i in range(n_layers)]
    missing = [i for i, ident in enumerate(held) if ident is None]
    if missing:
        return None, missing
    odd = [i for i, ident in enumerate(held) if ident != held[0]]
    if odd:  # check_set keeps this from happening; a config never pairs two sets
        raise UsageError(f"-o {out_dir}: layer {odd[0]}'s file ({_describe(held[odd[0]])}) "
                         f"is of another set than layer 0's ({_describe(held[0])}), so no "
                         "config.yaml is written; train it again with layer 0's options")
    return write_config(out_dir, n_layers, hook_of(held[0]["input"]), model_name), []


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
    rows, seconds, trained = [], 0.0, 0
    with SetFolder(Path(output).expanduser(), force) as out:
        check_set(out.path, chosen, n_layers, {
            "input": input_site, "latents": opts.latents, "activation": opts.activation,
            "k": str(opts.k) if opts.k else None, "skip": skip})
        for layer in chosen:
            row, took = train_layer(acts, layer, out=out, input_site=input_site,
                                    options=options, skip=skip, seed=seed, holdout=holdout,
                                    skip_first=skip_first, force=force, progress=progress,
                                    checkpoint_every=checkpoint_every)
            rows.append(TranscoderLayer(**row))
            seconds += took
            trained += (row["steps"] - row["resumed_from"]) * opts.batch_size
        config, missing = _write_config(out.path, n_layers, model.get("config"))
    return TrainTranscoderResult(
        collect=str(acts.path), output=str(out.path), input_site=input_site,
        feature_input_hook=hook_of(input_site), feature_output_hook=OUTPUT_HOOK,
        architecture=opts.architecture, d_in=d_in, latents=opts.latents, k=opts.k,
        l1=None if jumprelu else opts.l1, jumprelu=jumprelu, skip=skip, lr=opts.lr,
        batch_size=opts.batch_size, seed=seed, holdout=holdout, layers=rows,
        n_layers=n_layers, config=None if config is None else str(config), missing=missing,
        seconds=seconds, tokens_per_s=trained / seconds if seconds > 0 and trained else None)


__all__ = ["train_transcoders", "train_layer", "check_set", "parse_layers", "check_sites",
           "judge", "SetFolder", "TRAINED_SITES"]
