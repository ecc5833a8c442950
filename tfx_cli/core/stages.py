"""One function per stage, each returning a typed result; plus the shared load/encode/run.

A stage takes a loaded model (`load(spec)`, cached per process) and the text, runs the
forward pass recording only the names it needs, and returns its result (core/results.py)
for the terminal view, the JSON envelope and the Python API alike. `tfx_cli.api` decides
what to load (a stage that stops at layer L needs blocks 0..L only) and calls these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Iterable

import torch

from ..errors import (ConfigError, InputTextError, RangeError, ResourceError, SelectError,
                      UsageError)
from ..words import counted
from .config import ModelConfig, ModelSpec, spec_config
from .memory import DTYPES, FREE_SHARE, Budget, available_memory, format_size
from .model import Transformer, build_model
from .results import (AttendResult, Candidate, EmbedResult, ExplainKey, ExplainRow,
                      FFNResult, InputInfo, LayerNormResult, ModelInfo, NormStats,
                      ParamCheck, PosencResult, ReportResult, RowStats, TraceResult)
from .trace import Trace, check_globs

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
    """A model ready to run: its config, module and tokenizer, and how it was obtained."""

    cfg: ModelConfig
    model: Transformer
    tokenizer: object
    spec: ModelSpec
    budget: Budget | None = None  # what a run may hold (None: nothing is checked)
    notice: Callable[[str], None] | None = None  # one-line notes for stderr

    @property
    def info(self) -> ModelInfo:
        """The envelope's "model" object."""
        return model_info(self.cfg, self.spec, self.model)


def model_info(cfg: ModelConfig, spec: ModelSpec, model: Transformer | None = None) -> ModelInfo:
    return ModelInfo(config=cfg.name, weights=spec.weights,
                     seed=None if spec.weights else spec.seed, cfg=cfg, dtype=spec.dtype,
                     device=spec.device,
                     streamed=model is not None and model.residency.streamed)


_CACHE: dict = {}
_BUDGET: dict = {}  # the budget the cached model was loaded under


def load(spec: ModelSpec, *, blocks: int | None = None, progress=None,
         notice: Callable[[str], None] | None = None) -> Loaded:
    """Tokenizer + model for a spec. Random weights come from spec.seed.

    `blocks`: a stage that stops early (attend, ffn, layernorm at layer L: L + 1 blocks;
    embed and posenc: 0) gets random weights for those leading blocks only; the rest of
    the model is built on the meta device. PyTorch's RNG is serial, so the values that are
    built equal the whole model's bit for bit, and the seed-exact init of gpt124m's other
    blocks and head (~1 s on 2 cores) is skipped. None builds everything.
    `progress`: a context-manager factory like render.emit.progress, shown while real
    weights load (and while a streamed model reads its parts); None shows nothing.
    `notice(text)`: one-line notes for the user (a checkpoint streamed from disk).

    spec.dtype, spec.device and spec.max_memory: the precision and device of the run, and
    the memory budget (core/memory.Budget) that decides whether a checkpoint is loaded
    whole or streamed from disk (core/streaming.py), and that runs are checked against.
    """
    from .tokenizers import model_tokenizer

    cfg = spec_config(spec, progress=progress)
    tokenizer = model_tokenizer(spec, cfg)
    if not spec.weights and (spec.tokenizer or spec.corpus is not None):
        # a tokenizer the user chose for random weights sizes their embedding table
        cfg = replace(cfg, vocab_size=tokenizer.vocab_size)
    key = (cfg, spec.weights, None if spec.weights else spec.seed, spec.no_cache_weights,
           spec.dtype, spec.device, spec.max_memory, spec.force)
    want = None if spec.weights or blocks is None else min(blocks, cfg.n_layers)
    cached = _CACHE.get(key)
    if cached is None or not _covers(cached[1], want):
        _CACHE.clear()  # one model per process is plenty
        device = torch_device(spec.device)
        budget = Budget(spec.max_memory, free=device_free(device), force=spec.force)
        dtype = getattr(torch, spec.dtype)
        if spec.weights:
            from .weights import load_weights

            model = load_weights(spec.weights, cfg, use_cache=not spec.no_cache_weights,
                                 progress=progress, dtype=spec.dtype, device=spec.device,
                                 budget=budget)
            if model.residency.streamed and notice is not None:
                notice(streaming_note(cfg, model, budget))
        else:
            check_memory(cfg, force=spec.force, dtype=spec.dtype, budget=budget)
            model = build_model(cfg, spec.seed, blocks=want, dtype=dtype, device=spec.device)
        _CACHE[key] = (model, want)
        _BUDGET.clear()
        _BUDGET[key] = budget
    model, budget = _CACHE[key][0], _BUDGET.get(key)
    if model.residency.streamed:
        model.residency.progress = progress
    return Loaded(cfg, model, tokenizer, spec, budget, notice)


def torch_device(name: str) -> torch.device:
    """--device as torch has it; a one-line error where this torch has no such device."""
    kind, _, index = name.partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = ("this build of torch has no CUDA support" if torch.version.cuda is None
                   else "torch finds no CUDA GPU on this machine")
            raise UsageError(f"--device {name}: {why}; run on the CPU (--device cpu, the "
                             "default), or install a CUDA build of torch on a machine with "
                             "an NVIDIA GPU")
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise UsageError(f"--device {name}: this machine has {counted(count, 'CUDA device')} "
                             f"(cuda:0 to cuda:{count - 1})")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: torch finds no Apple GPU (MPS) here; run on the "
                         "CPU (--device cpu, the default)")
    return torch.device(name)


def device_free(device: torch.device) -> int | None:
    """Free memory where the weights will live: the GPU's for CUDA, else the machine's."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory()


def streaming_note(cfg: ModelConfig, model: Transformer, budget: Budget) -> str:
    streamed = model.residency
    part, size = streamed.largest
    where = f"--max-memory {budget.text}" if budget.given else "the free memory"
    return (f"{cfg.name}'s weights ({format_size(streamed.total_bytes)} in "
            f"{str(model.dtype).removeprefix('torch.')}) do not fit in {where}: each of its "
            f"{len(streamed.parts)} parts is read from disk when it runs, then let go "
            f"(at most {format_size(size)} at a time)")


def _covers(built: int | None, want: int | None) -> bool:
    """Does a model with `built` leading blocks materialised (None: all) serve `want`?"""
    return built is None or (want is not None and want <= built)


def check_memory(cfg: ModelConfig, *, force: bool = False, dtype: str = "float32",
                 budget: Budget | None = None) -> None:
    """Refuse, before allocating, random weights that would not fit in the budget (they
    are made in memory: only a checkpoint can stay on disk)."""
    from .params import estimate_bytes

    need = estimate_bytes(cfg) // 4 * DTYPES[dtype]
    budget = budget or Budget()
    if force or budget.fits(need):
        return
    if budget.given:
        raise ResourceError(f"this model needs about {format_size(need)} for its weights but "
                            f"--max-memory is {budget.text}; random weights are made in "
                            "memory, so raise --max-memory or choose a smaller config")
    free = budget.bytes / FREE_SHARE
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


def input_info(loaded: Loaded, text: str, ids: list[int]) -> InputInfo:
    return InputInfo(text=text, tokens=loaded.tokenizer.pieces(ids), ids=list(ids))


def check_range(noun: str, value: int | None, n: int, option: str,
                plural: str | None = None) -> None:
    """`value` must index one of the model's `n` nouns ("layer": "12 layers", "1 layer")."""
    if value is not None and not 0 <= value < n:
        raise RangeError(f"{option} {value} is out of range: this model has "
                         f"{counted(n, noun, plural)} (0 to {n - 1})")


def run(loaded: Loaded, ids: list[int], select: Iterable[str], *, keep="auto",
        stop_after: int | None = None, validate: bool = True, seq: Seq | None = None,
        **kw) -> Trace:
    """One forward pass recording the names that match `select`. `seq`: an
    encoder–decoder's target and the stack stop_after counts in."""
    select = list(select)
    if validate:
        check_globs(select, loaded.model.tap_names())
    if seq is not None and seq.stack is not None:
        kw.update(stack=seq.stack, target=None if seq.target is None
                  else torch.tensor([seq.target]))
    head = kw.get("head", "all")
    target = len(seq.target) if seq is not None and seq.target is not None else 0
    rows = target or len(ids)  # the head reads the decoder's positions when there is one
    check_run(loaded, len(ids), select, target=target,
              logits_rows=0 if stop_after is not None or head == "none" else 1
              if head == "last" else rows)
    with loaded.model.record(select) as trace, torch.inference_mode():
        loaded.model(torch.tensor([ids]), keep=keep, stop_after=stop_after, **kw)
    return trace


# -- encoder-decoder input -------------------------------------------------------------
@dataclass
class Seq:
    """Which stack a stage shows and what it reads: for an encoder–decoder, the
    decoder's target ids (its start id first) when --target is given; the model's one
    stack (prefix "") for every other model."""

    stack: str | None  # "encoder" | "decoder" | None (one stack)
    prefix: str  # trace-name prefix of that stack: "", "encoder.", "decoder."
    module: object  # holds its embed, blocks and ln_f
    target: list[int] | None = None
    target_text: str | None = None

    @property
    def n_layers(self) -> int:
        return len(self.module.blocks)


def read_seq(loaded: Loaded, *, target: str | None = None, stack: str | None = None,
             cross: bool = False) -> Seq:
    """Check --target/--stack/--cross against the model and encode the target."""
    from ..errors import UsageError

    cfg, model = loaded.cfg, loaded.model
    if not cfg.is_encoder_decoder:
        for given, option in ((target is not None, "--target"), (stack is not None, "--stack"),
                              (cross, "--cross")):
            if given:
                raise UsageError(f"{option} needs an encoder–decoder model (a decoder that "
                                 f"reads an encoder); {cfg.name} has one stack: drop "
                                 f"{option}, or use --config toy or vaswani")
        return Seq(None, "", model)
    if stack not in (None, "encoder", "decoder"):
        raise UsageError(f"--stack {stack!r} is not a stack; valid: encoder, decoder")
    if cross and target is None:
        raise UsageError("--cross shows the decoder's cross-attention, which needs the "
                         "decoder's input: give it with --target TEXT")
    which = stack or ("decoder" if target is not None else "encoder")
    if which == "decoder" and target is None:
        raise UsageError("--stack decoder needs the decoder's input: give it with "
                         "--target TEXT")
    if cross and which != "decoder":
        raise UsageError("--cross is the decoder's cross-attention: drop --stack encoder")
    module, prefix = model.stack(which)
    ids = None
    if target is not None:
        # the decoder goes on from the target: no end token after it (BART's </s>)
        ids = [cfg.start_id] + (loaded.tokenizer.encode_prefix(target) if target.strip()
                                else [])
        if len(ids) > cfg.context_length:
            raise InputTextError(f"the target is {len(ids)} tokens with the start token, but "
                                 f"the context length is {cfg.context_length}; shorten it")
        bad = [i for i in ids if i >= cfg.vocab_size]
        if bad:
            raise InputTextError(f"target token id {bad[0]} is outside the model's "
                                 f"vocabulary of {cfg.vocab_size}")
    return Seq(which, prefix, module, ids, target)


def seq_info(loaded: Loaded, text: str, ids: list[int], seq: Seq) -> InputInfo:
    """The input object: the source text, and the decoder's target when there is one."""
    info = input_info(loaded, text, ids)
    if seq.target is not None:
        info.target = input_info(loaded, seq.target_text, seq.target)
    return info


RUN_FIX = "raise --max-memory, record fewer tensors (--select), or give a shorter text"


def check_run(loaded: Loaded, T: int, select: Iterable[str] = (), *, kv_len: int = 0,
              steps: int = 1, logits_rows: int | None = None, fix: str = RUN_FIX,
              target: int = 0) -> None:
    """Refuse, before anything is allocated, a run its budget cannot hold: the weights
    held at once (the whole model, or a streamed model's largest part), the KV cache,
    the tensors recorded (`steps` times, as float32, what the output holds) and one
    block's working space (activations, the T x S scores, the logits rows)."""
    budget = loaded.budget
    if budget is None or not budget.known or budget.force:
        return
    from .params import estimate_bytes
    from .trace import compile_globs

    cfg, model = loaded.cfg, loaded.model
    size = DTYPES[loaded.spec.dtype]
    streamed = model.residency.streamed
    weights = model.residency.largest[1] if streamed else estimate_bytes(cfg) // 4 * size
    S = max(T, kv_len)
    dims = {"T": T, "S": S, "C": cfg.d_model, "H": cfg.n_heads, "D": cfg.head_dim,
            "F": cfg.d_ff, "V": cfg.vocab_size, "A": cfg.attn_dim}
    # an encoder–decoder's decoder (and the logits) run over the `target` positions, its
    # keys over the source or the target
    decoder = {**dims, "T": target, "S": max(S, target)} if target else dims
    chosen = compile_globs(list(select))
    recorded = steps * sum(
        4 * math.prod((decoder if name.startswith(("decoder.", "logits")) else dims).get(d, 1)
                      for d in tap.dims)
        for name, tap in model.taps.items() if chosen.match(name))
    T, S = max(T, target), max(S, target)
    # the cache holds the decoder's self-attention in an encoder–decoder
    kv = 2 * (cfg.n_decoder_layers or cfg.n_layers) * cfg.n_kv_heads * cfg.head_dim * kv_len \
        * size
    rows = T if logits_rows is None else logits_rows
    work = (size * T * (6 * cfg.d_model + 3 * cfg.attn_dim + 3 * cfg.d_ff)
            + 4 * 2 * cfg.n_heads * T * S + (size + 8) * rows * cfg.vocab_size)
    need = weights + kv + recorded + work
    if not budget.fits(need):
        held = "the largest part of the weights" if streamed else "the weights"
        raise budget.refuse(f"this run ({counted(T, 'token')})", need,
                            {held: weights, "the KV cache": kv, "recorded tensors": recorded,
                             "working space": work}, fix)


# -- trace ----------------------------------------------------------------------------
def trace(loaded: Loaded, text: str, select: list[str], *, truncate: bool = False,
          target: str | None = None) -> TraceResult:
    """The whole forward pass, recording only what the globs select (an encoder–decoder:
    the encoder, and with a target the decoder too)."""
    ids = encode(loaded, text, truncate=truncate)
    seq = read_seq(loaded, target=target)
    tr = run(loaded, ids, select or ["*"], seq=seq)
    if not tr.names() and seq.target is None and loaded.cfg.is_encoder_decoder:
        raise SelectError(f"--select {' '.join(select)!r} names only the decoder's tensors, "
                          "and the decoder runs on its input: give it with --target TEXT")
    return TraceResult(model=loaded.info, input=seq_info(loaded, text, ids, seq), tensors=tr,
                       selected=tr.names(), n_selected=len(tr), stack=seq.stack)


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
    seq = read_seq(loaded, target=target, stack=stack)
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
    from .model import rope_frequencies, sinusoidal_table

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


# -- attend -------------------------------------------------------------------------
ATTN_STAGES = ("q", "k", "v", "q_rot", "k_rot", "scores", "scaled", "capped", "masked",
               "pattern", "context", "concat", "out")


def attn_stages(cfg: ModelConfig) -> list[str]:
    """The stages this config's attention has: q_rot and k_rot with rotary positions,
    capped with soft-capped scores."""
    return [s for s in ATTN_STAGES
            if (not s.endswith("_rot") or cfg.positional == "rope")
            and (s != "capped" or cfg.attn_softcap is not None)]


def attn_scale(cfg: ModelConfig) -> float:
    """What the scores are divided by: sqrt(head_dim), or Gemma's sqrt(query_pre_attn_scalar)."""
    return (cfg.attn_scalar or cfg.head_dim) ** 0.5


def check_show(show: Iterable[str] | None, valid: Iterable[str]) -> list[str]:
    valid = list(valid)
    show = [s for s in (show or []) if s]
    bad = [s for s in show if s not in valid]
    if bad:
        raise SelectError(f"--show {bad[0]!r} is not a stage; valid: {', '.join(valid)}")
    return show


def _layer_input(loaded: Loaded, ids: list[int], layer: int, seq: Seq) -> torch.Tensor:
    """The residual stream entering block `layer` (1, T, C) of the shown stack, from one
    forward pass."""
    p = seq.prefix
    name = p + "embed.out" if layer == 0 else f"{p}blocks.{layer - 1}.resid_out"
    tr = run(loaded, ids, [name], stop_after=layer - 1, validate=False, seq=seq)
    return tr.raw(name)[None]


def _cross_attention(loaded: Loaded, ids: list[int], kv_ids: list[int], layer: int,
                     keep: torch.Tensor | None, select: list[str], seq: Seq) -> Trace:
    """Layer `layer`'s attention with queries from one text and keys/values from another
    (attend --kv: a one-off cross-attention through a self-attention layer): each text
    runs up to the attention's input, then the layer's own Attention is called with
    kv_x."""
    model, cfg = loaded.model, loaded.cfg
    block = seq.module.blocks[layer]
    x_q, x_kv = _layer_input(loaded, ids, layer, seq), _layer_input(loaded, kv_ids, layer, seq)
    kw = {}
    if cfg.positional == "rope":  # each text rotated by its own positions
        local = block.attn.window is not None and cfg.rope_local_theta is not None
        kw = {"rot": model.rope_for(torch.arange(len(ids)), local=local),
              "k_rot": model.rope_for(torch.arange(len(kv_ids)), local=local)}
    with model.record(select) as tr, torch.inference_mode(), \
            model.holding(f"{seq.prefix}blocks.{layer}"):
        if cfg.norm_position == "pre":  # pre-LN: attention reads the normalised stream
            x_q, x_kv = block.ln1(x_q), block.ln1(x_kv)
        block.attn(x_q, keep, kv_x=x_kv, **kw)
    return tr


def kv_groups(cfg: ModelConfig) -> dict[int, list[int]]:
    """Which query heads read each key/value head (grouped-query attention)."""
    group = cfg.n_heads // cfg.n_kv_heads
    return {g: list(range(g * group, (g + 1) * group)) for g in range(cfg.n_kv_heads)}


def one_head(tr: Trace, head: int) -> Trace:
    """Keep only head `head` of every (H, ...) tensor; the H axis stays, now of size 1."""
    out = Trace()
    for name in tr.names():
        value = tr.raw(name)
        if tr.dims(name)[0] == "H":
            value = value[head:head + 1]
        out.add(name, value, tr.dims(name))
    return out


def attend(loaded: Loaded, text: str, *, layer: int = 0, head: int | None = None,
           mask: str | None = None, kv: str | None = None, valid_lens: int | None = None,
           explain: bool = False, query_pos: int | None = None,
           show: Iterable[str] | None = None, truncate: bool = False,
           target: str | None = None, stack: str | None = None,
           cross: bool = False) -> AttendResult:
    """One layer's attention: q, k, v, QKᵀ, ÷√d_k, mask, softmax, ·V, concat, W_O.

    Only blocks 0..layer run and only block `layer`'s attention is recorded. An
    encoder–decoder shows its encoder's layer, or with --target the decoder's masked
    self-attention (--cross: its cross-attention, decoder queries against the encoder's
    output); --valid-lens then pads the source.
    """
    from ..errors import UsageError

    cfg, model = loaded.cfg, loaded.model
    seq = read_seq(loaded, target=target, stack=stack, cross=cross)
    check_range("layer", layer, seq.n_layers, "--layer")
    check_range("head", head, cfg.n_heads, "--head")
    stages = attn_stages(cfg)
    if cross:
        stages = [s_ for s_ in stages if not s_.endswith("_rot")]
    show = check_show(show, stages)
    ids = encode(loaded, text, truncate=truncate)
    kv_ids = encode(loaded, kv, truncate=truncate) if kv is not None else None
    if kv_ids is not None and seq.stack == "decoder":
        raise UsageError("--kv makes a one-off cross-attention from a self-attention layer; "
                         "the decoder has its own: use --cross instead of --kv")
    decoder = seq.stack == "decoder"
    T = len(seq.target) if decoder else len(ids)
    S = len(kv_ids) if kv_ids is not None else len(ids) if cross else T
    if cross and mask == "causal":
        raise UsageError("--mask causal does not apply to cross-attention: every target "
                         "word may read the whole source; drop --mask")
    if mask is None:  # cross-attention reads the whole other text (seed 001's decoder)
        causal = (cfg.causal or decoder) and kv_ids is None and not cross
    else:
        causal = mask == "causal"
    if (kv_ids is not None or cross) and causal and T != S:
        raise RangeError(f"a causal mask needs as many queries as keys, but there are {T} "
                         f"queries and {S} keys; pass --mask none for cross-attention")
    source_padding = cfg.is_encoder_decoder and seq.target is not None
    if valid_lens is not None:
        keys = len(ids) if source_padding else S
        if not 1 <= valid_lens <= keys:
            what = "the source has" if source_padding else "the keys have"
            raise RangeError(f"--valid-lens {valid_lens} is out of range: {what} {keys} "
                             f"tokens (1 to {keys})")
    if explain:
        query_pos = T - 1 if query_pos is None else query_pos
        check_range("query position", query_pos, T, "--query-pos")
    elif query_pos is not None:
        raise RangeError("--query-pos only applies with --explain")
    # (T, S) or None: no mask. With a target, --valid-lens pads the source: the encoder's
    # keys and the cross-attention's; the decoder's own mask stays causal.
    keep = model.mask(T, S, causal=causal,
                      valid_len=valid_lens if not source_padding or cross else None)
    # record what is shown (all by default: one layer, so memory stays bounded)
    wanted = stages if not show or explain else show
    where = f"{seq.prefix}blocks.{layer}." + ("cross." if cross else "attn.")
    select = [where + s_ for s_ in wanted]
    extra = {"source_len": valid_lens} if source_padding else {}
    if kv_ids is not None:
        tr = _cross_attention(loaded, ids, kv_ids, layer, keep, select, seq)
    else:
        tr = run(loaded, ids, select, keep=keep if not cross else "auto", stop_after=layer,
                 validate=False, seq=seq, **extra)
    if head is not None:
        tr = one_head(tr, head)
    source = seq_info(loaded, text, ids, seq)
    if kv_ids is not None:
        source.kv = input_info(loaded, kv, kv_ids)
    explained = None
    module = seq.module.blocks[layer].cross if cross else seq.module.blocks[layer].attn
    window = module.window if kv_ids is None else None
    seen = keep  # what the layer's queries see: the mask, narrowed to a sliding window
    if window is not None:
        inside = module.window_keep(T, S, 0, device=model.device)
        seen = inside if keep is None else keep & inside
    if explain:
        h = head if head is not None else 0
        local = 0 if head is not None else h  # index into the (possibly sliced) H axis
        rot = "_rot" if cfg.positional == "rope" and not cross else ""
        q_tokens = source.target.tokens if decoder else source.tokens
        k_tokens = source.kv.tokens if source.kv is not None else \
            source.tokens if cross else q_tokens
        explained = explain_row(
            tr.array(where + "q" + rot)[local], tr.array(where + "k" + rot)[local],
            tr.array(where + "v")[local], None if seen is None else seen.cpu().numpy(),
            query_pos, attn_scale(cfg), tr.array(where + "pattern")[local],
            head=h, tokens=q_tokens, kv_tokens=k_tokens,
            scale_label="sqrt(d_k)" if cfg.attn_scalar is None else
            f"sqrt({cfg.attn_scalar:g})", softcap=cfg.attn_softcap)
        if show:
            tr = tr.subset([where + s_ for s_ in show if where + s_ in tr])
    return AttendResult(
        model=loaded.info, input=source, tensors=tr, stack=seq.stack, layer=layer,
        heads=[head] if head is not None else list(range(cfg.n_heads)),
        n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
        scale=attn_scale(cfg),
        mask=("causal" if causal else "none") + (f" + window {window}" if window else ""),
        valid_lens=valid_lens, cross_attention=kv is not None or cross,
        shown=show or ["pattern"], show_given=bool(show),
        kv_groups=kv_groups(cfg) if cfg.n_kv_heads != cfg.n_heads else None,
        explain=explained)


def explain_row(q, k, v, keep, i: int, scale: float, pattern, *, head: int,
                tokens: list | None = None, kv_tokens: list | None = None,
                scale_label: str = "sqrt(d_k)", softcap: float | None = None) -> ExplainRow:
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
    capped = scaled if softcap is None else softcap * np.tanh(scaled / softcap)
    top = capped[visible].max()
    exps = np.where(visible, np.exp(np.where(visible, capped, top) - top), 0.0)
    total = exps.sum()
    weights = exps / total
    weighted = weights[:, None] * v  # (S, Dv)
    context = weighted.sum(axis=0)
    keys = [ExplainKey(pos=j, token=kv_tokens[j] if kv_tokens else None, k=k[j].tolist(),
                       dot=float(dots[j]), scaled=float(scaled[j]),
                       capped=None if softcap is None else float(capped[j]),
                       visible=bool(visible[j]),
                       exp=float(exps[j]), weight=float(weights[j]), v=v[j].tolist(),
                       weighted_v=weighted[j].tolist())
            for j in range(k.shape[0])]
    model_row = np.asarray(pattern, dtype=np.float64)[i]
    return ExplainRow(head=head, query_pos=i, query_token=tokens[i] if tokens else None,
                      d_k=int(q.shape[-1]), scale=float(scale), scale_label=scale_label,
                      q=q[i].tolist(), softcap=softcap, max_scaled=float(top),
                      sum_exp=float(total),
                      keys=keys, context=context.tolist(),
                      max_abs_diff_vs_pattern=float(np.abs(model_row - weights).max()))


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
    seq = read_seq(loaded, target=target, stack=stack)
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
    from .weights import part_of

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


def ffn(loaded: Loaded, text: str, *, layer: int = 0, truncate: bool = False,
        target: str | None = None, stack: str | None = None) -> FFNResult:
    """One feed-forward sublayer: hidden pre-activation (T, F), activation, output (T, C)."""
    cfg = loaded.cfg
    seq = read_seq(loaded, target=target, stack=stack)
    check_range("layer", layer, seq.n_layers, "--layer")
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


# -- report ---------------------------------------------------------------------------
def report_layers(value: str | None, n_layers: int) -> list[int]:
    """'0,1,5' / '2-4' / 'all' (None) -> sorted layer indices, each checked."""
    from ..errors import UsageError

    if value is None or value.strip().lower() == "all":
        return list(range(n_layers))
    layers: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        try:
            if "-" in part.lstrip("-"):
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                chosen = range(lo, hi + 1)
            else:
                chosen = [int(part)]
        except ValueError:
            raise UsageError(f"--show-layers {value!r}: expected layer numbers like "
                             "'0,1,5', a range like '0-3', or 'all'") from None
        for layer in chosen:
            check_range("layer", layer, n_layers, "--show-layers")
            layers.add(layer)
    return sorted(layers)


def norm_stats(tr: Trace, rms: bool) -> list[NormStats]:
    """Every recorded norm's statistics, from its own mean and var taps, in forward order."""
    out = []
    for name in tr.names():
        if name.endswith(".var") and tr.dims(name) == ("T",):
            prefix = name[:-len(".var")]
            mean = None if rms or prefix + ".mean" not in tr else \
                tr.array(prefix + ".mean").astype(float).tolist()
            out.append(NormStats(prefix, mean, tr.array(name).astype(float).tolist()))
    return out


def top_k_per_position(logits: torch.Tensor, k: int, pieces) -> list[list[Candidate]]:
    """The k most likely next tokens after every position, softmax in float64."""
    probs = torch.softmax(logits.to("cpu", torch.float64), dim=-1)  # (T, V)
    top = torch.topk(probs, min(k, probs.shape[-1]), dim=-1)
    rows = []
    for values, indices, row in zip(top.values.tolist(), top.indices.tolist(), logits):
        rows.append([Candidate(id=i, token=piece, prob=p, logit=float(row[i]))
                     for i, p, piece in zip(indices, values, pieces(indices))])
    return rows


def report(loaded: Loaded, text: str, *, layers: list[int] | None = None, top_k: int = 5,
           truncate: bool = False, output: str | None = None,
           target: str | None = None) -> ReportResult:
    """What the HTML page shows, from one forward pass: each shown layer's attention
    pattern, the mean and variance entering every norm (lazy taps: the norms keep their
    fused kernel, so the patterns are bit for bit what `tfx trace` records), and the
    next-token top-k after every position (causal models with an output head)."""
    cfg = loaded.cfg
    ids = encode(loaded, text, truncate=truncate)
    seq = read_seq(loaded, target=target)
    layers = list(range(seq.n_layers)) if layers is None else layers
    p = seq.prefix
    select = [f"{p}blocks.{layer}.attn.pattern" for layer in layers]
    if seq.stack == "decoder":  # and what each target word read of the source
        select += [f"{p}blocks.{layer}.cross.pattern" for layer in layers]
    # the norms of the residual stream (not the per-head q/k norms): ln1, ln2, the
    # sandwich norms, ln_f and BERT's embedding norm
    select += [f"{p}{where}.{stat}" for where in ("embed.ln", "blocks.*.ln*", "ln_f")
               for stat in ("mean", "var")]
    predicts = (cfg.causal or seq.stack == "decoder") and cfg.lm_head and top_k > 0
    if predicts:
        select.append("logits")
    tr = run(loaded, ids, select, validate=False, seq=seq)
    rms = cfg.norm == "rmsnorm"
    next_tokens = top_k_per_position(tr.raw("logits"), top_k, loaded.tokenizer.pieces) \
        if predicts else []
    shown = tr.subset([n for n in tr.names() if n != "logits"])
    return ReportResult(model=loaded.info, input=seq_info(loaded, text, ids, seq),
                        stack=seq.stack,
                        tensors=shown, layers=layers, n_heads=cfg.n_heads, norm=cfg.norm,
                        norms=norm_stats(tr, rms), top_k=top_k if predicts else 0,
                        next_tokens=next_tokens, output=output)


# -- count-params --verify ------------------------------------------------------------
def verify_params(cfg: ModelConfig, analytic_total: int) -> ParamCheck:
    """Build the model on torch's meta device (every shape, no storage) and compare its
    parameters with the analytic count, name by name.

    The meta device makes even gpt2-xl instant and free: parameter counts depend on
    shapes only, and the modules are built by the same code as real ones.
    """
    from .params import count_params

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


__all__ = ["Loaded", "load", "encode", "run", "input_info", "model_info", "check_range",
           "trace", "embed", "posenc", "attend", "explain_row", "layernorm", "ffn",
           "report", "report_layers", "verify_params", "kv_groups", "check_show",
           "ATTN_STAGES", "NORM_CHOICES"]
