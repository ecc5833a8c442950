"""One layer's attention, stage by stage: q, k, v, QKᵀ, ÷√d_k, mask, softmax, ·V, concat,
W_O; and one query's arithmetic number by number (--explain)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch

from ...errors import RangeError, SelectError, UsageError
from ..config import ModelConfig
from ..load import Loaded
from ..results import AttendResult, ExplainKey, ExplainRow
from ..trace import Trace
from .common import Seq, check_range, encode, input_info, read_seq, run, seq_info


# -- attend -------------------------------------------------------------------------
ATTN_STAGES = ("q", "k", "v", "q_rot", "k_rot", "scores", "scaled", "capped",
               "position_bias", "masked", "pattern", "sink", "context", "concat", "out")


def attn_stages(cfg: ModelConfig) -> list[str]:
    """The stages this config's attention has: q_rot and k_rot with rotary positions,
    capped with soft-capped scores, position_bias with T5's relative positions."""
    return [s for s in ATTN_STAGES
            if (not s.endswith("_rot") or cfg.positional == "rope")
            and (s != "capped" or cfg.attn_softcap is not None)
            and (s != "position_bias" or cfg.positional == "relative")
            and (s != "sink" or cfg.attn_sinks)]  # gpt-oss: each row's share of the sink


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
    if cfg.positional == "relative" and not cfg.relative_per_layer:
        # T5: each text at its own positions from 0, as a self-attention would see them
        with model.holding(f"{seq.prefix}embed"):
            kw = {"position_bias": seq.module.embed.position_bias(len(ids), len(kv_ids))}
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


@dataclass
class _Texts:
    """What attend's layer reads: the text's ids (and --kv's), T queries against S keys,
    the mask asked for, and whether --valid-lens pads an encoder–decoder's source."""

    ids: list[int]
    kv_ids: list[int] | None
    T: int
    S: int
    causal: bool
    source_padding: bool


def _texts(loaded: Loaded, seq: Seq, text: str, kv: str | None, mask: str | None,
           cross: bool, truncate: bool) -> _Texts:
    """The ids of TEXT and --kv, their counts of queries and keys, and the mask: each
    combination that cannot be one attention refused."""
    cfg = loaded.cfg
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
    return _Texts(ids, kv_ids, T, S, causal,
                  source_padding=cfg.is_encoder_decoder and seq.target is not None)


def _check_valid_lens(valid_lens: int | None, texts: _Texts) -> None:
    if valid_lens is not None:
        keys = len(texts.ids) if texts.source_padding else texts.S
        if not 1 <= valid_lens <= keys:
            what = "the source has" if texts.source_padding else "the keys have"
            raise RangeError(f"--valid-lens {valid_lens} is out of range: {what} {keys} "
                             f"tokens (1 to {keys})")


def _query_pos(explain: bool, query_pos: int | None, T: int) -> int | None:
    """The query --explain takes apart (the last by default)."""
    if explain:
        query_pos = T - 1 if query_pos is None else query_pos
        check_range("query position", query_pos, T, "--query-pos")
    elif query_pos is not None:
        raise RangeError("--query-pos only applies with --explain")
    return query_pos


def _record_layer(loaded: Loaded, seq: Seq, texts: _Texts, layer: int, select: list[str],
                  valid_lens: int | None, cross: bool) -> tuple[Trace, torch.Tensor | None]:
    """Run up to the layer and record `select`; the trace and the (T, S) mask used."""
    # (T, S) or None: no mask. With a target, --valid-lens pads the source: the encoder's
    # keys and the cross-attention's; the decoder's own mask stays causal.
    keep = loaded.model.mask(texts.T, texts.S, causal=texts.causal,
                             valid_len=valid_lens if not texts.source_padding or cross
                             else None)
    extra = {"source_len": valid_lens} if texts.source_padding else {}
    if texts.kv_ids is not None:
        tr = _cross_attention(loaded, texts.ids, texts.kv_ids, layer, keep, select, seq)
    else:
        tr = run(loaded, texts.ids, select, keep=keep if not cross else "auto",
                 stop_after=layer, validate=False, seq=seq, **extra)
    return tr, keep


def _explain(cfg: ModelConfig, tr: Trace, where: str, head: int | None, seen, query_pos: int,
             source, decoder: bool, cross: bool, module) -> ExplainRow:
    """--explain: one query of one head (the first unless --head), number by number."""
    h = head if head is not None else 0
    local = 0 if head is not None else h  # index into the (possibly sliced) H axis
    rot = "_rot" if cfg.positional == "rope" and not cross else ""
    bias = where + "position_bias"
    q_tokens = source.target.tokens if decoder else source.tokens
    k_tokens = source.kv.tokens if source.kv is not None else \
        source.tokens if cross else q_tokens
    return explain_row(
        tr.array(where + "q" + rot)[local], tr.array(where + "k" + rot)[local],
        tr.array(where + "v")[local], None if seen is None else seen.cpu().numpy(),
        query_pos, attn_scale(cfg), tr.array(where + "pattern")[local],
        head=h, tokens=q_tokens, kv_tokens=k_tokens,
        scale_label="sqrt(d_k)" if cfg.attn_scalar is None else
        f"sqrt({cfg.attn_scalar:g})", softcap=cfg.attn_softcap,
        bias=tr.array(bias)[local][query_pos] if bias in tr else None,
        sink=_sink_logit(module, h) if cfg.attn_sinks and not cross else None)


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
    cfg, model = loaded.cfg, loaded.model
    seq = read_seq(loaded, truncate=truncate, target=target, stack=stack, cross=cross)
    check_range("layer", layer, seq.n_layers, "--layer")
    check_range("head", head, cfg.n_heads, "--head")
    stages = attn_stages(cfg)
    if cross:  # no rotation and no relative bias between the target and the source
        stages = [s_ for s_ in stages if not s_.endswith("_rot") and s_ != "position_bias"]
    show = check_show(show, stages)
    texts = _texts(loaded, seq, text, kv, mask, cross, truncate)
    _check_valid_lens(valid_lens, texts)
    query_pos = _query_pos(explain, query_pos, texts.T)
    # record what is shown (all by default: one layer, so memory stays bounded)
    wanted = stages if not show or explain else show
    where = f"{seq.prefix}blocks.{layer}." + ("cross." if cross else "attn.")
    tr, keep = _record_layer(loaded, seq, texts, layer, [where + s_ for s_ in wanted],
                             valid_lens, cross)
    if head is not None:
        tr = one_head(tr, head)
    source = seq_info(loaded, text, texts.ids, seq)
    if texts.kv_ids is not None:
        source.kv = input_info(loaded, kv, texts.kv_ids)
    explained = None
    module = seq.module.blocks[layer].cross if cross else seq.module.blocks[layer].attn
    window = module.window if texts.kv_ids is None else None
    seen = keep  # what the layer's queries see: the mask, narrowed to a sliding window
    if window is not None:
        inside = module.window_keep(texts.T, texts.S, 0, device=model.device)
        seen = inside if keep is None else keep & inside
    if explain:
        explained = _explain(cfg, tr, where, head, seen, query_pos, source,
                             seq.stack == "decoder", cross, module)
        if show:
            tr = tr.subset([where + s_ for s_ in show if where + s_ in tr])
    return AttendResult(
        model=loaded.info, input=source, tensors=tr, stack=seq.stack, layer=layer,
        heads=[head] if head is not None else list(range(cfg.n_heads)),
        n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
        scale=attn_scale(cfg),
        mask=("causal" if texts.causal else "none") + (f" + window {window}" if window else ""),
        valid_lens=valid_lens, cross_attention=kv is not None or cross,
        # gpt-oss: the pattern's rows sum to less than 1; the sink's share is the rest
        shown=show or (["pattern", "sink"] if cfg.attn_sinks and not cross else ["pattern"]),
        show_given=bool(show),
        kv_groups=kv_groups(cfg) if cfg.n_kv_heads != cfg.n_heads else None,
        explain=explained)


def _sink_logit(attn, head: int) -> float:
    return float(attn.sinks.detach()[head].float())


def explain_row(q, k, v, keep, i: int, scale: float, pattern, *, head: int,
                tokens: list | None = None, kv_tokens: list | None = None,
                scale_label: str = "sqrt(d_k)", softcap: float | None = None,
                bias=None, sink: float | None = None) -> ExplainRow:
    """Query position i of one head, number by number, in float64: each q·k_j, ÷ scale,
    (T5) + the relative position bias of key j, the mask, exp (less the row's largest
    visible score, which leaves the softmax unchanged), the sum, each weight × v_j and
    their sum. `pattern` is the recorded one, to show the hand arithmetic agrees with
    the model's. `bias`: query i's row of the head's position bias, (S,). `sink`
    (gpt-oss): the head's sink logit, one more term of the sum that takes its share and
    gives no value."""
    import numpy as np

    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    kv_tokens = kv_tokens if kv_tokens is not None else tokens
    visible = np.ones(k.shape[0], dtype=bool) if keep is None else np.asarray(keep[i], bool)
    dots = k @ q[i]  # (S,)
    scaled = dots / scale
    capped = scaled if softcap is None else softcap * np.tanh(scaled / softcap)
    bias = None if bias is None else np.asarray(bias, dtype=np.float64)
    scored = capped if bias is None else capped + bias  # T5: the bias, before the mask
    top = scored[visible].max() if sink is None else max(scored[visible].max(), sink)
    exps = np.where(visible, np.exp(np.where(visible, scored, top) - top), 0.0)
    sink_exp = 0.0 if sink is None else float(np.exp(sink - top))
    total = exps.sum() + sink_exp
    weights = exps / total
    weighted = weights[:, None] * v  # (S, Dv)
    context = weighted.sum(axis=0)
    keys = [ExplainKey(pos=j, token=kv_tokens[j] if kv_tokens else None, k=k[j].tolist(),
                       dot=float(dots[j]), scaled=float(scaled[j]),
                       capped=None if softcap is None else float(capped[j]),
                       bias=None if bias is None else float(bias[j]),
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
                      max_abs_diff_vs_pattern=float(np.abs(model_row - weights).max()),
                      sink=None if sink is None else sink,
                      sink_weight=None if sink is None else sink_exp / float(total))


__all__ = ["attend", "explain_row", "attn_stages", "attn_scale", "check_show", "kv_groups",
           "one_head", "ATTN_STAGES"]
