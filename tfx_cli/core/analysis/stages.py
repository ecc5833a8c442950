"""One function per stage command, each returning its typed result: trace, embed, posenc,
layernorm, ffn, and count-params --verify. (attend, report, generation and the
interventions have modules of their own.) A stage takes a loaded model (core/load.py) and
the text, runs the forward pass recording only the names it needs, and returns the result
for the terminal view, the JSON envelope and the Python API alike."""
from __future__ import annotations

import re

import torch

from ...errors import ConfigError, RangeError, SelectError
from ..config import ModelConfig, part_of
from ..load import Loaded
from ..model import build_model
from ..model.positions import rope_frequencies, sinusoidal_table
from ..params import count_params
from ..results import (EmbedResult, FFNResult, LayerNormResult, ModelInfo, ParamCheck,
                       PosencResult, RowStats, TraceResult)
from ..trace import Trace, compile_globs
from .common import check_range, encode, input_info, read_seq, run, seq_info
from .route import check_dense_ffn


# -- trace ----------------------------------------------------------------------------
def trace(loaded: Loaded, text: str, select: list[str], *, truncate: bool = False,
          target: str | None = None) -> TraceResult:
    """The whole forward pass, recording only what the globs select (an encoder–decoder:
    the encoder, and with a target the decoder too)."""
    ids = encode(loaded, text, truncate=truncate)
    seq = read_seq(loaded, truncate=truncate, target=target)
    aliases = _resid_pre(loaded.model, select)
    tr = run(loaded, ids, [aliases.get(g, g) for g in select] or ["*"], seq=seq)
    if aliases:
        tr = _named_as_asked(tr, aliases, [g for g in select if g not in aliases])
    if not tr.names() and seq.target is None and loaded.cfg.is_encoder_decoder:
        raise SelectError(f"--select {' '.join(select)!r} names only the decoder's tensors, "
                          "and the decoder runs on its input: give it with --target TEXT")
    return TraceResult(model=loaded.info, input=seq_info(loaded, text, ids, seq), tensors=tr,
                       selected=tr.names(), n_selected=len(tr), stack=seq.stack)


def _resid_pre(model, select: list[str]) -> dict[str, str]:
    """The names in `select` that are blocks.{i}.resid_pre (block i's input, the name
    --ablate and --steer take) -> the trace name that holds it."""
    from .sites import resid_pre_name

    out = {}
    for name in select:
        match = re.fullmatch(r"((?:encoder|decoder)\.)?blocks\.(\d+)\.resid_pre", name)
        if match:
            held = resid_pre_name(int(match.group(2)), match.group(1) or "")
            if held in model.taps and int(match.group(2)) < len(model.stack(
                    (match.group(1) or "").rstrip(".") or None)[0].blocks):
                out[name] = held
    return out


def _named_as_asked(tr: Trace, aliases: dict[str, str], globs: list[str]) -> Trace:
    """The trace with each resid_pre recorded under that name (and under its own name
    only when another glob asked for it too)."""
    wanted = compile_globs(globs)
    out = Trace()
    for name in tr.names():
        for alias, held in aliases.items():
            if held == name:
                out.add(alias, tr.raw(name), tr.dims(name))
        if wanted.match(name):
            out.add(name, tr.raw(name), tr.dims(name))
    return out


# -- embed --------------------------------------------------------------------------
def _row_stats(rows: torch.Tensor) -> RowStats:
    rows = rows.to("cpu", torch.float64)
    return RowStats(norm=rows.norm(dim=-1).tolist(), mean=rows.mean(dim=-1).tolist(),
                    std=rows.std(dim=-1, unbiased=False).tolist())


def embed(loaded: Loaded, text: str, *, truncate: bool = False, target: str | None = None,
          stack: str | None = None) -> EmbedResult:
    """Token embedding rows, positional rows and their sum (seed 001, steps 4-6); of the
    decoder's target with an encoder–decoder's --target."""
    ids = encode(loaded, text, truncate=truncate)
    seq = read_seq(loaded, truncate=truncate, target=target, stack=stack)
    cfg = loaded.cfg
    p = seq.prefix
    parts = [p + name for name in ("embed.tok", "embed.pos", "embed.token_type")
             if p + name in loaded.model.taps]
    # stop_after=-1: the embedding sum is the input of block 0, so no block runs.
    # BERT's norm of the sum has its own view: `tfx layernorm --which embed`.
    tr = run(loaded, ids, parts + [p + "embed.out"], stop_after=-1, seq=seq)
    total = " + ".join(name.split(".")[-1] for name in parts)
    note = None
    if cfg.positional == "rope":
        note = ("rotary positions are applied to q and k inside attention, not added here; "
                "see `tfx posenc` and `tfx attend --show q,k`")
    elif cfg.positional == "none":
        note = "this config adds no positional information"
    n_tokens = len(seq.target) if seq.stack == "decoder" else len(ids)
    return EmbedResult(model=loaded.info, input=seq_info(loaded, text, ids, seq), tensors=tr,
                       stack=seq.stack, positional=cfg.positional, d_model=cfg.d_model,
                       n_tokens=n_tokens,
                       out=f"LayerNorm({total})" if cfg.embed_norm else
                       f"{total} × √d_model" if cfg.embed_scale else total,
                       rows={name: _row_stats(tr.raw(name)) for name in tr.names()},
                       note=note)


# -- posenc -------------------------------------------------------------------------
def posenc(source: Loaded | ModelConfig, text: str | None = None, *,
           length: int | None = None, truncate: bool = False,
           info: ModelInfo | None = None) -> PosencResult:
    """The positional table for TEXT's positions (or positions 0..length-1).

    sinusoidal: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same angle);
    learned: the rows of the position embedding; rope: each (position, frequency) angle
    and the cos/sin tables that rotate q and k. `source` is a loaded model, or a config
    alone for a table that needs no weights (--length with sinusoidal or rotary
    positions; `info` then names the model).
    """
    loaded = source if isinstance(source, Loaded) else None
    cfg = loaded.cfg if loaded is not None else source
    if cfg.positional == "none":
        raise ConfigError(f"config {cfg.name} has no positional encoding (positional=none); "
                          "try --config toy, gpt124m or smollm2-135m")
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
    extra: dict = {}
    if cfg.positional == "sinusoidal":
        two_i = torch.arange(0, cfg.d_model, 2, dtype=torch.float64)
        inv_freq = 1.0 / torch.pow(10000.0, two_i / cfg.d_model)  # (C/2,)
        tr.add("posenc.inv_freq", inv_freq, ("R",))
        tr.add("posenc.angle", pos.double()[:, None] * inv_freq[None, :], (P, "R"))
        tr.add("posenc.table", sinusoidal_table(n, cfg.d_model, cfg.sinusoidal_layout),
               (P, "C"))
        formula = ("PE(pos, 2i) = sin(pos / 10000^(2i/d)), "
                   "PE(pos, 2i+1) = cos(pos / 10000^(2i/d))")
        if cfg.sinusoidal_layout == "halves":
            formula = ("PE(pos, i) = sin(pos / 10000^(2i/d)), PE(pos, d/2 + i) = "
                       "cos(pos / 10000^(2i/d)): the sines first, then the cosines")
    elif cfg.positional == "learned":
        module, prefix = loaded.model.stack()
        with loaded.model.holding(prefix + "embed"):
            table = module.embed.pos_emb.weight[cfg.pos_offset:cfg.pos_offset + n]
            tr.add("posenc.table", table.detach(), (P, "C"))
        formula = (f"learned: row pos of the position-embedding table ({prefix}embed.pos_emb)"
                   + (f", read from row pos + {cfg.pos_offset}" if cfg.pos_offset else ""))
    elif cfg.positional == "relative":  # T5: buckets of distance, a learned bias per head
        formula = _relative_posenc(loaded, cfg, n, P, tr)
    else:  # rope
        D = cfg.rotary_dim or cfg.head_dim  # the dims that rotate (all but GPT-NeoX's)
        inv_freq, factor = rope_frequencies(D, cfg.rope_theta, cfg.rope, n)
        angles = (pos.double()[:, None] * inv_freq[None, :]).float()  # (n, D/2), as used
        tr.add("posenc.inv_freq", inv_freq, ("R",))
        tr.add("posenc.angle", angles, (P, "R"))
        # the tables as applied: dimension i and i + D/2 share angle i (split-halves
        # layout); yarn and longrope scale both by their attention factor
        tr.add("posenc.cos", torch.cat([angles.cos(), angles.cos()], -1) * factor, (P, "D"))
        tr.add("posenc.sin", torch.cat([angles.sin(), angles.sin()], -1) * factor, (P, "D"))
        extra = {"head_dim": D, "rope_theta": cfg.rope_theta}
        formula = ("angle(pos, i) = pos * theta^(-2i/D); q and k dims (i, i+D/2) rotate by "
                   "it: x_i' = x_i cos - x_{i+D/2} sin, x_{i+D/2}' = x_{i+D/2} cos + x_i sin")
    return PosencResult(model=loaded.info if loaded is not None else info,
                        input=input_info(loaded, text, ids) if text is not None else None,
                        tensors=tr, positional=cfg.positional, n_positions=n,
                        d_model=cfg.d_model, formula=formula, **extra)


def _relative_posenc(loaded: Loaded | None, cfg: ModelConfig, n: int, P: str,
                     tr: Trace) -> str:
    """T5's positions: the bucket of every (query, key) distance among n positions, as
    the encoder (both directions) and a decoder or causal stack (keys up to the query)
    bin them; with weights, the bias each head adds to a score, from the encoder's (or
    the one stack's) table: the stack's, or its first layer's (UMT5)."""
    from ..model.positions import relative_bias, relative_buckets

    pos = torch.arange(n)
    distance = pos[None, :] - pos[:, None]  # key - query
    kw = dict(buckets=cfg.relative_buckets, max_distance=cfg.relative_max_distance)
    stacks = [("encoder", True), ("decoder", False)] if cfg.is_encoder_decoder else \
        [("", not cfg.causal)]
    for stack, both_ways in stacks:
        name = f"posenc.{stack}.bucket" if stack else "posenc.bucket"
        tr.add(name, relative_buckets(distance, bidirectional=both_ways, **kw), (P, "S"))
    if loaded is not None:
        module, prefix = loaded.model.stack()
        first = f"{prefix}blocks.0" if cfg.relative_per_layer else f"{prefix}embed"
        with loaded.model.holding(first):
            table = (module.blocks[0].attn if cfg.relative_per_layer else module.embed).rel_bias
            bias = relative_bias(table.weight.detach(), n, n, 0,
                                 bidirectional=stacks[0][1], cfg=cfg)[0]
        tr.add(f"posenc.{stacks[0][0]}.bias" if stacks[0][0] else "posenc.bias", bias,
               ("H", P, "S"))
    return (f"bias(h, q, k) = table[bucket(k - q), h]: distances below "
            f"{cfg.relative_buckets // 4} (one way: {cfg.relative_buckets // 2}) have a "
            f"bucket each, longer ones share log-spaced buckets up to "
            f"{cfg.relative_max_distance}; added to every self-attention score "
            f"(attn.position_bias), one table per "
            + ("layer" if cfg.relative_per_layer else "stack"))


# -- layernorm ------------------------------------------------------------------------
NORM_CHOICES = ("ln1", "ln2", "ln3", "ln_f", "embed")


def layernorm_blocks(which: str, layer: int) -> int | None:
    """How many leading blocks `layernorm` needs built (None: the whole model)."""
    return {"ln1": max(layer, 0) + 1, "ln2": max(layer, 0) + 1, "embed": 0}.get(which)


def layernorm(loaded: Loaded, text: str, *, layer: int = 0, which: str = "ln1",
              truncate: bool = False, target: str | None = None,
              stack: str | None = None) -> LayerNormResult:
    """One normalisation: per-token mean and variance, normalised rows, γ, β, output.
    A decoder block of an encoder–decoder has three: ln1 (self-attention), ln2
    (cross-attention) and ln3 (feed-forward)."""
    cfg = loaded.cfg
    ids = encode(loaded, text, truncate=truncate)
    seq = read_seq(loaded, truncate=truncate, target=target, stack=stack)
    stack_module, p = seq.module, seq.prefix
    decoder = seq.stack == "decoder"
    in_block = ["ln1", "ln2"] + (["ln3"] if decoder else [])
    valid = in_block + (["ln_f"] if stack_module.ln_f is not None else []) + \
        (["embed"] if cfg.embed_norm else [])
    if which not in valid:
        why = (" (post-LN blocks end normalised, so there is no final norm)"
               if which == "ln_f" else " (only a decoder block has ln3: give --target)"
               if which == "ln3" else "")
        raise RangeError(f"--which {which} is not a norm of this model{why}; valid: "
                         f"{', '.join(valid)}")
    if which in in_block:
        check_range("layer", layer, seq.n_layers, "--layer")
        prefix = f"{p}blocks.{layer}.{which}"
        module, stop = getattr(stack_module.blocks[layer], which), layer
        if getattr(module, "identity", False):  # OLMo 2's ln1/ln2, ModernBERT's first ln1
            raise RangeError(
                f"--which {which}: block {layer} of {cfg.name} has no norm before its "
                f"{'attention' if which == 'ln1' else 'feed-forward'} ("
                + ("its norms come after each sublayer" if not cfg.pre_norms else
                   "the embedding norm serves block 0") + "); choose another, e.g. "
                + ("--which ln_f" if not cfg.pre_norms else "--layer 1"))
    elif which == "ln_f":
        prefix, module, stop = p + "ln_f", stack_module.ln_f, None
    else:
        prefix, module, stop = p + "embed.ln", stack_module.embed.ln, -1
    select = [prefix + ".*"]
    post = cfg.norm_position == "post" and which in in_block
    if post:  # LayerNorm(x + Sublayer(x)): record x and Sublayer(x) too (seed 000)
        b = f"{p}blocks.{layer}"
        before = {"ln1": p + "embed.out" if layer == 0 else f"{p}blocks.{layer - 1}.resid_out",
                  "ln2": f"{b}.resid_mid", "ln3": f"{b}.resid_cross"}
        if which == "ln2" and not decoder:
            before["ln2"] = f"{b}.resid_mid"
        sub = {"ln1": f"{b}.attn.out", "ln2": f"{b}.cross.out" if decoder else f"{b}.ffn.out",
               "ln3": f"{b}.ffn.out"}
        select += [before[which], sub[which]]
    if which == "ln_f" and decoder:
        stop = None
    tr = run(loaded, ids, select, stop_after=stop, head="none", validate=False, seq=seq)
    # a streamed model has let the norm's weights go: hold the part they are in (the
    # norm's trace names are its parameters' names)
    with loaded.model.holding(part_of(prefix + ".scale")):
        tr.add(prefix + ".scale", module.scale.detach(), ("C",))
        if module.shift is not None:
            tr.add(prefix + ".shift", module.shift.detach(), ("C",))
    normed = tr.raw(prefix + ".normed").to("cpu", torch.float64)
    rms = cfg.norm == "rmsnorm"
    gain = "(1 + γ)" if cfg.norm_plus_one else "γ"
    formula = (f"out = x / sqrt(mean(x²) + eps) * {gain}" if rms
               else f"out = (x - mean) / sqrt(var + eps) * {gain} + β")
    if post:
        formula = "v = x + Sublayer(x); " + formula.replace("x", "v")
    return LayerNormResult(
        model=loaded.info, input=seq_info(loaded, text, ids, seq), tensors=tr, which=which,
        stack=seq.stack, layer=layer if which in in_block else None, norm=cfg.norm,
        position=cfg.norm_position, eps=cfg.ln_eps, normed_mean=normed.mean(-1).tolist(),
        normed_var=normed.var(-1, unbiased=False).tolist(),
        normed_mean_square=normed.pow(2).mean(-1).tolist() if rms else None,
        formula=formula, residual=select[1:] if post else None, prefix=prefix)


# -- ffn ------------------------------------------------------------------------------
FFN_FORMULAS = {"relu": "out = ReLU(x W1 + b1) W2 + b2",
                "gelu": "out = GELU(x W1 + b1) W2 + b2   (exact, erf)",
                "gelu_tanh": "out = GELU_tanh(x W1 + b1) W2 + b2",
                "silu": "out = SiLU(x W1 + b1) W2 + b2",
                "swiglu": "out = (SiLU(x W_gate) * (x W_up)) W_down",
                "geglu": "out = (GELU_tanh(x W_gate) * (x W_up)) W_down"}
FFN_FORMULAS["geglu_exact"] = "out = (GELU(x W_gate) * (x W_up)) W_down   (exact, erf)"


def ffn(loaded: Loaded, text: str, *, layer: int = 0, truncate: bool = False,
        target: str | None = None, stack: str | None = None) -> FFNResult:
    """One feed-forward sublayer: hidden pre-activation (T, F), activation, output (T, C)."""
    cfg = loaded.cfg
    seq = read_seq(loaded, truncate=truncate, target=target, stack=stack)
    check_range("layer", layer, seq.n_layers, "--layer")
    check_dense_ffn(cfg, layer)  # an MoE layer's FFN is its experts: tfx route
    ids = encode(loaded, text, truncate=truncate)
    b = f"{seq.prefix}blocks.{layer}"
    decoder = seq.stack == "decoder"
    # what the FFN reads: the normalised stream (pre-LN) or the post-LN'd stream before it
    if cfg.norm_position == "pre":
        source = f"{b}.ln3.out" if decoder else f"{b}.ln2.out"
    else:
        source = f"{b}.resid_cross" if decoder else f"{b}.resid_mid"
    tr = run(loaded, ids, [source, f"{b}.ffn.*"], stop_after=layer, validate=False, seq=seq)
    act = tr.raw(f"{b}.ffn.act")
    return FFNResult(model=loaded.info, input=seq_info(loaded, text, ids, seq), tensors=tr,
                     stack=seq.stack,
                     layer=layer, activation=cfg.activation, d_model=cfg.d_model,
                     d_ff=cfg.d_ff, source=source, formula=FFN_FORMULAS[cfg.activation],
                     fraction_positive=int((act > 0).sum()) / act.numel())


# -- count-params --verify ------------------------------------------------------------
def verify_params(cfg: ModelConfig, analytic_total: int) -> ParamCheck:
    """Build the model on torch's meta device (every shape, no storage) and compare its
    parameters with the analytic count, name by name.

    The meta device makes even gpt2-xl instant and free: parameter counts depend on
    shapes only, and the modules are built by the same code as real ones.
    """
    model = build_model(cfg, device="meta")
    built = {name: p.numel() for name, p in model.named_parameters()}  # tied ones once
    expected = count_params(cfg).named_counts()
    notes = []
    if not any(name.startswith("pooler.") for name in built):
        pooler = {k: v for k, v in expected.items() if k.startswith("pooler.")}
        if pooler:  # counted analytically, but the core does not run BERT's pooler
            notes.append(f"the core builds no pooler: {sum(pooler.values()):,} parameters "
                         "counted but not compared")
            expected = {k: v for k, v in expected.items() if k not in pooler}
    mismatched = sorted(k for k in set(built) | set(expected) if built.get(k) != expected.get(k))
    return ParamCheck(
        verified=not mismatched and sum(built.values()) == sum(expected.values()),
        model_params=sum(built.values()), expected=sum(expected.values()),
        analytic_total=analytic_total,
        modules=sum(1 for _ in model.modules()),  # Tap identities included
        modules_with_parameters=sum(
            1 for m in model.modules() if next(m.parameters(recurse=False), None) is not None),
        parameter_tensors=len(built), mismatched=mismatched, notes=notes,
        built_on="meta device (shapes only)")


__all__ = ["trace", "embed", "posenc", "layernorm", "layernorm_blocks", "ffn",
           "verify_params", "NORM_CHOICES", "FFN_FORMULAS"]
