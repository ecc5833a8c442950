"""One function per stage, each returning a Result; plus the shared load/encode/run steps.

A stage function tokenizes, builds or loads the model (cached per process), runs the
forward pass recording only the names it needs, and packs a Result for render.emit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

import torch

from ..errors import (ConfigError, InputTextError, RangeError, ResourceError, SelectError,
                      WeightsError)
from .config import ModelConfig, resolve_config, with_overrides
from .model import Transformer, build_model
from .trace import Result, Trace, check_globs
from ..words import counted

torch.set_grad_enabled(False)  # tfx only ever runs inference
# Same seed, same text, same machine and torch: the same bytes (README "Reproducibility").
# CPU kernels here are deterministic already; this makes torch refuse, rather than
# silently use, a nondeterministic one. Filling fresh tensors with NaN would cost about
# half a second of CPU per gpt124m build (measured) and tfx initialises every tensor, so
# that check stays off.
# The switch itself, without torch.use_deterministic_algorithms's import of
# torch._inductor (to set a compiler option tfx never uses): that import costs ~1.8 s.
torch._C._set_deterministic_algorithms(True)
torch.utils.deterministic.fill_uninitialized_memory = False


@dataclass
class Loaded:
    """A model ready to run: its config, module, tokenizer, and how it was obtained."""

    cfg: ModelConfig
    model: Transformer
    tokenizer: object
    info: dict  # the envelope's "model" object


_CACHE: dict = {}


def load_config(spec) -> ModelConfig:
    """The config a spec asks for: a preset or JSON file, with size overrides applied."""
    if spec.weights:
        if spec.config:
            raise ConfigError("--config and --weights both given; real weights bring their "
                              "own architecture, so drop --config")
        changed = [f"--{k.replace('_', '-')}" for k, v in spec.overrides.items() if v is not None]
        if changed:
            raise ConfigError(f"{', '.join(changed)} cannot change a checkpoint's shape; "
                              "drop it, or use --config for random weights")
        from .weights import checkpoint_config  # torch-light until tensors are read

        return checkpoint_config(spec.weights)
    return with_overrides(resolve_config(spec.config), **spec.overrides)


def load(spec, *, text: str | None = None, progress=None, blocks: int | None = None) -> Loaded:
    """Tokenizer + model for a spec. Random weights come from spec.seed.

    `blocks`: a stage that stops early (attend, ffn, layernorm at layer L: L + 1 blocks;
    embed and posenc: 0) gets random weights for those leading blocks only; the rest of
    the model is built on the meta device. PyTorch's RNG is serial, so the values that are
    built equal the whole model's bit for bit, and the seed-exact init of gpt124m's other
    blocks and head (~1 s on 2 cores) is skipped. None builds everything.
    """
    from .tokenizers import get_tokenizer

    cfg = load_config(spec)
    tokenizer = get_tokenizer(spec.tokenizer, default=cfg.tokenizer, corpus_text=text,
                              corpus_path=spec.corpus, weights=spec.weights)
    if not spec.weights and tokenizer.vocab_size != cfg.vocab_size:
        # word/char/byte vocabularies come from the text: size the random table to fit
        cfg = replace(cfg, vocab_size=tokenizer.vocab_size)
    key = (cfg, spec.weights, None if spec.weights else spec.seed, spec.no_cache_weights)
    want = None if spec.weights or blocks is None else min(blocks, cfg.n_layers)
    cached = _CACHE.get(key)
    if cached is None or not _covers(cached[1], want):
        _CACHE.clear()  # one model per process is plenty
        check_memory(cfg, force=spec.force)
        if spec.weights:
            from .weights import load_weights

            model = load_weights(spec.weights, cfg, use_cache=not spec.no_cache_weights,
                                 progress=progress)
        else:
            model = build_model(cfg, spec.seed, blocks=want)
        _CACHE[key] = (model, want)
    info = {"config": cfg.name, "weights": spec.weights,
            "seed": None if spec.weights else spec.seed, **cfg.to_dict()}
    return Loaded(cfg, _CACHE[key][0], tokenizer, info)


def _covers(built: int | None, want: int | None) -> bool:
    """Does a model with `built` leading blocks materialised (None: all) serve `want`?"""
    return built is None or (want is not None and want <= built)


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def check_memory(cfg: ModelConfig, *, force: bool = False) -> None:
    """Refuse, before allocating, a model whose fp32 weights would not fit in memory."""
    from .params import estimate_bytes

    need, free = estimate_bytes(cfg), available_memory()
    if free is not None and need > 0.9 * free and not force:
        raise ResourceError(f"this model needs about {need / 2**30:.1f} GiB for its weights "
                            f"but only {free / 2**30:.1f} GiB of memory is free; choose a "
                            "smaller config, or pass --force to try anyway")


def encode(loaded: Loaded, text: str, *, truncate: bool = False) -> list[int]:
    ids = loaded.tokenizer.encode(text)
    if not ids:
        raise InputTextError("the text has no tokens; give at least one word")
    limit = loaded.cfg.context_length
    if len(ids) > limit:
        if not truncate:
            raise InputTextError(f"the text is {len(ids)} tokens but the context length is "
                                 f"{limit}; shorten it or pass --truncate to keep the last "
                                 f"{limit} tokens")
        ids = ids[-limit:]  # as seed 004's generate crops its context
    too_big = [i for i in ids if i >= loaded.cfg.vocab_size]
    if too_big:
        raise InputTextError(f"token id {too_big[0]} is outside the model's vocabulary of "
                             f"{loaded.cfg.vocab_size}; use the tokenizer that matches the model")
    return ids


def input_info(loaded: Loaded, text: str, ids: list[int]) -> dict:
    return {"text": text, "tokens": loaded.tokenizer.pieces(ids), "ids": list(ids)}


def check_range(noun: str, value: int | None, n: int, option: str,
                plural: str | None = None) -> None:
    """`value` must index one of the model's `n` nouns ("layer": "12 layers", "1 layer")."""
    if value is not None and not 0 <= value < n:
        raise RangeError(f"{option} {value} is out of range: this model has "
                         f"{counted(n, noun, plural)} (0 to {n - 1})")


def run(loaded: Loaded, ids: list[int], select: Iterable[str], *, keep="auto",
        stop_after: int | None = None, validate: bool = True, **kw) -> Trace:
    """One forward pass recording the names that match `select`."""
    select = list(select)
    if validate:
        check_globs(select, loaded.model.tap_names())
    with loaded.model.record(select) as trace, torch.inference_mode():
        loaded.model(torch.tensor([ids]), keep=keep, stop_after=stop_after, **kw)
    return trace


def result(command: str, loaded: Loaded, text: str, ids: list[int], trace: Trace,
           scalars: dict | None = None, view: str | None = None) -> Result:
    return Result(command=command, model=loaded.info, input=input_info(loaded, text, ids),
                  tensors=trace, result=scalars or {}, view=view)


# -- stages -----------------------------------------------------------------------
def trace(spec, text: str, select: list[str], *, truncate: bool = False) -> Result:
    """The whole forward pass, recording only what the globs select."""
    loaded = load(spec, text=text)
    ids = encode(loaded, text, truncate=truncate)
    tr = run(loaded, ids, select or ["*"])
    return result("trace", loaded, text, ids, tr,
                  {"selected": tr.names(), "n_selected": len(tr)})


def model_info(cfg: ModelConfig, spec) -> dict:
    """The envelope's "model" object for a command that needs no module (posenc --length)."""
    return {"config": cfg.name, "weights": spec.weights,
            "seed": None if spec.weights else spec.seed, **cfg.to_dict()}


def _row_stats(rows: torch.Tensor) -> dict:
    """Per-row L2 norm, mean and (population) standard deviation of a (T, C) matrix."""
    rows = rows.double()
    return {"norm": rows.norm(dim=-1).tolist(), "mean": rows.mean(dim=-1).tolist(),
            "std": rows.std(dim=-1, unbiased=False).tolist()}


# -- embed --------------------------------------------------------------------------
def embed(spec, text: str, *, truncate: bool = False) -> Result:
    """Token embedding rows, positional rows and their sum (seed 001, steps 4-6)."""
    loaded = load(spec, text=text, blocks=0)
    ids = encode(loaded, text, truncate=truncate)
    cfg = loaded.cfg
    parts = [name for name in ("embed.tok", "embed.pos", "embed.token_type")
             if name in loaded.model.taps]
    # stop_after=-1: the embedding sum is the input of block 0, so no block runs.
    # BERT's norm of the sum has its own view: `tfx layernorm --which embed`.
    tr = run(loaded, ids, parts + ["embed.out"], stop_after=-1)
    stats = {name: _row_stats(tr.raw(name)) for name in tr.names()}
    total = " + ".join(name.split(".")[1] for name in parts)
    scalars = {"positional": cfg.positional, "d_model": cfg.d_model, "n_tokens": len(ids),
               "out": f"LayerNorm({total})" if cfg.embed_norm else total, "rows": stats}
    if cfg.positional == "rope":
        scalars["note"] = ("rotary positions are applied to q and k inside attention, not "
                           "added here; see `tfx posenc` and `tfx attend --show q,k`")
    elif cfg.positional == "none":
        scalars["note"] = "this config adds no positional information"
    return result("embed", loaded, text, ids, tr, scalars)


# -- posenc -------------------------------------------------------------------------
def posenc(spec, text: str | None = None, *, length: int | None = None,
           truncate: bool = False) -> Result:
    """The positional table for TEXT's positions (or positions 0..length-1).

    sinusoidal: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same angle);
    learned: the rows of the position embedding; rope: each (position, frequency) angle
    and the cos/sin tables that rotate q and k.
    """
    from .model import rope_angles, sinusoidal_table

    if (text is None) == (length is None):
        raise InputTextError("give TEXT or --length N (one of them), e.g. "
                             "`tfx posenc --length 16`")
    cfg = load_config(spec)
    if cfg.positional == "none":
        raise ConfigError(f"config {cfg.name} has no positional encoding (positional=none); "
                          "try --config toy, gpt124m or smollm2-135m")
    loaded, ids = None, None
    if text is not None or cfg.positional == "learned":
        loaded = load(spec, text=text, blocks=0)  # learned tables live in the weights
        cfg = loaded.cfg
    if text is not None:
        ids = encode(loaded, text, truncate=truncate)
        n = len(ids)
    else:
        n = length
        if n < 1 or n > cfg.context_length:
            raise RangeError(f"--length {n} is out of range: this model has "
                             f"{cfg.context_length} positions (1 to {cfg.context_length})")
    P = "T" if text is not None else "P"  # T: rows labelled by the input's tokens
    tr = Trace()
    pos = torch.arange(n)
    scalars: dict = {"positional": cfg.positional, "n_positions": n, "d_model": cfg.d_model}
    if cfg.positional == "sinusoidal":
        two_i = torch.arange(0, cfg.d_model, 2, dtype=torch.float64)
        inv_freq = 1.0 / torch.pow(10000.0, two_i / cfg.d_model)  # (C/2,)
        tr.add("posenc.inv_freq", inv_freq, ("R",))
        tr.add("posenc.angle", pos.double()[:, None] * inv_freq[None, :], (P, "R"))
        tr.add("posenc.table", sinusoidal_table(n, cfg.d_model), (P, "C"))
        scalars["formula"] = ("PE(pos, 2i) = sin(pos / 10000^(2i/d)), "
                              "PE(pos, 2i+1) = cos(pos / 10000^(2i/d))")
    elif cfg.positional == "learned":
        tr.add("posenc.table", loaded.model.embed.pos_emb.weight[:n].detach(), (P, "C"))
        scalars["formula"] = "learned: row pos of the position-embedding table (embed.pos_emb)"
    else:  # rope
        D = cfg.head_dim
        inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
        angles = rope_angles(pos, D, cfg.rope_theta)  # (n, D/2), what the model uses
        tr.add("posenc.inv_freq", inv_freq, ("R",))
        tr.add("posenc.angle", angles, (P, "R"))
        # the tables as applied: dimension i and i + D/2 share angle i (split-halves layout)
        tr.add("posenc.cos", torch.cat([angles.cos(), angles.cos()], -1), (P, "D"))
        tr.add("posenc.sin", torch.cat([angles.sin(), angles.sin()], -1), (P, "D"))
        scalars.update(head_dim=D, rope_theta=cfg.rope_theta,
                       formula=("angle(pos, i) = pos * theta^(-2i/D); q and k dims (i, i+D/2) "
                                "rotate by it: x_i' = x_i cos - x_{i+D/2} sin, "
                                "x_{i+D/2}' = x_{i+D/2} cos + x_i sin"))
    if loaded is None:
        return Result(command="posenc", model=model_info(cfg, spec), input=None, tensors=tr,
                      result=scalars)
    if text is None:
        return Result(command="posenc", model=loaded.info, input=None, tensors=tr,
                      result=scalars)
    return result("posenc", loaded, text, ids, tr, scalars)


# -- attend -------------------------------------------------------------------------
ATTN_STAGES = ("q", "k", "v", "q_rot", "k_rot", "scores", "scaled", "masked", "pattern",
               "context", "concat", "out")


def check_show(show: Iterable[str] | None, valid: Iterable[str]) -> list[str]:
    valid = list(valid)
    show = [s for s in (show or []) if s]
    bad = [s for s in show if s not in valid]
    if bad:
        raise SelectError(f"--show {bad[0]!r} is not a stage; valid: {', '.join(valid)}")
    return show


def _layer_input(loaded: Loaded, ids: list[int], layer: int) -> torch.Tensor:
    """The residual stream entering block `layer` (1, T, C), from one forward pass."""
    name = "embed.out" if layer == 0 else f"blocks.{layer - 1}.resid_out"
    tr = run(loaded, ids, [name], stop_after=layer - 1, validate=False)
    return tr.raw(name)[None]


def _cross_attention(loaded: Loaded, ids: list[int], kv_ids: list[int], layer: int,
                     keep: torch.Tensor | None, select: list[str]) -> Trace:
    """Layer `layer`'s attention with queries from one text and keys/values from another
    (the encoder-decoder attention of seed 001): each text runs up to the attention's
    input, then the layer's own Attention is called with kv_x."""
    from .model import rope_angles

    model, cfg = loaded.model, loaded.cfg
    block = model.blocks[layer]
    x_q, x_kv = _layer_input(loaded, ids, layer), _layer_input(loaded, kv_ids, layer)
    kw = {}
    if cfg.positional == "rope":
        kw = {"q_angles": rope_angles(torch.arange(len(ids)), cfg.head_dim, cfg.rope_theta),
              "k_angles": rope_angles(torch.arange(len(kv_ids)), cfg.head_dim, cfg.rope_theta)}
    with model.record(select) as tr, torch.inference_mode():
        if cfg.norm_position == "pre":  # pre-LN: attention reads the normalised stream
            x_q, x_kv = block.ln1(x_q), block.ln1(x_kv)
        block.attn(x_q, keep, kv_x=x_kv, **kw)
    return tr


def kv_groups(cfg: ModelConfig) -> dict[int, list[int]]:
    """Which query heads read each key/value head (grouped-query attention)."""
    group = cfg.n_heads // cfg.n_kv_heads
    return {g: list(range(g * group, (g + 1) * group)) for g in range(cfg.n_kv_heads)}


def _one_head(tr: Trace, head: int) -> Trace:
    """Keep only head `head` of every (H, ...) tensor; the H axis stays, now of size 1."""
    out = Trace()
    for name in tr.names():
        value = tr.raw(name)
        if tr.dims(name)[0] == "H":
            value = value[head:head + 1]
        out.add(name, value, tr.dims(name))
    return out


def attend(spec, text: str, *, layer: int = 0, head: int | None = None,
           mask: str | None = None, kv: str | None = None, valid_lens: int | None = None,
           explain: bool = False, query_pos: int | None = None,
           show: Iterable[str] | None = None, truncate: bool = False) -> Result:
    """One layer's attention: q, k, v, QKᵀ, ÷√d_k, mask, softmax, ·V, concat, W_O.

    Only blocks 0..layer run and only block `layer`'s attention is recorded.
    """
    corpus = text if kv is None else text + "\n" + kv  # a word vocabulary covers both texts
    loaded = load(spec, text=corpus, blocks=max(layer, 0) + 1)
    cfg, model = loaded.cfg, loaded.model
    check_range("layer", layer, cfg.n_layers, "--layer")
    check_range("head", head, cfg.n_heads, "--head")
    stages = [s for s in ATTN_STAGES if not s.endswith("_rot") or cfg.positional == "rope"]
    show = check_show(show, stages)
    ids = encode(loaded, text, truncate=truncate)
    kv_ids = encode(loaded, kv, truncate=truncate) if kv is not None else None
    T = len(ids)
    S = len(kv_ids) if kv_ids is not None else T
    if mask is None:  # cross-attention reads the whole other text (seed 001's decoder)
        causal = cfg.causal and kv_ids is None
    else:
        causal = mask == "causal"
    if kv_ids is not None and causal and T != S:
        raise RangeError(f"a causal mask needs as many queries as keys, but TEXT has {T} "
                         f"tokens and --kv has {S}; pass --mask none for cross-attention")
    if valid_lens is not None and not 1 <= valid_lens <= S:
        raise RangeError(f"--valid-lens {valid_lens} is out of range: the keys have {S} "
                         f"tokens (1 to {S})")
    if explain:
        query_pos = T - 1 if query_pos is None else query_pos
        check_range("query position", query_pos, T, "--query-pos")
    elif query_pos is not None:
        raise RangeError("--query-pos only applies with --explain")
    keep = model.mask(T, S, causal=causal, valid_len=valid_lens)  # (T, S) or None: no mask
    # record what is shown (all by default: one layer, so memory stays bounded)
    wanted = stages if not show or explain else show
    select = [f"blocks.{layer}.attn.{s}" for s in wanted]
    if kv_ids is None:
        tr = run(loaded, ids, select, keep=keep, stop_after=layer, validate=False)
    else:
        tr = _cross_attention(loaded, ids, kv_ids, layer, keep, select)
    if head is not None:
        tr = _one_head(tr, head)
    scalars = {"layer": layer, "heads": [head] if head is not None else list(range(cfg.n_heads)),
               "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
               "scale": cfg.head_dim ** 0.5, "mask": "causal" if causal else "none",
               "valid_lens": valid_lens, "cross_attention": kv is not None,
               "shown": show or ["pattern"]}
    if cfg.n_kv_heads != cfg.n_heads:
        scalars["kv_groups"] = kv_groups(cfg)
    res = result("attend", loaded, text, ids, tr, scalars)
    if kv_ids is not None:
        res.input["kv"] = input_info(loaded, kv, kv_ids)
    if explain:
        prefix = f"blocks.{layer}.attn."
        h = head if head is not None else 0
        local = 0 if head is not None else h  # index into the (possibly sliced) H axis
        rot = "_rot" if cfg.positional == "rope" else ""
        res.result["explain"] = explain_row(
            tr.array(prefix + "q" + rot)[local], tr.array(prefix + "k" + rot)[local],
            tr.array(prefix + "v")[local], None if keep is None else keep.numpy(),
            query_pos, cfg.head_dim ** 0.5, tr.array(prefix + "pattern")[local],
            head=h, tokens=res.input["tokens"],
            kv_tokens=res.input["kv"]["tokens"] if kv_ids is not None else None)
        if show:
            res.tensors = tr.subset([prefix + s for s in show if prefix + s in tr])
    return res


def explain_row(q, k, v, keep, i: int, scale: float, pattern, *, head: int,
                tokens: list | None = None, kv_tokens: list | None = None,
                scale_label: str = "sqrt(d_k)") -> dict:
    """Query position i of one head, number by number, in float64: each q·k_j, ÷ scale,
    the mask, exp (less the row's largest visible score, which leaves the softmax
    unchanged), the sum, each weight × v_j and their sum. `pattern` is the recorded one,
    to show the hand arithmetic agrees with the model's."""
    import numpy as np

    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    kv_tokens = kv_tokens if kv_tokens is not None else tokens
    visible = np.ones(k.shape[0], dtype=bool) if keep is None else np.asarray(keep[i], bool)
    dots = k @ q[i]  # (S,)
    scaled = dots / scale
    top = scaled[visible].max()
    exps = np.where(visible, np.exp(np.where(visible, scaled, top) - top), 0.0)
    total = exps.sum()
    weights = exps / total
    weighted = weights[:, None] * v  # (S, Dv)
    context = weighted.sum(axis=0)
    keys = []
    for j in range(k.shape[0]):
        keys.append({"pos": j, "token": kv_tokens[j] if kv_tokens else None,
                     "k": k[j].tolist(), "dot": float(dots[j]), "scaled": float(scaled[j]),
                     "visible": bool(visible[j]), "exp": float(exps[j]),
                     "weight": float(weights[j]), "v": v[j].tolist(),
                     "weighted_v": weighted[j].tolist()})
    model_row = np.asarray(pattern, dtype=np.float64)[i]
    return {"head": head, "query_pos": i, "query_token": tokens[i] if tokens else None,
            "d_k": int(q.shape[-1]), "scale": float(scale), "scale_label": scale_label,
            "q": q[i].tolist(), "max_scaled": float(top), "sum_exp": float(total),
            "keys": keys, "context": context.tolist(),
            "max_abs_diff_vs_pattern": float(np.abs(model_row - weights).max())}


# -- attend --inputs: hand-made matrices through the same formula ----------------------
INPUT_KEYS = {"x": "x", "w_q": "w_q", "w_query": "w_q", "w_k": "w_k", "w_key": "w_k",
              "w_v": "w_v", "w_value": "w_v", "w_o": "w_o", "w_out": "w_o",
              "scale": "scale", "mask": "mask", "tokens": "tokens", "comment": "comment"}


def read_inputs(path) -> dict:
    """Parse and check an --inputs file; every problem is one InputTextError line."""
    import json
    from pathlib import Path

    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputTextError(f"--inputs {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputTextError(f"--inputs {path}: cannot read it ({exc})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputTextError(f"--inputs {path} is not valid JSON: {exc.msg} at line "
                             f"{exc.lineno}, column {exc.colno}") from None
    if not isinstance(data, dict):
        raise InputTextError(f"--inputs {path}: expected a JSON object with keys x, w_q, "
                             "w_k, w_v (optional w_o, scale, mask, tokens)")
    unknown = [key for key in data if key not in INPUT_KEYS]
    if unknown:
        raise InputTextError(f"--inputs {path}: unknown key {unknown[0]!r}; valid keys: x, "
                             "w_q, w_k, w_v, w_o, scale, mask, tokens, comment")
    got = {}
    for key, value in data.items():
        canon = INPUT_KEYS[key]
        if canon in got:
            raise InputTextError(f"--inputs {path}: {key!r} given twice (as {canon})")
        got[canon] = value
    missing = [key for key in ("x", "w_q", "w_k", "w_v") if key not in got]
    if missing:
        raise InputTextError(f"--inputs {path}: missing key {missing[0]!r}; an inputs file "
                             "needs x (T×d), w_q, w_k (d×d_k) and w_v (d×d_v)")
    out = {name: _matrix(path, name, got[name]) for name in ("x", "w_q", "w_k", "w_v")}
    if got.get("w_o") is not None:
        out["w_o"] = _matrix(path, "w_o", got["w_o"])
    T, d = out["x"].shape
    for name in ("w_q", "w_k", "w_v"):
        if out[name].shape[0] != d:
            raise InputTextError(f"--inputs {path}: x is {T}×{d} but {name} is "
                                 f"{_dims(out[name])}; {name} needs {d} rows")
    if out["w_q"].shape[1] != out["w_k"].shape[1]:
        raise InputTextError(f"--inputs {path}: w_q is {_dims(out['w_q'])} and w_k is "
                             f"{_dims(out['w_k'])}; q·k needs the same number of columns")
    if "w_o" in out and out["w_o"].shape[0] != out["w_v"].shape[1]:
        raise InputTextError(f"--inputs {path}: w_v gives {out['w_v'].shape[1]} columns but "
                             f"w_o is {_dims(out['w_o'])}; w_o needs {out['w_v'].shape[1]} rows")
    out["scale"] = _scale(path, got.get("scale", "sqrt_dk"), out["w_q"].shape[1])
    out["mask"] = _mask(path, got.get("mask"), T)
    tokens = got.get("tokens")
    if tokens is not None and (not isinstance(tokens, list) or len(tokens) != T
                               or not all(isinstance(t, (str, int, float)) for t in tokens)):
        raise InputTextError(f"--inputs {path}: tokens must be a list of {T} labels, one per "
                             "row of x")
    out["tokens"] = [str(t) for t in tokens] if tokens is not None else \
        [f"x{i}" for i in range(T)]
    return out


def _dims(m) -> str:
    return f"{m.shape[0]}×{m.shape[1]}"


def _matrix(path, name: str, value) -> torch.Tensor:
    """A non-empty rectangular list of lists of numbers, as float64."""
    where = f"--inputs {path}: {name}"
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        raise InputTextError(f"{where} must be a matrix: a non-empty list of rows, e.g. "
                             "[[1, 0], [0, 1]]")
    width = len(value[0])
    for i, row in enumerate(value):
        if len(row) != width or not row:
            raise InputTextError(f"{where} is ragged: row 0 has {width} numbers but row {i} "
                                 f"has {len(row)}")
        for j, cell in enumerate(row):
            if isinstance(cell, bool) or not isinstance(cell, (int, float)):
                raise InputTextError(f"{where}[{i}][{j}] is {json_repr(cell)}, not a number")
    return torch.tensor(value, dtype=torch.float64)


def json_repr(value) -> str:
    import json

    return json.dumps(value)


def _scale(path, value, d_k: int) -> float:
    if value == "sqrt_dk":
        return d_k ** 0.5
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputTextError(f"--inputs {path}: scale must be a positive number or "
                             f"\"sqrt_dk\", got {json_repr(value)}")
    return float(value)


def _mask(path, value, T: int):
    if value is None or value == "none":
        return None
    if value == "causal":
        return torch.ones(T, T, dtype=torch.bool).tril()
    m = _matrix(path, "mask", value)
    if m.shape[0] != T or not ((m == 0) | (m == 1)).all():
        raise InputTextError(f"--inputs {path}: mask must be \"causal\" or a {T}×{T} matrix "
                             "of 0 (hidden) and 1 (visible)")
    if m.shape[1] != T:
        raise InputTextError(f"--inputs {path}: mask is {_dims(m)} but x has {T} rows, so "
                             f"keys are {T}; give a {T}×{T} mask")
    keep = m.bool()
    empty = (~keep).all(dim=1).nonzero()
    if len(empty):
        raise InputTextError(f"--inputs {path}: mask row {int(empty[0])} hides every key; "
                             "softmax needs at least one 1 per row")
    return keep


def attend_inputs(path, *, explain: bool = False, query_pos: int | None = None,
                  show: Iterable[str] | None = None) -> Result:
    """Self-attention on matrices from a JSON file (seed 000's worked example), through
    model.explicit_attention, the formula the model itself uses, in float64."""
    from types import SimpleNamespace

    from .model import Tap, explicit_attention

    data = read_inputs(path)
    stages = ["q", "k", "v", "scores", "scaled", "masked", "pattern", "context"]
    if "w_o" in data:
        stages.append("out")
    show = check_show(show, stages)
    T = data["x"].shape[0]
    tr = Trace()
    tr.add("x", data["x"], ("T", "C"))

    def tap(name: str, *dims: str) -> Tap:
        t = Tap(*dims)
        t.name, t.trace = f"attn.{name}", tr
        return t

    x = data["x"][None]  # (1, T, C): a batch of one, as the model sees it
    q = tap("q", "H", "T", "D")((x @ data["w_q"])[:, None])  # (1, 1, T, D): one head
    k = tap("k", "H", "S", "D")((x @ data["w_k"])[:, None])
    v = tap("v", "H", "S", "D")((x @ data["w_v"])[:, None])
    taps = SimpleNamespace(scores=tap("scores", "H", "T", "S"),
                           scaled=tap("scaled", "H", "T", "S"),
                           masked=tap("masked", "H", "T", "S"),
                           pattern=tap("pattern", "H", "T", "S"))
    context = tap("context", "H", "T", "D")(
        explicit_attention(q, k, v, data["mask"], data["scale"], taps=taps))
    if "w_o" in data:
        tap("out", "T", "C")(context[:, 0] @ data["w_o"])
    if explain:
        query_pos = T - 1 if query_pos is None else query_pos
        check_range("query position (row of x)", query_pos, T, "--query-pos",
                    plural="query positions (rows of x)")
    elif query_pos is not None:
        raise RangeError("--query-pos only applies with --explain")
    d_k = data["w_q"].shape[1]
    label = "sqrt(d_k)" if abs(data["scale"] - d_k ** 0.5) < 1e-12 else "scale"
    scalars = {"source": str(path), "n_heads": 1, "head_dim": d_k, "scale": data["scale"],
               "scale_label": label,
               "mask": "none" if data["mask"] is None else "given", "heads": [0],
               "shown": show or ["pattern"],
               "formula": "tfx_cli.core.model.explicit_attention (the model's own)",
               "weights": {name: data[name].tolist()
                           for name in ("w_q", "w_k", "w_v", "w_o") if name in data}}
    if explain:
        scalars["explain"] = explain_row(
            tr.array("attn.q")[0], tr.array("attn.k")[0], tr.array("attn.v")[0],
            None if data["mask"] is None else data["mask"].numpy(), query_pos, data["scale"],
            tr.array("attn.pattern")[0], head=0, tokens=data["tokens"], scale_label=label)
    if show:
        tr = tr.subset(["x"] + [f"attn.{s}" for s in show])
    return Result(command="attend", model=None,
                  input={"file": str(path), "tokens": data["tokens"]}, tensors=tr,
                  result=scalars)


# -- layernorm ------------------------------------------------------------------------
def layernorm(spec, text: str, *, layer: int = 0, which: str = "ln1",
              truncate: bool = False) -> Result:
    """One normalisation: per-token mean and variance, normalised rows, γ, β, output."""
    blocks = {"ln1": max(layer, 0) + 1, "ln2": max(layer, 0) + 1, "embed": 0}.get(which)
    loaded = load(spec, text=text, blocks=blocks)
    cfg, model = loaded.cfg, loaded.model
    ids = encode(loaded, text, truncate=truncate)
    valid = ["ln1", "ln2"] + (["ln_f"] if model.ln_f is not None else []) + \
        (["embed"] if cfg.embed_norm else [])
    if which not in valid:
        why = (" (post-LN blocks end normalised, so there is no final norm)"
               if which == "ln_f" else "")
        raise RangeError(f"--which {which} is not a norm of this model{why}; valid: "
                         f"{', '.join(valid)}")
    if which in ("ln1", "ln2"):
        check_range("layer", layer, cfg.n_layers, "--layer")
        prefix, module = f"blocks.{layer}.{which}", getattr(model.blocks[layer], which)
        stop = layer
    elif which == "ln_f":
        prefix, module, stop = "ln_f", model.ln_f, None
    else:
        prefix, module, stop = "embed.ln", model.embed.ln, -1
    select = [prefix + ".*"]
    post = cfg.norm_position == "post" and which in ("ln1", "ln2")
    if post:  # LayerNorm(x + Sublayer(x)): record x and Sublayer(x) too (seed 000)
        if which == "ln1":
            select += ["embed.out" if layer == 0 else f"blocks.{layer - 1}.resid_out",
                       f"blocks.{layer}.attn.out"]
        else:
            select += [f"blocks.{layer}.resid_mid", f"blocks.{layer}.ffn.out"]
    tr = run(loaded, ids, select, stop_after=stop, head="none", validate=False)
    tr.add(prefix + ".scale", module.scale.detach(), ("C",))
    if module.shift is not None:
        tr.add(prefix + ".shift", module.shift.detach(), ("C",))
    normed = tr.raw(prefix + ".normed").double()
    scalars = {"which": which, "layer": layer if which in ("ln1", "ln2") else None,
               "norm": cfg.norm, "position": cfg.norm_position, "eps": cfg.ln_eps,
               "normed_mean": normed.mean(-1).tolist(),
               "normed_var": normed.var(-1, unbiased=False).tolist()}
    if cfg.norm == "rmsnorm":
        scalars["normed_mean_square"] = normed.pow(2).mean(-1).tolist()
        scalars["formula"] = "out = x / sqrt(mean(x²) + eps) * γ"
    else:
        scalars["formula"] = "out = (x - mean) / sqrt(var + eps) * γ + β"
    if post:
        scalars["residual"] = select[1:]
        scalars["formula"] = "v = x + Sublayer(x); " + scalars["formula"].replace("x", "v")
    return result("layernorm", loaded, text, ids, tr, scalars)


# -- ffn ------------------------------------------------------------------------------
def ffn(spec, text: str, *, layer: int = 0, truncate: bool = False) -> Result:
    """One feed-forward sublayer: hidden pre-activation (T, F), activation, output (T, C)."""
    loaded = load(spec, text=text, blocks=max(layer, 0) + 1)
    cfg = loaded.cfg
    check_range("layer", layer, cfg.n_layers, "--layer")
    ids = encode(loaded, text, truncate=truncate)
    # what the FFN reads: the normalised stream (pre-LN) or the post-LN'd resid_mid
    source = f"blocks.{layer}.ln2.out" if cfg.norm_position == "pre" else \
        f"blocks.{layer}.resid_mid"
    tr = run(loaded, ids, [source, f"blocks.{layer}.ffn.*"], stop_after=layer,
             validate=False)
    act = tr.raw(f"blocks.{layer}.ffn.act")
    formulas = {"relu": "out = ReLU(x W1 + b1) W2 + b2",
                "gelu": "out = GELU(x W1 + b1) W2 + b2   (exact, erf)",
                "gelu_tanh": "out = GELU_tanh(x W1 + b1) W2 + b2",
                "swiglu": "out = (SiLU(x W_gate) * (x W_up)) W_down"}
    scalars = {"layer": layer, "activation": cfg.activation, "d_model": cfg.d_model,
               "d_ff": cfg.d_ff, "input": source, "formula": formulas[cfg.activation],
               "fraction_positive": float((act > 0).double().mean())}
    return result("ffn", loaded, text, ids, tr, scalars)


__all__ = ["Loaded", "load", "load_config", "encode", "run", "result", "trace",
           "check_range", "input_info", "WeightsError", "embed", "posenc", "attend",
           "attend_inputs", "layernorm", "ffn", "explain_row", "read_inputs", "kv_groups"]
