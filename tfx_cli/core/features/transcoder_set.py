"""The transcoder set: a transcoder per layer of a model, or one cross-layer transcoder —
what circuit-tracer's TranscoderSet and CrossLayerTranscoder hold — as one type. It is
read from the layouts other tools publish, written in the one `tfx train-transcoder`
writes, its hooks mapped onto tfx's sites in one table, and run (encode, decode) by
architectures.py's classes. The replacement model and its graphs (core.circuits),
eval-sae --transcoders and the trainers' CE-loss score (core.datasets) and the trainer
(transcoders.py) all hold this type; whether a set fits a model is checked where the
two meet (core.analysis.replacement).

A set's folder holds config.yaml, read with PyYAML's safe_load (a YAML or JSON mapping:
model_kind, feature_input_hook, feature_output_hook and `transcoders:`, one entry per
layer, layer 0 first, relative to the folder), and per layer one of (formats.py reads
each):

    circuit-tracer  a safetensors file: W_enc (F, D), W_dec (F, D), b_enc (F), b_dec (D),
                    optional W_skip (D, D) and activation_function.threshold (F) — a
                    JumpReLU; without one a ReLU (load_relu_transcoder). One tfx wrote
                    says in its metadata which layer and sites it is, and `"activation":
                    "topk"` with k for a TopK one (circuit-tracer has no TopK loader).
    Gemma Scope     a .npz (params.npz): W_enc stored (D, F), `threshold`
    Gemma Scope 2   a safetensors file of lower-case names (params.safetensors): w_enc
                    (D, F), w_dec (F, D), b_enc, b_dec, threshold and, in an _affine
                    set, affine_skip_connection (circuit-tracer's
                    load_gemma_scope_2_transcoder)
    a folder        SAELens's transcoder or jumprelu_transcoder (cfg.json +
                    sae_weights.safetensors, W_enc stored (D, F)), or a Gemma Scope folder
                    holding one of the two files above

model_kind cross_layer_transcoder: circuit-tracer's cross-layer layout, per layer I
W_enc_I.safetensors (W_enc_I (F, D), b_enc_I, b_dec_I, optional threshold_I) and
W_dec_I.safetensors (W_dec_I (F, L − I, D): layer I's features into layers I, I+1, …).

tfx writes the circuit-tracer layout: DIR/layer_I.safetensors (what it is, under
formats.META_KEY in its metadata) and, once every layer has one, DIR/config.yaml
(yaml.safe_dump, after a first line saying tfx wrote it). Each file goes in whole, with
the umask's permissions.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...errors import TranscoderError, WeightsError
from ..outputs import atomic_file, sha256_files
from .architectures import Architecture, CircuitTracerJumpReLU, ReLU, TopK
from .formats import (CIRCUIT_TRACER_NAMES, META_KEY, SAEFile, flip_encoder,
                      read_circuit_tracer, read_metadata, read_params, read_sae,
                      transcoder_file)
from .hooks import BLOCK_HOOKS


def _in_block(hook: str) -> str:
    return BLOCK_HOOKS[hook].removeprefix("blocks.{i}.")


# The hooks a transcoder reads and writes (TransformerLens names inside blocks.{i}) -> the
# tfx site of the block each equals: hooks.py's table, and one name of circuit-tracer's
# own (it loads models unfolded, so ln2.hook_normalized, ln2's normalised rows before its
# gain and bias, is tfx's ln2.normed). The first hook of a site is the one tfx writes.
INPUT_HOOKS = {**{hook: _in_block(hook) for hook in ("hook_resid_mid", "hook_mlp_in")},
               "ln2.hook_normalized": "ln2.normed", "mlp.hook_in": _in_block("mlp.hook_in")}
OUTPUT_HOOKS = {hook: _in_block(hook) for hook in ("hook_mlp_out", "mlp.hook_out")}
OUTPUT_HOOK = next(iter(OUTPUT_HOOKS))
OUTPUT_SITE = OUTPUT_HOOKS[OUTPUT_HOOK]
MODEL_KINDS = ("transcoder_set", "cross_layer_transcoder")
CONFIG = "config.yaml"
HEADER = "# a per-layer transcoder set written by tfx train-transcoder\n"
_LAYER_FILE = re.compile(r"layer_\d+\.safetensors")
_NAMES = ("W_enc", "W_dec", "b_enc", "b_dec", "W_skip", "threshold")  # tfx's, per layer


def hook_of(site: str) -> str:
    """The hook tfx writes for a transcoder reading `site` (ln2.out: mlp.hook_in)."""
    return next(hook for hook, name in INPUT_HOOKS.items() if name == site)


def layer_file(layer: int) -> str:
    return f"layer_{layer}.safetensors"


def _kind(t: dict) -> Architecture:
    """A layer's activation, by what it holds: circuit-tracer's JumpReLU where it has a
    threshold, TopK where it says k, else ReLU."""
    k = t.get("k")
    kind = CircuitTracerJumpReLU if t.get("threshold") is not None else \
        TopK if k is not None else ReLU
    return kind(t["W_enc"].T, t.__getitem__, k=k)


@dataclass
class TranscoderSet:
    """A transcoder per layer, float32 on one device. `site`: the tfx site of each block
    its features read (resid_mid, ln2.normed or ln2.out); they write the FFN output."""

    folder: str
    input_hook: str
    output_hook: str
    W_enc: list[torch.Tensor]  # (F, D) per layer
    W_dec: list[torch.Tensor]  # (F, D); a cross-layer set's (F, L − k, D)
    b_enc: list[torch.Tensor]  # (F,)
    b_dec: list[torch.Tensor]  # (D,)
    W_skip: list[torch.Tensor | None]  # (D, D): skip = x·W_skipᵀ
    kinds: list[Architecture]  # each layer's activation, holding its threshold or k
    # a cross-layer transcoder: W_dec[k] writes layer k's features into layers k, k+1, …
    cross: bool = False
    files: list[list[Path]] = field(default_factory=list)  # per layer, the files read
    config: Path | None = None
    _sha256: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, layers: list[dict], *, folder, input_hook: str, output_hook: str = OUTPUT_HOOK,
           cross: bool = False, files=(), config: Path | None = None) -> "TranscoderSet":
        """The set of `layers`, each a dict of tfx's names: W_enc (F, D), W_dec, b_enc,
        b_dec, and W_skip, threshold or k where it has one."""
        return cls(str(folder), input_hook, output_hook, [t["W_enc"] for t in layers],
                   [t["W_dec"] for t in layers], [t["b_enc"] for t in layers],
                   [t["b_dec"] for t in layers], [t.get("W_skip") for t in layers],
                   [_kind(t) for t in layers], cross, [list(f) for f in files], config)

    def layer(self, i: int) -> dict:
        """Layer i's tensors by tfx's names (and k), as `of` takes them."""
        t = {"W_enc": self.W_enc[i], "W_dec": self.W_dec[i], "b_enc": self.b_enc[i],
             "b_dec": self.b_dec[i], "W_skip": self.W_skip[i],
             "threshold": self.threshold[i], "k": self.topk[i]}
        return {name: value for name, value in t.items() if value is not None}

    def to(self, device) -> "TranscoderSet":
        """The set on `device`, float32."""
        move = lambda v: v.to(device=device, dtype=torch.float32) \
            if isinstance(v, torch.Tensor) else v
        return TranscoderSet.of(
            [{name: move(v) for name, v in self.layer(i).items()} for i in range(self.n_layers)],
            folder=self.folder, input_hook=self.input_hook, output_hook=self.output_hook,
            cross=self.cross, files=self.files, config=self.config)

    # -- what it is -----------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.W_enc)

    @property
    def width(self) -> int:
        return self.W_enc[0].shape[0]

    @property
    def d_model(self) -> int:
        return self.W_enc[0].shape[1]

    @property
    def site(self) -> str:
        return INPUT_HOOKS[self.input_hook]

    @property
    def threshold(self) -> list[torch.Tensor | None]:
        """JumpReLU's threshold (F,) per layer (None: another activation)."""
        return [getattr(kind, "threshold", None) for kind in self.kinds]

    @property
    def topk(self) -> list[int | None]:
        """TopK's k per layer (None: another activation)."""
        return [kind.k if kind.needs_k else None for kind in self.kinds]

    @property
    def activation(self) -> str:
        """jumprelu where a layer has a threshold, else topk where one has k, else relu."""
        names = {kind.activation for kind in self.kinds}
        return next(name for name in ("jumprelu", "topk", "relu") if name in names)

    @property
    def model_kind(self) -> str:
        return MODEL_KINDS[self.cross]

    @property
    def has_skip(self) -> bool:
        return any(w is not None for w in self.W_skip)

    def sha256(self, layer: int | None = None) -> str:
        """The content of the set's files (config.yaml first), or of layer's alone, hashed
        when first asked (eval-sae asks as it opens the set) and kept: what a folder
        keeping numbers of the set records, so that another set at the same path is told
        apart."""
        if layer not in self._sha256:
            files = self.files[layer] if layer is not None else [
                *([self.config] if self.config else []), *(f for fs in self.files for f in fs)]
            self._sha256[layer] = sha256_files(files)
        return self._sha256[layer]

    # -- running it ---------------------------------------------------------------------------
    def pre(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Pre-activations (..., F) of layer's features on x (..., D)."""
        return torch.nn.functional.linear(x, self.W_enc[layer], self.b_enc[layer])

    def activate(self, layer: int, pre: torch.Tensor) -> torch.Tensor:
        """ReLU, JumpReLU x·[x > θ] (circuit-tracer's forward of both), or TopK: the k
        largest pre-activations of each row kept, ReLU'd."""
        return self.kinds[layer].activate(pre, None)

    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        return self.activate(layer, self.pre(layer, x))

    def decoder(self, source: int, target: int) -> torch.Tensor | None:
        """(F, D): what source layer's features write into target layer's FFN output."""
        if self.cross:
            return self.W_dec[source][:, target - source] if target >= source else None
        return self.W_dec[source] if target == source else None

    def skip(self, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        w = self.W_skip[layer]
        return None if w is None else x @ w.T

    def reconstruct(self, layer: int, acts: dict, x: torch.Tensor) -> torch.Tensor:
        """Layer's FFN output rebuilt from its input x (N, D): b_dec, what the features of
        each layer k ≤ layer write into it (acts[k] (N, F): k = layer alone in a
        per-layer set) and the skip path."""
        out = self.b_dec[layer].expand(x.shape[0], -1).clone()
        for k in range(layer + 1):
            W = self.decoder(k, layer)
            if W is not None and k in acts:
                out = out + acts[k] @ W
        skip = self.skip(layer, x)
        return out if skip is None else out + skip

    def decode(self, layer: int, f: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Layer's features f (N, F) of x (N, D) -> its FFN output (its own features
        alone, where a cross-layer set's earlier layers write too)."""
        return self.reconstruct(layer, {layer: f}, x)


# -- reading ---------------------------------------------------------------------------------
def read_config(folder: Path) -> dict:
    """config.yaml as PyYAML's safe_load reads it (tags that would build Python objects
    are refused, never run), a mapping."""
    import yaml

    path = folder / CONFIG
    if not path.is_file():
        raise TranscoderError(f"--transcoders {folder} has no config.yaml; give a folder in "
                              "circuit-tracer's layout (config.yaml naming feature_input_hook, "
                              "feature_output_hook and one file per layer under transcoders:)")
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise TranscoderError(f"--transcoders {folder}: cannot read config.yaml ({exc}); "
                              "write it as UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or "not YAML"
        raise TranscoderError(f"--transcoders {folder}: config.yaml is not valid YAML{where} "
                              f"({what}); fix config.yaml (safe YAML or JSON: keys, "
                              "strings and lists)") from None
    if not isinstance(config, dict):
        raise TranscoderError(f"--transcoders {folder}: config.yaml holds a "
                              f"{type(config).__name__}, not the mapping of keys circuit-"
                              "tracer writes (model_kind, feature_input_hook, ...); fix it")
    return config


def _hook(config: dict, key: str, known: dict, folder: Path) -> str:
    hook = config.get(key)
    if not isinstance(hook, str) or not hook:
        raise TranscoderError(f"--transcoders {folder}: config.yaml has no {key}; add it "
                              f"(one of {', '.join(known)})")
    if hook not in known:
        raise TranscoderError(f"--transcoders {folder}: {key} {hook} is a hook tfx does not "
                              f"map for transcoders; use one of {', '.join(known)}")
    return hook


def read_transcoders(folder: str | Path, *, n_layers: int, d_model: int) -> TranscoderSet:
    """The set in `folder`, checked against a model with n_layers blocks of width d_model."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise TranscoderError(f"--transcoders {folder} is not a folder; give the folder "
                              "holding config.yaml and the per-layer files")
    config = read_config(folder)
    kind = config.get("model_kind", "transcoder_set")
    if kind not in MODEL_KINDS:
        raise TranscoderError(f"--transcoders {folder}: model_kind {kind} is not one tfx "
                              "reads; use transcoder_set or cross_layer_transcoder")
    input_hook = _hook(config, "feature_input_hook", INPUT_HOOKS, folder)
    output_hook = _hook(config, "feature_output_hook", OUTPUT_HOOKS, folder)
    cross = kind == "cross_layer_transcoder"
    layers, files = (_read_clt if cross else _read_layers)(folder, config, n_layers, d_model)
    return TranscoderSet.of(layers, folder=folder, input_hook=input_hook,
                            output_hook=output_hook, cross=cross, files=files,
                            config=folder / CONFIG)


def _read_layers(folder: Path, config: dict, n_layers: int, d_model: int):
    names = config.get("transcoders")
    if not isinstance(names, list) or not names:
        raise TranscoderError(f"--transcoders {folder}: config.yaml lists no files under "
                              "transcoders:; list one safetensors file per layer")
    if len(names) != n_layers:
        raise TranscoderError(f"--transcoders {folder} has {len(names)} layers but the model "
                              f"has {n_layers}; use the transcoders trained for this model")
    layers, files = [], []
    for layer, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise TranscoderError(f"--transcoders {folder}: config.yaml's transcoders: entry "
                                  f"{layer} is {name!r}, not a file name; list one file per "
                                  "layer")
        path = Path(name) if Path(name).is_absolute() else folder / name
        if not path.exists():
            raise TranscoderError(f"--transcoders {folder}: layer {layer}'s file {name} is "
                                  "missing; put it there or fix the transcoders: list")
        tensors, read = _read_entry(path, folder)
        width = layers[0]["W_enc"].shape[0] if layers else None
        layers.append(check_layer(tensors, folder, layer, path.name, d_model, width))
        files.append(read)
    return layers, files


def _read_entry(path: Path, folder: Path) -> tuple[dict, list[Path]]:
    """A layer's tensors by tfx's names, whatever its layout, and the files read."""
    try:
        if path.is_dir():
            return _from_sae(read_sae(path), folder)
        if path.suffix == ".npz" or "w_enc" in _keys(path):  # Gemma Scope 1 or 2
            return _from_sae(read_params(path), folder)
        tensors = read_circuit_tracer(path)
    except WeightsError as exc:
        raise TranscoderError(f"--transcoders {folder}: "
                              f"{exc.message.removeprefix('--sae ')}") from None
    k = _topk(read_metadata(path), path, folder)
    return {**tensors, **({"k": k} if k is not None else {})}, [path]


def _keys(path: Path) -> set:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as opened:
            return set(opened.keys())
    except Exception:  # noqa: BLE001 - its reader says why it does not read
        return set()


def _from_sae(sae: SAEFile, folder: Path) -> tuple[dict, list[Path]]:
    """A transcoder formats.py read (SAELens's folder, Gemma Scope's files): its tensors
    turned to circuit-tracer's orientation."""
    gemma = sae.format in ("gemma-scope", "gemma-scope-2")
    if not (sae.transcoder or gemma) or sae.normalize != "none" or sae.rescale_by_decoder_norm:
        who = {"saelens": "SAELens", "tfx": "tfx SAE"}.get(sae.format, sae.format)
        raise TranscoderError(f"--transcoders {folder}: {sae.path} is a {who} "
                              f"{sae.architecture} folder"
                              f"{' that normalises its input' if sae.transcoder else ''}; "
                              "list transcoder (or jumprelu_transcoder) folders whose input "
                              "is not normalised")
    t = flip_encoder({k: v for k, v in sae.tensors.items() if k in _NAMES})
    return {**t, **({"k": sae.k} if sae.kind.needs_k else {})}, list(sae.files)


def _topk(meta: dict, path: Path, folder: Path) -> int | None:
    """k where a layer file says (in tfx's metadata) it is a TopK transcoder; read as ReLU
    it would switch on every positive latent, not its k."""
    if meta.get("activation") != "topk":
        return None
    k = meta.get("k")
    k = int(k) if isinstance(k, str) and k.isdigit() else k  # written as a string
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise TranscoderError(f"--transcoders {folder}: {path.name} says it is TopK but its "
                              f"k is {k!r}; re-export it with a positive k")
    return k


def check_layer(t: dict, folder: Path, layer: int, name: str, d_model: int,
                width: int | None) -> dict:
    """A layer's tensors (tfx's names) checked: every one there, shapes that fit each
    other and the model's d_model, layer 0's width, finite values."""
    where = f"--transcoders {folder}: {name}"
    missing = [k for k in ("W_enc", "W_dec", "b_enc", "b_dec") if k not in t]
    if missing:
        raise TranscoderError(f"{where} has no {', '.join(missing)}; a transcoder file holds "
                              "W_enc, W_dec, b_enc and b_dec")
    W_enc, W_dec = t["W_enc"], t["W_dec"]
    if W_enc.ndim != 2 or W_dec.shape != W_enc.shape or \
            t["b_enc"].shape != W_enc.shape[:1] or t["b_dec"].shape != W_enc.shape[1:]:
        raise TranscoderError(f"{where}'s shapes do not fit (W_enc {tuple(W_enc.shape)}, "
                              f"W_dec {tuple(W_dec.shape)}, b_enc {tuple(t['b_enc'].shape)}, "
                              f"b_dec {tuple(t['b_dec'].shape)}); W_enc and W_dec are "
                              "(features, d_model), b_enc (features), b_dec (d_model)")
    F = W_enc.shape[0]
    if W_enc.shape[1] != d_model:
        raise TranscoderError(f"--transcoders {folder}: layer {layer} reads width "
                              f"{W_enc.shape[1]} but the model's d_model is {d_model}; use "
                              "the transcoders trained for this model")
    if width is not None and F != width:
        raise TranscoderError(f"--transcoders {folder}: layer {layer} has {F} features "
                              f"but layer 0 has {width}; every layer's transcoder must "
                              "have the same width")
    for key, shape in (("threshold", (F,)), ("W_skip", (d_model, d_model))):
        if key in t and tuple(t[key].shape) != shape:
            raise TranscoderError(f"{where}'s {key} is {tuple(t[key].shape)}, not {shape}; "
                                  "re-export the layer")
    _finite(t, f"{where}'s")
    if "k" in t and not 1 <= t["k"] <= F:
        raise TranscoderError(f"{where} says TopK with k {t['k']}, past its {F} features; "
                              "re-export it with a k between 1 and its width")
    return t


def _finite(t: dict, whose: str) -> None:
    for key, value in t.items():
        if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all()):
            raise TranscoderError(f"{whose} {key} holds NaN or infinite values; retrain or "
                                  "re-export that layer")


def _read_clt(folder: Path, config: dict, n_layers: int, d_model: int):
    """circuit-tracer's cross-layer layout: W_enc_I and W_dec_I files per layer."""
    found = len(list(folder.glob("W_enc_*.safetensors")))
    if found != n_layers:
        raise TranscoderError(f"--transcoders {folder} has {found} layers but the model has "
                              f"{n_layers}; use the transcoders trained for this model")
    layers, files = [], []
    for i in range(n_layers):
        paths = [folder / f"W_enc_{i}.safetensors", folder / f"W_dec_{i}.safetensors"]
        tensors = {}
        for path in paths:
            if not path.is_file():
                raise TranscoderError(f"--transcoders {folder}: layer {i}'s file {path.name} "
                                      "is missing; put it there")
            try:
                tensors.update(read_circuit_tracer(path))
            except WeightsError as exc:
                raise TranscoderError(f"--transcoders {folder}: {exc.message}") from None
        layers.append(_clt_layer(tensors, folder, i, n_layers, d_model))
        files.append(paths)
    return layers, files


def _clt_layer(tensors: dict, folder: Path, i: int, n_layers: int, d_model: int) -> dict:
    names = {f"W_enc_{i}": "W_enc", f"b_enc_{i}": "b_enc", f"b_dec_{i}": "b_dec",
             f"W_dec_{i}": "W_dec"}
    missing = [k for k in names if k not in tensors]
    if missing or any(k.startswith("W_skip") for k in tensors):
        raise TranscoderError(f"--transcoders {folder}: layer {i} has "
                              f"{'no ' + ', '.join(missing) if missing else 'a W_skip'}; "
                              "tfx reads W_enc_I, b_enc_I, b_dec_I and W_dec_I, no skip")
    t = {ours: tensors[theirs] for theirs, ours in names.items()}
    if f"threshold_{i}" in tensors:
        t["threshold"] = tensors[f"threshold_{i}"]
    W_enc, W_dec = t["W_enc"], t["W_dec"]
    F = W_enc.shape[0] if W_enc.ndim == 2 else None
    fits = {"W_enc": (F, d_model), "W_dec": (F, n_layers - i, d_model), "b_enc": (F,),
            "b_dec": (d_model,), "threshold": (F,)}
    if F is None or any(tuple(t[k].shape) != shape for k, shape in fits.items() if k in t):
        raise TranscoderError(f"--transcoders {folder}: layer {i}'s W_enc "
                              f"{tuple(W_enc.shape)} or W_dec {tuple(W_dec.shape)} (or its "
                              f"biases or threshold) does not fit a model of d_model "
                              f"{d_model} and {n_layers} layers")
    _finite(t, f"--transcoders {folder}: layer {i}'s")
    return t


def read_layer(file: str | Path, *, d_model: int) -> TranscoderSet:
    """One layer's file of a set tfx train-transcoder wrote (DIR/layer_I.safetensors),
    alone: a one-layer set whose hooks its metadata names (for the CE-loss score of one
    layer's transcoder before the whole set exists)."""
    file = Path(file)
    meta = read_metadata(file)
    hooks = meta.get("feature_input_hook"), meta.get("feature_output_hook")
    if hooks[0] not in INPUT_HOOKS or hooks[1] not in OUTPUT_HOOKS:
        raise TranscoderError(f"{file} does not say its hooks as tfx train-transcoder writes "
                              "them; train the layer again")
    tensors, read = _read_entry(file, file.parent)
    layer = check_layer(tensors, file.parent, int(meta.get("layer", 0)), file.name, d_model,
                        None)
    return TranscoderSet.of([layer], folder=file.parent, input_hook=hooks[0],
                            output_hook=hooks[1], files=[read])


def read_layer_sae(path: str | Path) -> SAEFile | None:
    """A set's layer file given to --sae (`tfx top --sae tc/layer_3.safetensors`, to label
    the set's features): a transcoder whose sites and activation its tfx metadata says,
    or, in another tool's set, the set's config.yaml (the hooks, and the layer the file's
    place in `transcoders:`). None for any other path (an SAE's folder or a file in one)."""
    file = Path(path).expanduser()
    if not file.is_file() or file.suffix != ".safetensors" or "w_enc" in _keys(file):
        return None
    meta = read_metadata(file)
    hooks, layer = (meta.get("feature_input_hook"), meta.get("feature_output_hook")), \
        meta.get("layer")
    if not meta:
        listed = _listed_in(file)
        if listed is None:
            return None
        hooks, layer = listed
    if hooks[0] not in INPUT_HOOKS or hooks[1] not in OUTPUT_HOOKS or \
            not str(layer).isdigit():
        raise WeightsError(f"--sae {file}: its set does not say its layer and hooks as "
                           "circuit-tracer's config.yaml names them; fix its config.yaml")
    tensors = read_circuit_tracer(file)
    k = meta.get("k") if meta.get("activation") == "topk" else None
    activation = "jumprelu" if "threshold" in tensors else "topk" if k else "relu"
    sites = (f"blocks.{layer}.{INPUT_HOOKS[hooks[0]]}", f"blocks.{layer}.{OUTPUT_HOOKS[hooks[1]]}")
    return transcoder_file(file, tensors, activation=activation,
                           k=int(k) if str(k).isdigit() else None,
                           hooks=tuple(f"blocks.{layer}.{hook}" for hook in hooks),
                           sites=sites)


def _listed_in(file: Path) -> tuple[tuple, int] | None:
    """(the hooks, the layer) of `file` where its folder's config.yaml lists it."""
    try:
        config = read_config(file.parent)
    except TranscoderError:
        return None
    names = config.get("transcoders")
    if not isinstance(names, list):
        return None
    for layer, name in enumerate(names):
        if isinstance(name, str) and (file.parent / name).resolve() == file.resolve():
            return (config.get("feature_input_hook"), config.get("feature_output_hook")), layer
    return None


# -- writing tfx's layout --------------------------------------------------------------------
def write_layer(path: Path, layer: dict, metadata: dict) -> None:
    """One layer (tfx's names, as TranscoderSet.layer gives it) as circuit-tracer's file,
    `metadata` as JSON under META_KEY: one key, since safetensors writes a metadata map
    in no fixed order and a rerun must give the same bytes."""
    from safetensors.torch import save_file

    tensors = {CIRCUIT_TRACER_NAMES.get(name, name): value.contiguous()
               for name, value in layer.items() if name in _NAMES}
    with atomic_file(path, temp=f".{path.name}.tmp", mode="umask") as tmp:
        save_file(tensors, str(tmp), metadata={META_KEY: json.dumps(metadata, sort_keys=True)})


def config_text(n_layers: int, input_hook: str, model_name) -> str:
    import yaml

    config = {"model_kind": "transcoder_set",
              **({"model_name": str(model_name)} if model_name else {}),
              "feature_input_hook": input_hook, "feature_output_hook": OUTPUT_HOOK,
              "transcoders": [layer_file(i) for i in range(n_layers)]}
    return HEADER + yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def write_config(folder: Path, n_layers: int, input_hook: str, model_name) -> Path:
    """DIR/config.yaml of a set of tfx's layer files (layer_0 … layer_{n-1})."""
    path = folder / CONFIG
    with atomic_file(path, temp=f".{CONFIG}.tmp", mode="umask") as tmp:
        tmp.write_text(config_text(n_layers, input_hook, model_name), encoding="utf-8")
    return path


def written_by_tfx(path: Path) -> bool:
    """Whether a file in a set's folder is one tfx train-transcoder writes: a config.yaml
    that starts with tfx's first line, or a layer file whose metadata says tfx wrote it."""
    if path.name == CONFIG:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.readline() == HEADER
        except (OSError, UnicodeDecodeError):
            return False
    return bool(_LAYER_FILE.fullmatch(path.name)) and bool(read_metadata(path))


def layer_identity(path: Path) -> dict | None:
    """What must agree between the layers of a set, as a layer file tfx wrote says it:
    its input site, width, activation (and k) and whether it has a skip path; None for a
    file tfx did not write, or one that does not read."""
    from safetensors import safe_open

    meta = read_metadata(path)
    if not meta:
        return None
    try:
        with safe_open(str(path), framework="pt") as opened:
            shape = opened.get_slice("W_enc").get_shape()
            skip = "W_skip" in opened.keys()
    except Exception:  # noqa: BLE001 - a damaged file: no identity, refused by its caller
        return None
    return {"input": str(meta.get("input_site", "")).split(".", 2)[-1],
            "latents": shape[0] if len(shape) == 2 else None,
            "activation": meta.get("activation"), "k": meta.get("k"), "skip": skip}


__all__ = ["TranscoderSet", "read_transcoders", "read_layer", "read_layer_sae", "read_config",
           "check_layer",
           "write_layer", "write_config", "config_text", "written_by_tfx", "layer_identity",
           "layer_file", "hook_of", "INPUT_HOOKS", "OUTPUT_HOOKS", "OUTPUT_HOOK",
           "OUTPUT_SITE", "CONFIG", "HEADER", "MODEL_KINDS"]
