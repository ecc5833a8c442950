"""Per-layer transcoder sets in circuit-tracer's layout: a folder with `config.yaml`
(`feature_input_hook`, `feature_output_hook` and a `transcoders:` list with one
safetensors file per layer, layer 0 first), each file holding W_enc (F, D), W_dec (F, D),
b_enc (F), b_dec (D), optionally W_skip (D, D) and `activation_function.threshold` (F)
for a JumpReLU; without a threshold the activation is a ReLU (as circuit-tracer's
load_relu_transcoder). Gemma Scope's `params.npz` per layer (W_enc stored (D, F),
`threshold`) is read too, when the list names .npz files, and SAELens transcoder folders
(cfg.json + sae_weights.safetensors, W_enc stored (D, F)) when it names folders.

The hooks are TransformerLens names inside a block; the ones mapped here are the tensors
tfx's blocks compute identically (circuit-tracer loads models unfolded: a norm's output
the hook mlp.hook_in is the norm's output with its gain and bias, tfx's `ln2.out`;
ln2.hook_normalized the normalised rows before them, tfx's `ln2.normed`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...errors import TranscoderError

# TransformerLens hook (inside blocks.{i}) -> the tfx site of that block it equals
INPUT_HOOKS = {
    "hook_resid_mid": "resid_mid",
    "hook_mlp_in": "resid_mid",  # TransformerLens takes it before ln2
    # TransformerLens's norms apply their gain and bias after hook_normalized: it is the
    # normalised rows alone, tfx's ln2.normed
    "ln2.hook_normalized": "ln2.normed",
    "mlp.hook_in": "ln2.out",  # circuit-tracer's ReplacementMLP input: ln2's output
}
OUTPUT_HOOKS = {"hook_mlp_out": "ffn.out", "mlp.hook_out": "ffn.out"}


@dataclass
class Transcoders:
    """One transcoder per layer, float32 on the CPU. `site`: the tfx site of the block
    its features read (resid_mid, ln2.normed or ln2.out); they write the FFN output."""

    folder: str
    input_hook: str
    output_hook: str
    site: str
    W_enc: list[torch.Tensor]  # (F, D) per layer
    W_dec: list[torch.Tensor]  # (F, D)
    b_enc: list[torch.Tensor]  # (F,)
    b_dec: list[torch.Tensor]  # (D,)
    W_skip: list[torch.Tensor | None] = field(default_factory=list)  # (D, D): skip = x W_skipᵀ
    threshold: list[torch.Tensor | None] = field(default_factory=list)  # JumpReLU's (F,)
    # TopK's k per layer (a file tfx's train-transcoder wrote with "activation": "topk")
    topk: list[int | None] = field(default_factory=list)
    # a cross-layer transcoder: W_dec[k] is (F, L - k, D), layer k's features writing
    # into layers k, k+1, …; per-layer sets: W_dec[k] is (F, D), into layer k only
    cross: bool = False

    def decoder(self, source: int, target: int) -> torch.Tensor | None:
        """(F, D): what source layer's features write into target layer's FFN output."""
        if self.cross:
            return self.W_dec[source][:, target - source] if target >= source else None
        return self.W_dec[source] if target == source else None

    @property
    def n_layers(self) -> int:
        return len(self.W_enc)

    @property
    def width(self) -> int:
        return self.W_enc[0].shape[0]

    @property
    def d_model(self) -> int:
        return self.W_enc[0].shape[1]

    def pre(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Pre-activations of layer's features on x (..., D)."""
        return torch.nn.functional.linear(x, self.W_enc[layer], self.b_enc[layer])

    def activate(self, layer: int, pre: torch.Tensor) -> torch.Tensor:
        """ReLU, or JumpReLU x·[x > θ] (circuit-tracer's forward of both), or TopK: the k
        largest pre-activations of each row kept, ReLU'd (tfx's TopK sets)."""
        theta = self.threshold[layer]
        if theta is not None:
            return pre * (pre > theta)
        k = self.topk[layer] if layer < len(self.topk) else None
        if k is None:
            return torch.relu(pre)
        values, index = torch.topk(pre, min(k, pre.shape[-1]), dim=-1)
        return torch.zeros_like(pre).scatter_(-1, index, torch.relu(values))

    def skip(self, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        w = self.W_skip[layer]
        return None if w is None else x @ w.T


def read_config(folder: Path) -> dict:
    """config.yaml's flat keys and its `transcoders:` list (the small YAML subset
    circuit-tracer's configs use: `key: value` lines and `- item` lines under a key)."""
    path = folder / "config.yaml"
    if not path.is_file():
        raise TranscoderError(f"--transcoders {folder} has no config.yaml; give a folder in "
                              "circuit-tracer's layout (config.yaml naming feature_input_hook, "
                              "feature_output_hook and one file per layer under transcoders:)")
    config: dict = {}
    current = None
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.split(" #")[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        stripped = line.strip()
        if stripped.startswith("- ") and current is not None:
            config.setdefault(current, []).append(_scalar(stripped[2:]))
            continue
        key, sep, value = stripped.partition(":")
        if not sep:
            raise TranscoderError(f"{path}: line {raw.strip()!r} is not `key: value`; fix "
                                  "config.yaml")
        current = key.strip()
        config[current] = _scalar(value) if value.strip() else []
    return config


def _scalar(text: str) -> str:
    return text.strip().strip("'\"")


def _hook(config: dict, key: str, known: dict, folder: Path) -> str:
    hook = config.get(key)
    if not isinstance(hook, str) or not hook:
        raise TranscoderError(f"--transcoders {folder}: config.yaml has no {key}; add it "
                              f"(one of {', '.join(known)})")
    if hook not in known:
        raise TranscoderError(f"--transcoders {folder}: {key} {hook} is a hook tfx does not "
                              f"map for transcoders; use one of {', '.join(known)}")
    return hook


def read_transcoders(folder: str | Path, *, n_layers: int, d_model: int) -> Transcoders:
    """The set in `folder`, checked against a model with n_layers blocks of width d_model."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TranscoderError(f"--transcoders {folder} is not a folder; give the folder "
                              "holding config.yaml and the per-layer files")
    config = read_config(folder)
    kind = config.get("model_kind", "transcoder_set")
    if kind not in ("transcoder_set", "cross_layer_transcoder"):
        raise TranscoderError(f"--transcoders {folder}: model_kind {kind} is not one tfx "
                              "reads; use transcoder_set or cross_layer_transcoder")
    input_hook = _hook(config, "feature_input_hook", INPUT_HOOKS, folder)
    output_hook = _hook(config, "feature_output_hook", OUTPUT_HOOKS, folder)
    if kind == "cross_layer_transcoder":
        return _read_clt(folder, input_hook, output_hook, n_layers, d_model)
    files = config.get("transcoders")
    if not isinstance(files, list) or not files:
        raise TranscoderError(f"--transcoders {folder}: config.yaml lists no files under "
                              "transcoders:; list one safetensors file per layer")
    if len(files) != n_layers:
        raise TranscoderError(f"--transcoders {folder} has {len(files)} layers but the model "
                              f"has {n_layers}; use the transcoders trained for this model")
    tc = Transcoders(str(folder), input_hook, output_hook, INPUT_HOOKS[input_hook],
                     [], [], [], [], [], [])
    for layer, name in enumerate(files):
        _add_layer(tc, folder, layer, name, d_model)
    return tc


def read_layer(folder: str | Path, layer: int, *, input_hook: str, d_model: int) -> Transcoders:
    """One layer's file of a per-layer set as tfx train-transcoder writes it
    (DIR/layer_{layer}.safetensors), alone: a one-layer set (for the CE-loss score of one
    layer's transcoder before the whole set exists)."""
    from ..features.transcoders import layer_file

    folder = Path(folder)
    tc = Transcoders(str(folder), input_hook, "hook_mlp_out", INPUT_HOOKS[input_hook],
                     [], [], [], [], [], [])
    _add_layer(tc, folder, layer, layer_file(layer), d_model)
    return tc


def _add_layer(tc: Transcoders, folder: Path, layer: int, name: str, d_model: int) -> None:
    path = Path(name) if Path(name).is_absolute() else folder / name
    if not path.is_file() and not (path / "cfg.json").is_file():
        raise TranscoderError(f"--transcoders {folder}: layer {layer}'s file {name} is "
                              "missing; put it there or fix the transcoders: list")
    tensors = _read_file(path)
    missing = [k for k in ("W_enc", "W_dec", "b_enc", "b_dec") if k not in tensors]
    if missing:
        raise TranscoderError(f"--transcoders {folder}: {path.name} has no "
                              f"{', '.join(missing)}; a transcoder file holds W_enc, W_dec, "
                              "b_enc and b_dec")
    W_enc, W_dec = tensors["W_enc"], tensors["W_dec"]
    width = W_enc.shape[0]
    shapes_ok = (W_enc.ndim == 2 and W_dec.shape == W_enc.shape
                 and tensors["b_enc"].shape == (width,) and tensors["b_dec"].shape == (W_enc.shape[1],))
    if not shapes_ok:
        raise TranscoderError(f"--transcoders {folder}: {path.name}'s shapes do not fit "
                              f"(W_enc {tuple(W_enc.shape)}, W_dec {tuple(W_dec.shape)}); "
                              "W_enc and W_dec are (features, d_model)")
    if W_enc.shape[1] != d_model:
        raise TranscoderError(f"--transcoders {folder}: layer {layer} reads width "
                              f"{W_enc.shape[1]} but the model's d_model is {d_model}; use "
                              "the transcoders trained for this model")
    if tc.W_enc and width != tc.width:
        raise TranscoderError(f"--transcoders {folder}: layer {layer} has {width} features "
                              f"but layer 0 has {tc.width}; every layer's transcoder must "
                              "have the same width")
    for key, value in tensors.items():
        if not bool(torch.isfinite(value).all()):
            raise TranscoderError(f"--transcoders {folder}: {path.name}'s {key} holds NaN or "
                                  "infinite values; retrain or re-export that layer")
    tc.W_enc.append(W_enc)
    tc.W_dec.append(W_dec)
    tc.b_enc.append(tensors["b_enc"])
    tc.b_dec.append(tensors["b_dec"])
    skip = tensors.get("W_skip")
    if skip is not None and skip.shape != (d_model, d_model):
        raise TranscoderError(f"--transcoders {folder}: {path.name}'s W_skip is "
                              f"{tuple(skip.shape)}, not ({d_model}, {d_model})")
    tc.W_skip.append(skip)
    tc.threshold.append(tensors.get("activation_function.threshold"))
    tc.topk.append(_topk(path, folder))


def _topk(path: Path, folder: Path) -> int | None:
    """k where a safetensors layer file says (in tfx's metadata) it is a TopK transcoder;
    read as ReLU it would switch on every positive latent, not its k."""
    if path.is_dir() or path.suffix != ".safetensors":
        return None
    from safetensors import safe_open

    from ..features.transcoders import file_metadata

    with safe_open(str(path), framework="pt") as opened:
        meta = file_metadata(opened)
    if meta.get("activation") != "topk":
        return None
    k = meta.get("k")
    k = int(k) if isinstance(k, str) and k.isdigit() else k  # written as a string
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise TranscoderError(f"--transcoders {folder}: {path.name} says it is TopK but its "
                              f"k is {k!r}; re-export it with a positive k")
    return k


def _read_saelens(path: Path) -> dict[str, torch.Tensor]:
    """A SAELens transcoder folder (cfg.json + sae_weights.safetensors, architecture
    transcoder or jumprelu_transcoder) as circuit-tracer's tensors: SAELens stores W_enc
    (D, F); its threshold is circuit-tracer's activation_function.threshold. Read by
    core/features (its checks: architecture, shapes, finite values, scaling factor)."""
    from ...errors import WeightsError
    from ..features.formats import read_sae

    try:
        sae = read_sae(path)
    except WeightsError as exc:
        raise TranscoderError(str(exc)) from None
    if not sae.transcoder or sae.normalize != "none" or sae.rescale_by_decoder_norm:
        raise TranscoderError(f"--transcoders: {path} is a SAELens {sae.architecture} folder"
                              f"{' that normalises its input' if sae.transcoder else ''}; "
                              "list transcoder (or jumprelu_transcoder) folders whose input "
                              "is not normalised")
    t = {k: v.detach().float() for k, v in sae.tensors.items()}
    out = {"W_enc": t["W_enc"].T.contiguous(), "W_dec": t["W_dec"], "b_enc": t["b_enc"],
           "b_dec": t["b_dec"]}
    if "threshold" in t:
        out["activation_function.threshold"] = t["threshold"]
    if "W_skip" in t:
        out["W_skip"] = t["W_skip"]
    return out


def _read_file(path: Path) -> dict[str, torch.Tensor]:
    if path.is_dir():
        return _read_saelens(path)
    try:
        if path.suffix == ".npz":  # Gemma Scope: W_enc stored (D, F), `threshold`
            import numpy as np

            with np.load(path) as npz:
                raw = {k: torch.from_numpy(np.asarray(npz[k], dtype=np.float32)) for k in npz.files}
            if "W_enc" in raw:
                raw["W_enc"] = raw["W_enc"].T.contiguous()
            if "threshold" in raw:
                raw["activation_function.threshold"] = raw.pop("threshold")
            return raw
        from safetensors.torch import load_file

        return {k: v.float() for k, v in load_file(str(path)).items()}
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise TranscoderError(f"--transcoders: {path} cannot be read ({exc}); re-export "
                              "it as safetensors") from None


def _read_clt(folder: Path, input_hook: str, output_hook: str, n_layers: int,
              d_model: int) -> Transcoders:
    """circuit-tracer's cross-layer layout: per layer I, W_enc_I.safetensors (W_enc_I
    (F, D), b_enc_I, b_dec_I, optional threshold_I) and W_dec_I.safetensors (W_dec_I
    (F, L - I, D))."""
    found = len(list(folder.glob("W_enc_*.safetensors")))
    if found != n_layers:
        raise TranscoderError(f"--transcoders {folder} has {found} layers but the model has "
                              f"{n_layers}; use the transcoders trained for this model")
    tc = Transcoders(str(folder), input_hook, output_hook, INPUT_HOOKS[input_hook],
                     [], [], [], [], [], [], cross=True)
    for i in range(n_layers):
        enc, dec = folder / f"W_enc_{i}.safetensors", folder / f"W_dec_{i}.safetensors"
        for path in (enc, dec):
            if not path.is_file():
                raise TranscoderError(f"--transcoders {folder}: layer {i}'s file {path.name} "
                                      "is missing; put it there")
        tensors = {**_read_file(enc), **_read_file(dec)}
        want = {f"W_enc_{i}": None, f"b_enc_{i}": None, f"b_dec_{i}": (d_model,),
                f"W_dec_{i}": None}
        missing = [k for k in want if k not in tensors]
        if missing or any(k.startswith("W_skip") for k in tensors):
            raise TranscoderError(f"--transcoders {folder}: layer {i} has "
                                  f"{'no ' + ', '.join(missing) if missing else 'a W_skip'}; "
                                  "tfx reads W_enc_I, b_enc_I, b_dec_I and W_dec_I, no skip")
        W_enc, W_dec = tensors[f"W_enc_{i}"], tensors[f"W_dec_{i}"]
        if W_enc.shape[1] != d_model or W_dec.shape != (W_enc.shape[0], n_layers - i, d_model):
            raise TranscoderError(f"--transcoders {folder}: layer {i}'s W_enc "
                                  f"{tuple(W_enc.shape)} or W_dec {tuple(W_dec.shape)} does not "
                                  f"fit a model of d_model {d_model} and {n_layers} layers")
        for key, value in tensors.items():
            if not bool(torch.isfinite(value).all()):
                raise TranscoderError(f"--transcoders {folder}: layer {i}'s {key} holds NaN "
                                      "or infinite values; retrain or re-export it")
        tc.W_enc.append(W_enc)
        tc.W_dec.append(W_dec)
        tc.b_enc.append(tensors[f"b_enc_{i}"])
        tc.b_dec.append(tensors[f"b_dec_{i}"])
        tc.W_skip.append(None)
        tc.threshold.append(tensors.get(f"threshold_{i}"))
    return tc
