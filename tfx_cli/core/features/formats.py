"""SAE folders on disk -> (what the SAE is, its tensors): SAELens's folder, Gemma Scope's
params.npz, Gemma Scope 2's params.safetensors and tfx's own folder. Read with
safetensors and numpy only: SAELens need not be installed, and nothing is unpickled.

    SAELens (v6)    cfg.json with `architecture` (standard, topk, jumprelu, gated,
                    transcoder, jumprelu_transcoder), d_in, d_sae, apply_b_dec_to_input,
                    normalize_activations, k (TopK), metadata.hook_name; older flat
                    configs say hook_point, activation_fn_str and activation_fn_kwargs.k.
                    sae_weights.safetensors: W_enc (d_in, d_sae), W_dec (d_sae, d_in),
                    b_enc, b_dec, threshold (JumpReLU), b_gate, r_mag, b_mag (gated).
    Gemma Scope     params.npz: the same names; JumpReLU; b_dec is not subtracted from
                    the input.
    Gemma Scope 2   params.safetensors (and a config.json): w_enc, w_dec, b_enc, b_dec,
                    threshold, lower-case; JumpReLU as Gemma Scope; a transcoder's
                    affine_skip_connection (D, D) is W_skipᵀ (circuit-tracer's
                    load_gemma_scope_2_transcoder: skip = x · affine_skip_connection).
    tfx             tfx-sae.json (format "tfx-sae/1": architecture, d_in, d_sae, k,
                    apply_b_dec_to_input, site as a tfx trace name) and sae.safetensors
                    with SAELens's tensor names.
    circuit-tracer  one layer of a transcoder set (circuit-tracer's load_relu_transcoder
                    reads it; tfx train-transcoder writes it): W_enc (F, D) — the
                    transpose of SAELens's —, W_dec (F, D), b_enc, b_dec, optional W_skip
                    (D, D) and activation_function.threshold (F). `--sae` reads one as
                    a transcoder (transcoder_file) where its set says its layer and
                    hooks (transcoder_set.read_layer_sae).

Gemma Scope's files and circuit-tracer's layer files are read from the file itself too
(read_params, read_circuit_tracer): a transcoder set's config.yaml lists them by name
(core/features/transcoder_set.py).

SAELens facts used here (sae_lens 6.18, saes/*.py and loading/pretrained_sae_loaders.py):
pre-6.0 configs rename hook_point -> hook_name and activation_fn_str -> activation_fn,
and "topk" with activation_fn_kwargs.k is the TopK architecture; normalize_activations
"expected_average_only_in" is a factor folded into the weights when saved, so a folder
on disk runs without it; a `scaling_factor` tensor of ones is dropped.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import SelectError, WeightsError
from .architectures import (SAELENS, TFX, Architecture, JumpReLU, JumpReLUTranscoder, ReLU,
                            TopKTranscoder, Transcoder)
from .hooks import tfx_site

SAELENS_CFG, SAELENS_WEIGHTS = "cfg.json", "sae_weights.safetensors"
GEMMA_SCOPE, GEMMA_SCOPE_2 = "params.npz", "params.safetensors"
TFX_CFG, TFX_WEIGHTS = "tfx-sae.json", "sae.safetensors"
TFX_FORMAT = "tfx-sae/1"
# a circuit-tracer layer file: tfx's name of a tensor -> its (a JumpReLU's threshold sits
# inside circuit-tracer's activation module); the other names are the same
CIRCUIT_TRACER_NAMES = {"threshold": "activation_function.threshold"}
META_KEY = "tfx"  # a layer file tfx wrote: what it is, as JSON in the safetensors metadata
# what a tfx layer file's activation reads as, given to --sae
_TFX_TRANSCODERS = {"relu": ("transcoder", Transcoder),
                    "jumprelu": ("jumprelu_transcoder", JumpReLUTranscoder),
                    "topk": ("topk_transcoder", TopKTranscoder)}

# SAELens's architecture names -> the class that runs it (architectures.py)
ARCHITECTURES = SAELENS
NORMALIZATIONS = ("none", "expected_average_only_in", "constant_norm_rescale", "layer_norm")


@dataclass
class SAEFile:
    """What a folder says about its SAE, before it meets a model."""

    path: Path
    format: str  # saelens | gemma-scope | gemma-scope-2 | tfx
    architecture: str  # as the file names it (standard, topk, jumprelu, ...)
    kind: type[Architecture]  # the class that runs it, chosen here
    d_in: int
    d_sae: int
    d_out: int
    tensors: dict[str, Any]  # SAELens's names -> torch tensors (float32)
    k: int | None = None
    apply_b_dec_to_input: bool = True
    normalize: str = "none"  # none | constant_norm_rescale | layer_norm
    rescale_by_decoder_norm: bool = False  # TopK: pre-activations × |W_dec row|
    hook: str | None = None  # the file's own name of the site it reads
    hook_out: str | None = None  # a transcoder's output site
    site: str | None = None  # the tfx trace name it reads (from hook, or inferred)
    site_out: str | None = None
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # what was read, in order (its content)

    @property
    def activation(self) -> str:
        """tfx's name of the architecture: relu | jumprelu | topk | gated."""
        return self.kind.activation

    @property
    def transcoder(self) -> bool:
        return self.kind.transcoder


def read_sae(path: str | Path) -> SAEFile:
    """Read the SAE in folder `path` (or the folder of a file in it; or a transcoder set's
    layer file that tfx wrote), whatever its format."""
    path = given = Path(path).expanduser()
    if path.is_file():
        path = path.parent
    if not path.exists():
        raise WeightsError(f"--sae {path}: no such folder; give the folder that holds the "
                           f"SAE ({SAELENS_CFG} and {SAELENS_WEIGHTS}, {GEMMA_SCOPE}, "
                           f"{GEMMA_SCOPE_2} or {TFX_CFG})")
    if (path / TFX_CFG).is_file():
        return _tfx(path)
    if (path / SAELENS_CFG).is_file():
        return _saelens(path)
    if (path / GEMMA_SCOPE).is_file():
        return _gemma_scope(path)
    if (path / GEMMA_SCOPE_2).is_file():
        return _gemma_scope_2(path)
    if (path / SAELENS_WEIGHTS).is_file():
        raise WeightsError(f"--sae {path}: {SAELENS_WEIGHTS} without the {SAELENS_CFG} "
                           "that says its architecture and site; SAELens writes the two "
                           "together (sae.save_model)")
    if given != path:
        raise WeightsError(f"--sae {given} is a file that is no SAE tfx reads, in a folder "
                           "that holds none: give an SAE's folder, or a layer file of a "
                           "transcoder set (listed in its config.yaml, or written by tfx "
                           "train-transcoder)")
    raise WeightsError(f"--sae {path} holds no SAE tfx reads: expected {SAELENS_CFG} + "
                       f"{SAELENS_WEIGHTS} (SAELens), {GEMMA_SCOPE} (Gemma Scope), "
                       f"{GEMMA_SCOPE_2} (Gemma Scope 2) or {TFX_CFG} + {TFX_WEIGHTS} (tfx)")


# -- files ---------------------------------------------------------------------------
def _json(file: Path) -> dict:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise WeightsError(f"cannot read {file}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise WeightsError(f"{file} is not valid JSON: {exc.msg} at line {exc.lineno}, "
                           f"column {exc.colno}") from None
    if not isinstance(data, dict):
        raise WeightsError(f"{file}: expected a JSON object of the SAE's settings")
    return data


def _safetensors(file: Path) -> dict:
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not file.is_file():
        raise WeightsError(f"--sae {file.parent}: {file.name} is missing; the folder's "
                           "config names an SAE whose weights are not beside it")
    try:
        tensors = load_file(str(file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise WeightsError(f"cannot read {file}: truncated or corrupted safetensors file "
                           f"({_line(exc)})") from None
    return {name: t.to(torch.float32) for name, t in tensors.items()}


def _line(exc: BaseException) -> str:
    """An exception's message on one line (a reader's own can span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def read_metadata(file: Path) -> dict:
    """What a layer file tfx wrote says it is (its META_KEY entry); {} for any other file,
    or one that does not read (its reader says why)."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as opened:
            meta = json.loads((opened.metadata() or {}).get(META_KEY) or "{}")
    except Exception:  # noqa: BLE001 - anything unreadable is no tfx file
        return {}
    return meta if isinstance(meta, dict) else {}


def read_circuit_tracer(file: Path) -> dict:
    """A circuit-tracer layer file's tensors, float32, by tfx's names (W_enc as stored:
    (F, D)); Gemma Scope 2's lower-case names pass as they are."""
    from safetensors import SafetensorError, safe_open

    back = {theirs: ours for ours, theirs in CIRCUIT_TRACER_NAMES.items()}
    try:
        with safe_open(str(file), framework="pt") as opened:
            return {back.get(k, k): opened.get_tensor(k).float() for k in opened.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError, TypeError) as exc:
        raise WeightsError(f"cannot read {file}: truncated or corrupted safetensors file "
                           f"({_line(exc)})") from None


def flip_encoder(tensors: dict) -> dict:
    """W_enc between SAELens's (D, F) and circuit-tracer's (F, D): the one transpose
    between the two layouts, its own inverse; the other tensors as they are."""
    W = tensors.get("W_enc")
    return {**tensors, "W_enc": W.T.contiguous()} if W is not None and W.ndim == 2 \
        else dict(tensors)


def _npz(file: Path) -> dict:
    import zipfile

    import numpy as np
    import torch

    try:
        with np.load(file, allow_pickle=False) as data:  # never code
            return {name: torch.from_numpy(np.asarray(data[name], dtype=np.float32))
                    for name in data.files}
    except (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise WeightsError(f"cannot read {file}: truncated or corrupted .npz "
                           f"({_line(exc)})") from None


def _int(cfg: dict, key: str, file: Path) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value \
            or value < 1:
        raise WeightsError(f"{file}: {key} must be a positive whole number, got {value!r}")
    return int(value)


# -- SAELens ---------------------------------------------------------------------------
def _saelens(path: Path) -> SAEFile:
    file = path / SAELENS_CFG
    cfg = _json(file)
    meta = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    # a pre-6.0 flat config says hook_point and activation_fn_str
    hook = meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point")
    hook_out = meta.get("hook_name_out") or cfg.get("hook_name_out")
    head = meta.get("hook_head_index", cfg.get("hook_head_index",
                                               cfg.get("hook_point_head_index")))
    if head is not None:
        raise WeightsError(f"--sae {path}: the SAE reads one head ({hook}, head {head}); tfx "
                           "reads SAEs of whole sites")
    arch = cfg.get("architecture")
    fn = cfg.get("activation_fn", cfg.get("activation_fn_str"))
    kwargs = cfg.get("activation_fn_kwargs") if isinstance(
        cfg.get("activation_fn_kwargs"), dict) else {}
    k = _int(cfg, "k", file)
    if arch is None:
        arch = "topk" if fn == "topk" else "standard"
    if fn == "topk" and arch == "standard":
        arch = "topk"  # pre-6.0: the TopK architecture was a standard SAE's activation
    if arch not in ARCHITECTURES:
        raise WeightsError(f"--sae {path}: architecture {arch!r} is not one tfx runs; it "
                           f"runs {', '.join(sorted(ARCHITECTURES))}")
    kind = ARCHITECTURES[arch]
    if kind.needs_k and k is None:
        k = _int(kwargs, "k", file)
    if issubclass(kind, ReLU) and fn not in (None, "relu"):
        raise WeightsError(f"--sae {path}: activation function {fn!r} is not one tfx runs "
                           "for a standard SAE (relu)")
    if kind.needs_k and k is None:
        raise WeightsError(f"--sae {path}: a TopK SAE needs k in {SAELENS_CFG}")
    normalize = cfg.get("normalize_activations")
    if isinstance(normalize, bool):  # pre-6.0: true meant the expected-average factor
        normalize = "expected_average_only_in" if normalize else "none"
    normalize = normalize or "none"
    if normalize not in NORMALIZATIONS:
        raise WeightsError(f"--sae {path}: normalize_activations {normalize!r} is not one tfx "
                           f"runs ({', '.join(NORMALIZATIONS)})")
    notes = []
    if normalize == "expected_average_only_in":
        notes.append("normalize_activations expected_average_only_in: its factor is folded "
                     "into the saved weights, so the SAE runs as saved (as SAELens loads it)")
        normalize = "none"
    tensors = _safetensors(path / SAELENS_WEIGHTS)
    _scaling_factor(tensors, path)
    apply_b_dec = bool(cfg.get("apply_b_dec_to_input", True)) and not kind.transcoder
    sae = SAEFile(path=path, format="saelens", architecture=arch, kind=kind,
                  d_in=_int(cfg, "d_in", file) or 0,
                  d_sae=_int(cfg, "d_sae", file) or 0, d_out=_int(cfg, "d_out", file) or 0,
                  tensors=tensors, k=k, apply_b_dec_to_input=apply_b_dec, normalize=normalize,
                  rescale_by_decoder_norm=bool(cfg.get("rescale_acts_by_decoder_norm", False)),
                  hook=hook, hook_out=hook_out, notes=notes,
                  files=[file, path / SAELENS_WEIGHTS])
    _check_tensors(sae)
    if sae.transcoder and not hook_out:
        raise WeightsError(f"--sae {path}: a transcoder's {SAELENS_CFG} must name the site it "
                           "writes (metadata.hook_name_out)")
    sae.site = tfx_site(hook, f"--sae {path} reads") if hook else None
    sae.site_out = tfx_site(hook_out, f"--sae {path} writes") if hook_out else None
    return sae


def _scaling_factor(tensors: dict, path: Path) -> None:
    factor = tensors.pop("scaling_factor", None)
    if factor is not None and not bool((factor == 1).all()):
        raise WeightsError(f"--sae {path}: the SAE has a finetuning scaling_factor other "
                           "than 1, which tfx does not apply; fold it into W_dec first")


# -- Gemma Scope -------------------------------------------------------------------------
def _gemma_scope(path: Path) -> SAEFile:
    return read_params(path / GEMMA_SCOPE)


def _gemma_scope_2(path: Path) -> SAEFile:
    return read_params(path / GEMMA_SCOPE_2)


def read_params(file: Path) -> SAEFile:
    """Gemma Scope's params.npz (any .npz) or Gemma Scope 2's params.safetensors (its
    lower-case names), read from the file itself; the site, where the path says one,
    from the file's folder."""
    if file.suffix == ".npz":
        return _jumprelu_folder(file, "gemma-scope", _npz(file))
    return _jumprelu_folder(file, "gemma-scope-2", gemma_scope_2_names(_safetensors(file)))


def gemma_scope_2_names(tensors: dict) -> dict:
    """Gemma Scope 2's tensors by SAELens's names: w_enc -> W_enc, w_dec -> W_dec (b_enc,
    b_dec, threshold as they are); a transcoder's affine_skip_connection, which the input
    multiplies as it is, becomes W_skip, which it multiplies transposed."""
    renamed = {}
    for name, tensor in tensors.items():
        if name == "affine_skip_connection":
            renamed["W_skip"] = tensor.T.contiguous() if tensor.ndim == 2 else tensor
        else:
            renamed["W_" + name[2:] if name.startswith("w_") else name] = tensor
    return renamed


def _jumprelu_folder(file: Path, fmt: str, tensors: dict) -> SAEFile:
    """Gemma Scope's JumpReLU SAEs: sizes from the tensors, b_dec not subtracted from the
    input; the site from the folder's path (layer_12 under a res/resid_post folder ...)
    when it says one, else --sae-site."""
    path = file.parent
    _scaling_factor(tensors, path)
    W_enc = tensors.get("W_enc")
    d_in, d_sae = (tuple(W_enc.shape) + (0, 0))[:2] if W_enc is not None else (0, 0)
    sae = SAEFile(path=path, format=fmt, architecture="jumprelu", kind=JumpReLU, d_in=d_in,
                  d_sae=d_sae, d_out=0, tensors=tensors, apply_b_dec_to_input=False,
                  files=[file])
    _check_tensors(sae)
    sae.site = _site_from_path(path)
    return sae


# -- one layer of a transcoder set -----------------------------------------------------------
def transcoder_file(file: Path, tensors: dict, *, activation: str, k: int | None,
                    hooks: tuple[str, str], sites: tuple[str, str]) -> SAEFile:
    """A layer of a transcoder set given to --sae (transcoder_set.read_layer_sae says what
    it is): its tensors (tfx's names, W_enc (F, D)) checked as any SAE's are."""
    arch, kind = _TFX_TRANSCODERS[activation]
    sae = SAEFile(path=file, format="transcoder-layer", architecture=arch, kind=kind, d_in=0,
                  d_sae=0, d_out=0, tensors=flip_encoder(tensors), k=k,
                  apply_b_dec_to_input=False, hook=hooks[0], hook_out=hooks[1],
                  site=sites[0], site_out=sites[1], files=[file])
    if kind.needs_k and k is None:
        raise WeightsError(f"--sae {file}: a TopK transcoder whose metadata gives no k; "
                           "export it again with its k")
    _check_tensors(sae)
    return sae


# (what a folder or repository name says, the tfx site per layer): Gemma Scope's
# repositories end in -res, -mlp, -att (attention's z, per head, joined); Gemma Scope
# 2's folders are resid_post, mlp_out, resid_post_all ...
_PATH_SITES = ((re.compile(r"(^|[-_/])res(id_post)?(_all)?$|-res(-canonical)?$"),
                "blocks.{i}.resid_out"),
               (re.compile(r"-mlp(-canonical)?$|^mlp_out(_all)?$"), "blocks.{i}.ffn.out"),
               (re.compile(r"-att(-canonical)?$"), "blocks.{i}.attn.context"))


def _site_from_path(path: Path) -> str | None:
    parts = [p for p in path.resolve().parts]
    layer = None
    for part in reversed(parts):
        found = re.match(r"^layer_(\d+)(?:$|_)", part)
        if found:
            layer = found.group(1)
            break
    if layer is None:
        return None
    for part in reversed(parts):
        name = part.lower().removeprefix("models--google--")
        for pattern, site in _PATH_SITES:
            if pattern.search(name):
                return site.format(i=layer)
    return None


# -- tfx -----------------------------------------------------------------------------------
def _tfx(path: Path) -> SAEFile:
    file = path / TFX_CFG
    cfg = _json(file)
    if cfg.get("format") != TFX_FORMAT:
        raise WeightsError(f"{file}: format {cfg.get('format')!r} is not {TFX_FORMAT!r}; "
                           "it was written by another version of tfx")
    arch = cfg.get("architecture")
    if arch not in TFX:
        raise WeightsError(f"{file}: architecture {arch!r} is not relu, jumprelu or topk")
    sae = SAEFile(path=path, format="tfx", architecture=arch, kind=TFX[arch],
                  d_in=_int(cfg, "d_in", file) or 0,
                  d_sae=_int(cfg, "d_sae", file) or 0, d_out=0,
                  tensors=_safetensors(path / TFX_WEIGHTS), k=_int(cfg, "k", file),
                  apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
                  hook=cfg.get("site"), site=cfg.get("site"),
                  files=[file, path / TFX_WEIGHTS])
    if sae.kind.needs_k and sae.k is None:
        raise WeightsError(f"{file}: a topk SAE needs k")
    _check_tensors(sae)
    return sae


# -- shapes ---------------------------------------------------------------------------------
def _check_tensors(sae: SAEFile) -> None:
    """Every tensor the architecture needs, at the sizes the config (or W_enc) gives."""
    t = sae.tensors
    need = ["W_enc", "W_dec", "b_dec", *sae.kind.tensors]
    missing = [n for n in need if n not in t]
    if missing:
        raise WeightsError(f"--sae {sae.path}: the {sae.architecture} SAE's weights lack "
                           f"{', '.join(missing)} (they hold {', '.join(sorted(t)) or 'nothing'})")
    d_in, d_sae = tuple(t["W_enc"].shape) if t["W_enc"].ndim == 2 else (0, 0)
    sae.d_in, sae.d_sae = sae.d_in or d_in, sae.d_sae or d_sae
    d_out = sae.d_out or (tuple(t["W_dec"].shape)[-1] if sae.transcoder else sae.d_in)
    sae.d_out = d_out
    expect = {"W_enc": (sae.d_in, sae.d_sae), "W_dec": (sae.d_sae, d_out), "b_dec": (d_out,),
              "b_enc": (sae.d_sae,), "threshold": (sae.d_sae,), "b_gate": (sae.d_sae,),
              "r_mag": (sae.d_sae,), "b_mag": (sae.d_sae,)}
    for name, shape in expect.items():
        if name in t and name in need and tuple(t[name].shape) != shape:
            raise WeightsError(f"--sae {sae.path}: {name} is {tuple(t[name].shape)} but "
                               f"d_in {sae.d_in} and d_sae {sae.d_sae} make it {shape}; the "
                               "config and the weights disagree")
    if sae.k is not None and not 1 <= sae.k <= sae.d_sae:
        raise WeightsError(f"--sae {sae.path}: k {sae.k} must be between 1 and d_sae "
                           f"{sae.d_sae}")
    if "W_skip" in t and sae.transcoder:  # a skip path: x·W_skipᵀ joins the output
        need.append("W_skip")
        if tuple(t["W_skip"].shape) != (d_out, sae.d_in):
            raise WeightsError(f"--sae {sae.path}: W_skip is {tuple(t['W_skip'].shape)}, not "
                               f"({d_out}, {sae.d_in}) (d_out, d_in)")
    for name in need:
        _check_finite(sae, name, t[name])


def _check_finite(sae: SAEFile, name: str, tensor) -> None:
    """A NaN or infinity in an SAE's weights makes every feature it touches NaN (or every
    reconstruction): refused here, naming the file, the tensor and the first bad entry,
    rather than in each command that runs it."""
    import torch

    bad = ~torch.isfinite(tensor)
    if not bool(bad.any()):
        return
    at = [int(i) for i in bad.nonzero()[0]]
    value = float(tensor[tuple(at)])
    own = "w_" + name[2:] if sae.format == "gemma-scope-2" and name.startswith("W_") else name
    raise WeightsError(f"--sae {sae.path}: {sae.files[-1].name} holds {value} in "
                       f"{own}{at} ({int(bad.sum()):,} of its {tensor.numel():,} values "
                       "not finite); the SAE is damaged or its training diverged: train it "
                       "again, or use another SAE")


def site_needed(sae: SAEFile) -> SelectError:
    """The error for an SAE whose file names no site tfx can read."""
    return SelectError(f"--sae {sae.path}: the {sae.format} SAE does not say which site it "
                       "reads; name it with --sae-site, e.g. --sae-site blocks.12.resid_out")


__all__ = ["SAEFile", "read_sae", "read_params", "read_circuit_tracer", "read_metadata",
           "flip_encoder", "gemma_scope_2_names", "transcoder_file", "site_needed",
           "ARCHITECTURES",
           "TFX_FORMAT", "TFX_CFG", "TFX_WEIGHTS", "SAELENS_CFG", "SAELENS_WEIGHTS",
           "CIRCUIT_TRACER_NAMES", "META_KEY"]
