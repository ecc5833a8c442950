"""Direct logit attribution (`tfx attribute`): the final residual stream split into its
parts (the embedding, every attention output or head, every FFN output), each carried
through the final norm with its scale frozen and projected onto the unembedding's
answer - wrong direction; the parts sum to the logit difference.

An encoder–decoder's answer is the decoder's: its last stream is the decoder's embedding
plus every decoder layer's self-attention, cross-attention and FFN outputs. The encoder
writes nothing into that stream itself: it reaches it through the cross-attention parts
(what each layer reads from the source), so their sum is the source's direct share."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import torch

from ...errors import InputTextError, UsageError
from ..config import ModelConfig
from ..config_moe import ffn_out_name
from ..results import AttributeResult, Part
from ..model import finite
from ..trace import Trace
from .common import encode, read_seq, seq_info
from .fillmask import need_causal
from .generate import check_vocab, need_head
from .sites import one_token


# -- direct logit attribution ------------------------------------------------------------
def _frozen_norm(vectors: torch.Tensor, norm, scale: float) -> torch.Tensor:
    """Each row of `vectors` (N, C) through a norm whose scale is frozen at `scale` (the
    real run's sqrt(var + eps), or sqrt(mean square + eps)): LayerNorm centres each part
    (a linear map) and divides; RMSNorm only divides. Then times the learned γ. The
    shift β is not a part's: the caller adds it once, as its own part."""
    if norm.kind != "rmsnorm":
        vectors = vectors - vectors.mean(dim=-1, keepdim=True)
    return vectors / scale * _host(norm.gain)


def _host(t: torch.Tensor) -> torch.Tensor:
    """A weight as attribution computes with it: float64 on the CPU (a copy, so it stays
    when a streamed model lets the weight go)."""
    return t.to("cpu", torch.float64)


def _norm_scale(tr: Trace, prefix: str, eps: float) -> float:
    """The real run's divisor at the last position, from the norm's own var tap."""
    return float((tr.raw(prefix + ".var")[-1].double() + eps).sqrt())


@dataclass
class Attribution:
    """The parts of the logit difference: names in forward order, the remainder last."""

    names: list[str]
    values: list[float]
    logit_diff: float  # the model's own, from its logits


@dataclass
class _Layout:
    """Where one stack's parts are read: its prefix, the taps of its embeddings, the
    sublayers of a block and the norm after each, how the norms sit."""

    cfg: ModelConfig
    stack: torch.nn.Module  # the model (one stack) or its decoder
    p: str  # "" or "decoder."
    seq2seq: bool
    per_head: bool
    embeds: list[str]
    out: str  # the logits tap the parts sum to
    post: bool
    sandwich: bool
    sublayers: tuple[str, ...]
    norms: tuple[str, ...]

    def ffn_name(self, i: int) -> str:  # an MoE layer's output is blocks.{i}.moe.out
        return f"{self.p}blocks.{i}.ffn.out" if self.seq2seq else ffn_out_name(self.cfg, i)

    def tap_names(self, sae) -> list[str]:
        """Every tap the parts are read from, the norms' var taps included."""
        cfg, p = self.cfg, self.p
        names = list(self.embeds) + [self.out] + ([p + "embed.ln.var"] if cfg.embed_norm
                                                  else [])
        for i in range(len(self.stack.blocks)):
            for sub in self.sublayers:
                names.append(self.ffn_name(i) if sub == "ffn" else f"{p}blocks.{i}.{sub}."
                             + ("context" if self.per_head else "out"))
            if self.post:
                names += [f"{p}blocks.{i}.{norm}.var" for norm in self.norms]
            if self.sandwich:
                names += [f"blocks.{i}.ln_post_attn.var", f"blocks.{i}.ln_post_ffn.var"]
        if self.stack.ln_f is not None:
            names.append(p + "ln_f.var")
        if sae is not None:
            names += [sae.site, sae.site_out]
        return names


def _layout(model, seq2seq: bool, per_head: bool) -> _Layout:
    cfg = model.cfg
    stack, p = (model.decoder, "decoder.") if seq2seq else (model, "")
    return _Layout(
        cfg=cfg, stack=stack, p=p, seq2seq=seq2seq, per_head=per_head,
        embeds=[p + n for n in ("embed.tok", "embed.pos", "embed.token_type")
                if p + n in model.taps],
        # soft-capped logits (Gemma 2) are not linear in the stream: the parts sum to the
        # logits before the cap
        out="logits_uncapped" if "logits_uncapped" in model.taps else "logits",
        post=cfg.norm_position == "post", sandwich=cfg.sandwich_norm,
        sublayers=("attn", "cross", "ffn") if seq2seq else ("attn", "ffn"),
        norms=("ln1", "ln2", "ln3") if seq2seq else ("ln1", "ln2"))


def _direction(model, answer: int, wrong: int | None) -> tuple[torch.Tensor, float]:
    """W_U[answer] - W_U[wrong] as the stream is read (T5: × d_model^-0.5), and the fixed
    logits bias's share of the difference (Marian, BART)."""
    cfg = model.cfg
    # a streamed model reads each part's weights again while they are used here
    with model.holding("head"):
        direction = _host(model.lm_head.weight[answer])
        if wrong is not None:
            direction = direction - _host(model.lm_head.weight[wrong])
        if cfg.unembed_scale:  # T5: the head reads the stream × d_model^-0.5
            direction = direction * cfg.d_model ** -0.5
        fixed = 0.0  # Marian, BART: a bias on the logits, the same whatever the stream
        if cfg.logits_bias:
            bias = _host(model.final_logits_bias)
            fixed = float(bias[answer] - (bias[wrong] if wrong is not None else 0.0))
    return direction, fixed


class _Parts:
    """The last position's stream built part by part in forward order: each part's
    vector (float64, on the CPU) carried through the frozen norms it passes, and the
    remainder (biases and shifts) beside them."""

    def __init__(self, model, layout: _Layout, tr: Trace, sae) -> None:
        self.model, self.layout, self.tr, self.sae = model, layout, tr, sae
        self.labels: list[str] = []
        self.vectors: list[torch.Tensor] = []  # each part at the last position, (C,)
        self.rest = torch.zeros(model.cfg.d_model, dtype=torch.float64)  # biases, shifts
        self.features = None  # the SAE's parts of its site, at the last position
        if sae is not None:
            from .features import feature_parts, site_values

            x_in, x_out = site_values(sae, tr)
            self.features = feature_parts(sae, x_in[-1], x_out[-1])

    def add(self, label: str, vector: torch.Tensor) -> None:
        self.labels.append(label)
        self.vectors.append(_host(vector))

    def through(self, norm, prefix: str, since: int = 0) -> None:
        """Carry the parts from index `since` on, and the remainder, through a frozen
        norm (since > 0: a sandwich norm, which sees only its own sublayer's parts)."""
        scale = _norm_scale(self.tr, prefix, norm.eps)
        stacked = _frozen_norm(torch.stack(self.vectors[since:] + [self.rest]), norm, scale)
        self.vectors[since:] = list(stacked[:-1])
        self.rest = stacked[-1] + (_host(norm.shift) if norm.shift is not None else 0.0)

    def embeddings(self) -> None:
        """The embedding's terms (Gemma's token rows scaled), through an embedding norm."""
        cfg, p = self.model.cfg, self.layout.p
        for name in self.layout.embeds:
            vector = self.tr.raw(name)[-1].double()
            if name == p + "embed.tok" and cfg.embed_scale:
                vector = vector * math.sqrt(cfg.d_model)  # Gemma scales the token rows only
            self.add(name, vector)
        if cfg.embed_norm:
            with self.model.holding(p + "embed"):
                self.through(self.layout.stack.embed.ln, p + "embed.ln")
        self.stream_is("embed.out")

    def attention(self, i: int, sub: str, attn) -> None:
        """A self- or cross-attention's output at the last position, or its heads'
        (context × the head's slice of W_O; the output bias joins the remainder)."""
        where = f"{self.layout.p}blocks.{i}.{sub}"
        if not self.layout.per_head:
            self.sublayer(f"{where}.out", self.tr.raw(f"{where}.out")[-1], attn.out_proj)
            return
        context = _host(self.tr.raw(f"{where}.context")[:, -1])  # (H, D)
        W_O = _host(attn.out_proj.weight)  # (C, H·D)
        D = self.model.cfg.v_dim  # a value head's width (latent attention's differs)
        for h in range(self.model.cfg.n_heads):
            self.add(f"{where}.out:h={h}", W_O[:, h * D:(h + 1) * D] @ context[h])
        if attn.out_proj.bias is not None:
            self.rest = self.rest + _host(attn.out_proj.bias)

    def stream_is(self, name: str) -> None:
        """At the point where the stream is `name`'s value: an SAE of it replaces
        every part so far (and the remainder) by its own parts."""
        if self.sae is not None and self.sae.site_out == name:
            self.labels.clear()
            self.vectors.clear()
            self.rest = torch.zeros_like(self.rest)
            for label, vector in self.features:
                self.add(label, vector)

    def sublayer(self, name: str, value, out_proj=None) -> None:
        """A sublayer's output part, or the SAE's parts of it (through W_O for an SAE
        of attention's context, whose output bias joins the remainder)."""
        sae = self.sae
        if sae is None or sae.site_out not in (name, name.replace(".out", ".context")):
            self.add(name, value)
            return
        W = _host(out_proj.weight) if sae.site_out.endswith(".context") else None
        for label, vector in self.features:
            self.add(label, vector if W is None else W @ vector)
        if W is not None and out_proj.bias is not None:
            self.rest = self.rest + _host(out_proj.bias)

    def block(self, i: int, block) -> None:
        """Block i's attention (or its heads), cross-attention (a decoder's) and FFN
        outputs, through its norms."""
        lay = self.layout
        for sub, norm in zip(lay.sublayers, lay.norms):
            first, before = len(self.vectors), self.rest
            if lay.sandwich:
                self.rest = torch.zeros_like(self.rest)  # the sublayer's own bias, normed
            if sub == "ffn":
                self.sublayer(lay.ffn_name(i), self.tr.raw(lay.ffn_name(i))[-1])
            else:
                self.attention(i, sub, getattr(block, sub))
            if lay.sandwich:
                post_norm = "ln_post_ffn" if sub == "ffn" else "ln_post_attn"
                self.through(getattr(block, post_norm), f"blocks.{i}.{post_norm}",
                             since=first)
                self.rest = before + self.rest
            if lay.post:
                self.through(getattr(block, norm), f"{lay.p}blocks.{i}.{norm}")
            if not lay.seq2seq:
                self.stream_is(f"blocks.{i}.resid_out" if sub == "ffn"
                               else f"blocks.{i}.resid_mid")

    def build(self) -> None:
        """Every part, in forward order, through the final norm."""
        self.embeddings()
        for i, block in enumerate(self.layout.stack.blocks):
            with self.model.holding(f"{self.layout.p}blocks.{i}"):
                self.block(i, block)
        if self.layout.stack.ln_f is not None:
            with self.model.holding("head"):
                self.through(self.layout.stack.ln_f, self.layout.p + "ln_f")


def logit_attribution(model, ids: Sequence[int], answer: int, wrong: int | None = None, *,
                      per_head: bool = False, target: Sequence[int] | None = None,
                      sae=None) -> Attribution:
    """Direct logit attribution of logit(answer) [- logit(wrong)] at the last position.

    Pre-LN (GPT, Llama): the final residual is the embedding's terms plus every layer's
    attention and FFN outputs (per head with `per_head`: the head's context times its
    slice of W_O; the output bias then joins the remainder). Each part goes through ln_f
    with the real run's scale frozen (LayerNorm: centred, ÷ the scale, × γ; RMSNorm: ÷ the
    scale, × γ) and onto W_U[answer] − W_U[wrong]; the remainder is ln_f's shift β (and the
    biases set aside). The parts sum to the logit difference.

    Post-LN (toy, vaswani): there is no ln_f, and each block's two LayerNorms rescale
    everything written before them. The same freezing applied to every norm the part
    passes makes each part its vector carried through all later norms (each centres it,
    divides by its own frozen scale and multiplies by γ); each norm's shift β, carried
    through the norms after it, joins the remainder. The sum is again exact. A norm of the
    embedding sum (BERT) is one more such norm.

    Encoder–decoder (`target`: the decoder's ids, start token first): the decoder's last
    position, its blocks' three sublayers each a part (post-LN: each through its own norm
    and every later one), a T5 head's d_model^-0.5 folded into the direction and a fixed
    logits bias (Marian, BART) in the remainder.
    """
    seq2seq = target is not None
    layout = _layout(model, seq2seq, per_head)
    if sae is not None:
        if seq2seq:
            raise UsageError("tfx attribute --sae reads a single-stack model's residual "
                             "stream; an encoder–decoder's SAE sites are not split yet: "
                             "drop --sae")
        check_sae_site(sae, per_head)
    with model.record(layout.tap_names(sae)) as tr, torch.inference_mode():
        if seq2seq:
            model(torch.tensor([list(ids)]), target=torch.tensor([list(target)]), head="last")
        else:
            model(torch.tensor([list(ids)]), head="last")
    logits = tr.raw(layout.out)[-1].double()  # (V,)
    direction, fixed = _direction(model, answer, wrong)
    logit_diff = float(logits[answer] - (logits[wrong] if wrong is not None else 0.0))
    parts = _Parts(model, layout, tr, sae)
    parts.build()
    values = [float(v @ direction) for v in parts.vectors] + \
        [float(parts.rest @ direction) + fixed]
    return Attribution(parts.labels + ["remainder"], values, logit_diff)


# the sites whose value attribution can split by feature: the residual stream at a
# block's boundaries, a sublayer's output, attention's context (through W_O)
SAE_SITES = re.compile(r"^(embed\.out|blocks\.\d+\.(resid_mid|resid_out|attn\.out|ffn\.out|"
                       r"attn\.context))$")


def check_sae_site(sae, per_head: bool) -> None:
    if not SAE_SITES.match(sae.site_out):
        raise UsageError(f"tfx attribute --sae splits the residual stream (resid_pre, "
                         f"resid_mid, resid_out), a sublayer's output (attn.out, ffn.out) or "
                         f"attention's context by feature; the SAE's site {sae.site_out} is "
                         "none of them")
    if per_head and sae.site_out.endswith((".attn.context", ".attn.out")):
        raise UsageError("--per-head splits attention by head and --sae splits it by "
                         "feature; choose one")


def attribute(loaded, text: str, *, answer: str, wrong: str | None = None,
              per_head: bool = False, truncate: bool = False,
              target: str | None = None, sae=None) -> AttributeResult:
    """`tfx attribute`: logit_attribution of TEXT's last position (an encoder–decoder's:
    the decoder's last position, after `target`), as a result; with `sae` (a
    core.features SAE) its site's share split by feature."""
    cfg, model = loaded.cfg, loaded.model
    need_head(cfg, "attribute")
    need_causal(cfg, "attribute")
    check_vocab(loaded)
    seq = read_seq(loaded, target=target)
    if cfg.is_encoder_decoder:
        seq = read_seq(loaded, target=target or "")  # the start token at least
    ids = encode(loaded, text, truncate=truncate)
    good = one_token(loaded, answer, "--answer")
    bad = one_token(loaded, wrong, "--wrong") if wrong is not None else None
    if bad is not None and bad.id == good.id:
        raise InputTextError(f"--answer and --wrong are the same token ({good.token!r}); "
                             "every part would be 0")
    found = logit_attribution(model, ids, good.id, None if bad is None else bad.id,
                              per_head=per_head, target=seq.target, sae=sae)
    for name, value in zip(found.names, found.values):
        finite.require(model, value, f"the attribution part {name}")
    finite.require(model, found.logit_diff, "the logit difference")
    parts = [Part(name, value) for name, value in zip(found.names, found.values)]
    total = sum(found.values)
    post = cfg.norm_position == "post"
    tokens = f"W_U[{good.token!r}]" + (f" - W_U[{bad.token!r}]" if bad is not None else "")
    if "logits_uncapped" in model.taps:  # tanh is not linear: the parts are of the logits
        tokens += " (the logits before the final soft cap)"
    if post:
        norm_text = ("post-LN: each part carried through every later block norm, each with "
                     "its scale frozen at the real run's value (centred, ÷ scale, × γ)")
    elif cfg.norm == "rmsnorm":
        norm_text = "ln_f (RMSNorm) with its scale frozen: part ÷ sqrt(mean square + eps) × γ"
    else:
        norm_text = ("ln_f (LayerNorm) with its scale frozen: (part - its mean) ÷ "
                     "sqrt(var + eps) × γ")
    stack = model.decoder if seq.target is not None else model
    if cfg.unembed_scale:  # T5's tied head reads the stream scaled down
        tokens = f"({tokens}) × d_model^-0.5"
    held = []
    if any(n.shift is not None for n in _norms(stack, post)):
        held.append("the norms' shifts β" if post else "ln_f's shift β")
    attentions = [a for b in stack.blocks for a in (b.attn, getattr(b, "cross", None)) if a]
    if per_head and any(a.out_proj.bias is not None for a in attentions):
        held.append("the attention output biases" + (" carried through the later norms"
                                                     if post else ""))
    if cfg.logits_bias:
        held.append("the fixed logits bias (final_logits_bias)")
    cross = [part.value for part in parts if ".cross." in part.name]
    return AttributeResult(
        model=loaded.info, input=seq_info(loaded, text, ids, seq), answer=good,
        wrong=bad, position=len(seq.target or ids) - 1, direction=tokens,
        logit_diff=found.logit_diff, parts=parts, sum_of_parts=total,
        unexplained=found.logit_diff - total, per_head=per_head, norm=norm_text,
        remainder=", ".join(held) if held else "nothing (no biases or shifts)",
        through_cross=sum(cross) if seq.target is not None else None,
        sae=None if sae is None else _sae_info(sae))


def _sae_info(sae):
    from .features import sae_info

    return sae_info(sae)


def _norms(stack, post: bool) -> list:
    """The norms whose shifts join the remainder: every block norm post-LN (a decoder
    block's three), else the stack's final norm."""
    if post:
        return [n for b in stack.blocks for n in (b.ln1, b.ln2, getattr(b, "ln3", None)) if n]
    return [stack.ln_f] if stack.ln_f is not None else []


__all__ = ["attribute", "logit_attribution", "Attribution"]
