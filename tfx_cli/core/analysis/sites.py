"""Interventions: change an intermediate and see what the output does.

Every intermediate passes through a Tap (core/model/taps.py); a Tap's `edit` replaces the value
flowing through it, and what the rest of the model reads (and a trace records) is the
edited value. The interventions are decided here (sites, ablation, steering, the edits
of one command) and in patching.py and attribution.py:

- sites: a trace name, optionally narrowed to one head and/or one position
  (`blocks.3.attn.context:h=5`, `blocks.2.resid_out:p=4`), plus the pseudo-name
  `blocks.{i}.resid_pre`, block i's input (`embed.out` for block 0, else
  `blocks.{i-1}.resid_out`); an encoder–decoder's names carry their stack
  (`decoder.blocks.0.cross.pattern:h=1`, `encoder.blocks.2.resid_pre`), and ablation is
  the intervention it takes;
- ablation (--ablate): the site's value set to zero, or to its mean over the run's
  positions (--ablate-mode mean);
- steering (--steer): K × (activation(toward) − activation(away)) added at the site,
  aligned from the first position (activation addition);
- activation patching (`tfx patch`): CORRUPT's run with one cell of CLEAN's activations
  put in, for every layer and position (or head), batched;
- direct logit attribution (`tfx attribute`): the final residual stream split into its
  parts, each carried through the final norm with its scale frozen and projected onto
  the unembedding's answer − wrong direction.

"""
from __future__ import annotations

import re
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch

from ...errors import InputTextError, RangeError, SelectError, UsageError
from ...values import as_float, as_names, as_texts
from ...words import counted
from ..config import split_stack
from ..model import finite
from ..results import Intervention, TokenRef
from ..trace import summarise_names
from .common import Seq, encode, read_seq, run
from .sites_moe import (ROUTE_AROUND, check_experts_left, expert_site, moe_why_not,
                        route_around)


ABLATE_MODES = ("zero", "mean")

# Trace names that are recorded but that nothing downstream reads, and why.
_NOT_SITES = {
    "tokens.ids": "token ids are not activations; use embed.tok or embed.out",
    "logits": "it is the output itself, nothing runs after it",
    "logits_uncapped": "it is the output itself (before the soft cap), nothing runs after it",
    "mean": "a norm's statistic, recorded for display; the norm does not read it back "
            "(ablate its .in or .normed)",
    "var": "a norm's statistic, recorded for display; the norm does not read it back "
           "(ablate its .in or .normed)",
    "scores": "it is recomputed from q and k when read and nothing downstream reads it "
              "(use attn.pattern, attn.q or attn.k)",
    "scaled": "it is recomputed from q and k when read and nothing downstream reads it "
              "(use attn.pattern, attn.q or attn.k)",
    "masked": "it is recomputed from q and k when read and nothing downstream reads it "
              "(use attn.pattern, attn.q or attn.k)",
    "capped": "it is recomputed from q and k when read and nothing downstream reads it "
              "(use attn.pattern, attn.q or attn.k)",
}
_ROPE_K = ("this model records keys before their norm or rotation for display only; the "
           "keys that flow on are attn.k_rot (or attn.k_norm.out without rotation)")
_SHARED_K_NORM = ("the key norm runs on the shared key/value heads and is recorded for every "
                  "query head, so an edit of one head's copy would be lost; use attn.k_rot")


# -- sites ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Site:
    """Where an edit goes: a tap, and optionally one head and/or one position of it."""

    spec: str  # as given, for messages and the JSON
    name: str  # the tap: blocks.{i}.resid_pre is blocks.{i-1}.resid_out (embed.out at 0)
    dims: tuple[str, ...]  # the tap's dims, without the batch
    head: int | None = None
    pos: int | None = None
    option: str = "--ablate"
    expert: int | None = None  # blocks.{i}.moe.expert:e=E: the expert routed around

    @property
    def read(self) -> str:
        """What the site's positions are positions of: the text, or in an
        encoder–decoder's decoder the target (or, for the cross-attention's keys and
        values, the source)."""
        if not self.name.startswith("decoder."):
            return "the text"
        if ".cross." in self.name and self.dims[self.pos_axis] == "S":
            return "the source text"
        return "the target (with its start token)"

    @property
    def pos_axis(self) -> int:
        """Index in dims of the position axis (T; S for keys and values)."""
        return next(i for i, d in enumerate(self.dims) if d in ("T", "S"))

    @property
    def layer(self) -> int | None:
        match = _BLOCK.match(self.name)
        return int(match.group(2)) if match else None

    @property
    def stack(self) -> str:
        """An encoder–decoder's stack the site is in ("encoder", "decoder"); "" for a
        single-stack model."""
        return split_stack(self.name)[0]

    def index(self, ndim: int, positions: slice | None = None) -> tuple:
        """Index into a (B, *dims) tensor: the site's head (kept as a length-1 axis) and
        `positions` of the position axis."""
        idx = [slice(None)] * ndim
        if self.head is not None:
            idx[1 + self.dims.index("H")] = slice(self.head, self.head + 1)
        if positions is not None:
            idx[1 + self.pos_axis] = positions
        return tuple(idx)

    def positions(self, T: int) -> slice:
        """The positions the site covers in a run of T positions (checked)."""
        if self.pos is None:
            return slice(None)
        if self.pos >= T:
            raise RangeError(f"{self.option} {self.spec!r}: position {self.pos} is out of range: "
                             f"{self.read} has {counted(T, 'token')} (0 to {T - 1})")
        return slice(self.pos, self.pos + 1)


# a block's name, after an encoder–decoder's stack prefix: (prefix, layer)
_BLOCK = re.compile(r"^((?:encoder|decoder)\.)?blocks\.(\d+)\.")


def resid_pre_name(layer: int, prefix: str = "") -> str:
    """The trace name holding block `layer`'s input (of the stack `prefix` names)."""
    return prefix + ("embed.out" if layer == 0 else f"blocks.{layer - 1}.resid_out")


def _why_not(name: str, cfg) -> str | None:
    name = split_stack(name)[1]  # an encoder–decoder's names carry their stack
    if name in _NOT_SITES:
        return _NOT_SITES[name]
    leaf = name.rsplit(".", 1)[-1]
    if leaf in _NOT_SITES:
        return _NOT_SITES[leaf]
    if name.endswith(".attn.k") and (cfg.positional == "rope" or cfg.qk_norm):
        return _ROPE_K
    if ".attn.k_norm." in name and cfg.n_kv_heads != cfg.n_heads:
        return _SHARED_K_NORM
    return moe_why_not(name)  # a mixture of experts' indices (sites_moe.py)


def site_names(model) -> list[str]:
    """Every name a site may use, in forward order: each editable trace name, and
    blocks.{i}.resid_pre before block i's own names."""
    out = []
    for name in model.taps:
        if _why_not(name, model.cfg) is not None:
            continue
        match = re.match(r"^((?:encoder|decoder)\.)?blocks\.(\d+)\.ln1\.in$", name)
        if match:
            out.append(f"{match.group(1) or ''}blocks.{match.group(2)}.resid_pre")
        out.append(name)
        if name.endswith(".moe.router_logits"):  # routing around an expert (sites_moe.py)
            out.append(name[:-len("router_logits")] + "expert")
    return out


_NARROW = re.compile(r"^(h|p)=(-?\d+)$")


def parse_site(model, spec: str, option: str = "--ablate") -> Site:
    """`name[:h=HEAD][:p=POS]` -> Site, checked against the model's names and sizes."""
    cfg = model.cfg
    spec = spec.strip()
    name, *narrowing = spec.split(":")
    # an expert routed around, or a router name on a dense model or layer (sites_moe.py)
    special = expert_site(model, spec, name, narrowing, option, Site)
    if special is not None:
        return special
    valid = site_names(model)
    summary = summarise_names(valid)
    if name not in valid:
        why = _why_not(name, cfg) if name in model.taps else None
        if why is not None:
            raise SelectError(f"{option} {spec!r}: {name} is recorded but is not a site: {why}")
        match = _BLOCK.match(name)

        def generic(n: str) -> str:
            return _BLOCK.sub(lambda m: f"{m.group(1) or ''}blocks.{{i}}.", n)

        if match and generic(name) in {generic(v) for v in valid}:
            stack = (match.group(1) or "").rstrip(".")
            n = cfg.n_decoder_layers if stack == "decoder" else cfg.n_layers
            which = f"the {stack} has" if stack else "this model has"
            raise RangeError(f"{option} {spec!r}: block {match.group(2)} is out of range: "
                             f"{which} {counted(n, 'layer')} (0 to {n - 1})")
        if any(ch in name for ch in "*?["):
            raise SelectError(f"{option} {spec!r} is a glob, and a site is one name (globs "
                              f"are for --select); list the sites, e.g. {option} "
                              "blocks.0.attn.out,blocks.1.attn.out")
        stacked = [f"{stack}.{name}" for stack in ("encoder", "decoder")
                   if f"{stack}.{name}" in valid]
        if cfg.is_encoder_decoder and stacked:
            raise SelectError(f"{option} {spec!r} is not a site: an encoder–decoder's names "
                              f"start with their stack; write {' or '.join(stacked)}")
        raise SelectError(f"{option} {spec!r} is not a site; valid sites: {summary} "
                          "(narrow one with :h=HEAD and :p=POSITION)")
    match = re.match(r"^((?:encoder|decoder)\.)?blocks\.(\d+)\.resid_pre$", name)
    tap_name = resid_pre_name(int(match.group(2)), match.group(1) or "") if match else name
    dims = tuple(model.taps[tap_name].dims)
    got: dict[str, int] = {}
    for part in narrowing:
        found = _NARROW.match(part.strip())
        if not found or found.group(1) in got:
            raise UsageError(f"{option} {spec!r}: {part!r} is not a narrowing; write :h=HEAD "
                             "and/or :p=POSITION once each, e.g. blocks.0.attn.context:h=1:p=2")
        got[found.group(1)] = int(found.group(2))
    head, pos = got.get("h"), got.get("p")
    if head is not None:
        if "H" not in dims:
            raise SelectError(f"{option} {spec!r}: {name} has no heads (dims "
                              f"{', '.join(dims)}); drop :h=, or narrow a per-head name such "
                              "as blocks.{i}.attn.context")
        if not 0 <= head < cfg.n_heads:
            raise RangeError(f"{option} {spec!r}: head {head} is out of range: this model has "
                             f"{counted(cfg.n_heads, 'head')} (0 to {cfg.n_heads - 1})")
    if pos is not None and pos < 0:
        raise RangeError(f"{option} {spec!r}: position {pos} is out of range: positions "
                         "count from 0")
    return Site(spec=spec, name=tap_name, dims=dims, head=head, pos=pos, option=option)


# -- installing edits ------------------------------------------------------------------
Edit = Callable[[torch.Tensor], torch.Tensor]


@contextmanager
def editing(model, edits: Iterable[tuple[str, Edit]]):
    """Put `edits` (tap name, function) on the model's taps for the block's duration;
    several on one tap apply in order, after any edit already there."""
    saved = {}
    for name, fn in edits:
        tap = model.taps[name]
        saved.setdefault(name, tap.edit)
        before = tap.edit
        tap.edit = fn if before is None else (lambda x, a=before, b=fn: b(a(x)))
    # The decoding fast path (decoding.step) runs without taps while nothing records;
    # an edit needs every tap to run, so it counts as recording.
    model.recording += 1
    try:
        yield
    finally:
        model.recording -= 1
        for name, edit in saved.items():
            model.taps[name].edit = edit


def ablation(site: Site, mode: str) -> Edit:
    """The site's value set to zero, or to its mean over the run's positions (per head
    when narrowed to one, per batch row)."""

    def edit(x: torch.Tensor) -> torch.Tensor:
        where = site.index(x.ndim, site.positions(x.shape[1 + site.pos_axis]))
        out = x.clone()
        if mode == "zero":
            out[where] = 0.0
        else:
            out[where] = x[site.index(x.ndim)].mean(dim=1 + site.pos_axis, keepdim=True)
        return out

    return edit


def steering(site: Site, vector: torch.Tensor, scale: float) -> Edit:
    """K × vector added at the site; vector (*dims) holds n positions, added to positions
    0..n-1 of the run (those it has), or to the site's one position."""
    n = vector.shape[site.pos_axis]

    def edit(x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1 + site.pos_axis]
        positions = site.positions(T) if site.pos is not None else slice(0, min(n, T))
        where = site.index(x.ndim, positions)
        out = x.clone()
        out[where] += scale * vector[where[1:]].to(x.dtype)
        return out

    return edit


# -- ablation and steering for a whole command -------------------------------------------
@dataclass
class Steer:
    """One --steer: K x (activation(toward) - activation(away)) added at a site."""

    site: Site
    toward: str
    away: str
    scale: float = 1.0


@dataclass
class Plan:
    """The interventions one command runs with, parsed and checked."""

    ablate: list[Site] = field(default_factory=list)
    mode: str = "zero"
    steers: list[Steer] = field(default_factory=list)
    # edits of other kinds of sites, made ready by their own module (feature_sites.py:
    # an SAE's features): (tap name, edit, Intervention, the site) each, installed after
    # the ablations; a None record is a helper edit (it reports nothing)
    extra: list = field(default_factory=list)
    features: object | None = None  # feature_sites.FeaturePlan: the SAEs and features

    def __bool__(self) -> bool:
        return bool(self.ablate) or bool(self.steers) or bool(self.extra)


STEER_PAIRING = ("each --steer takes the --toward, --away and --scale given in the same "
                 "place (the first with the first); one of them given once is shared by "
                 "every --steer")


def pair_steers(steer, toward=None, away=None, scale=None) -> list[tuple]:
    """--steer given n times -> n (site, toward, away, scale): --toward, --away and
    --scale are given once (shared) or n times (in order). Strings or lists, as the CLI
    and the API pass them."""
    sites = as_names(steer, "--steer") or []
    towards, aways = as_texts(toward, "--toward"), as_texts(away, "--away")
    scales = [as_float(k, "--scale", finite=True) for k in
              (scale if isinstance(scale, (list, tuple)) else [scale] if scale is not None
               else [])]
    if not sites:
        given = [o for o, v in (("--toward", towards), ("--away", aways), ("--scale", scales))
                 if v]
        if given:
            raise UsageError(f"{given[0]} applies to --steer, which was not given; add "
                             "--steer SITE, e.g. --steer blocks.0.resid_pre")
        return []
    n = len(sites)
    for option, got in (("--toward", towards), ("--away", aways)):
        if not got:
            raise UsageError(f"--steer needs --toward TEXT and --away TEXT (the vector is "
                             f"activation(toward) - activation(away)); {option} is missing")
    for option, got in (("--toward", towards), ("--away", aways), ("--scale", scales)):
        if got and len(got) not in (1, n):
            raise UsageError(f"--steer is given {counted(n, 'time')} but {option} "
                             f"{counted(len(got), 'time')}; {STEER_PAIRING}")
    for option, texts in (("--toward", towards), ("--away", aways)):
        if any(not text.strip() for text in texts):
            raise InputTextError(f"{option} is empty; give at least one word, e.g. \"Love\"")

    def nth(values: list, i: int, default=None):
        return default if not values else values[i] if len(values) == n else values[0]

    return [(site, nth(towards, i), nth(aways, i), nth(scales, i, 1.0))
            for i, site in enumerate(sites)]


def check_options(*, ablate: Sequence[str] | str | None = None,
                  ablate_mode: str | None = None, steer=None, toward=None, away=None,
                  scale=None) -> None:
    """What can be refused before a model is loaded."""
    if ablate_mode is not None and ablate_mode not in ABLATE_MODES:
        raise UsageError(f"--ablate-mode {ablate_mode!r} is not a mode; valid: "
                         f"{', '.join(ABLATE_MODES)}")
    ablate = as_names(ablate, "--ablate")
    if ablate_mode is not None and not ablate:
        raise UsageError("--ablate-mode applies to --ablate sites, and none was given; add "
                         "--ablate SITE, e.g. --ablate blocks.0.attn.out")
    pair_steers(steer, toward, away, scale)


def plan(loaded, *, ablate: Sequence[str] | str | None = None, ablate_mode: str | None = None,
         steer=None, toward=None, away=None, scale=None) -> Plan:
    check_options(ablate=ablate, ablate_mode=ablate_mode, steer=steer, toward=toward,
                  away=away, scale=scale)
    steers = pair_steers(steer, toward, away, scale)
    model = loaded.model
    sites = [parse_site(model, s, "--ablate") for s in as_names(ablate, "--ablate") or ()]
    check_experts_left(loaded.cfg, sites)
    return Plan(ablate=sites, mode=ablate_mode or "zero",
                steers=[Steer(parse_site(model, site, "--steer"), t, a, float(k))
                        for site, t, a, k in steers])


class Applied:
    """What a command ran with: the edits' records, and whether each was reached."""

    def __init__(self, records: list[Intervention], counters: list[list[int]],
                 sites: list[Site]):
        self.records, self._counters, self._sites = records, counters, sites

    def finish(self, result):
        """Refuse a run that never reached a site (it would change nothing), and note
        what was changed on the result."""
        for counter, site in zip(self._counters, self._sites):
            if counter[0] == 0:
                raise RangeError(f"{site.option} {site.spec!r} is never reached: this command "
                                 f"stops before {site.name}, so it would change nothing; "
                                 "choose a site in the blocks it runs")
        result.interventions = list(self.records) or None
        return result


def _counted(fn: Edit, counter: list[int]) -> Edit:
    def edit(x):
        counter[0] += 1
        return fn(x)

    return edit


def steering_vector(loaded, steer: Steer, source: str | None = None
                    ) -> tuple[torch.Tensor, Intervention]:
    """activation(toward) - activation(away) at the steer's site, on the model as it is
    (ablated, not yet steered), and the record of it (`source`: an encoder–decoder's
    text, read by the encoder while a decoder site's steering texts run)."""
    site = steer.site
    ids = {}
    for option, text in (("--toward", steer.toward), ("--away", steer.away)):
        ids[option] = _steering_ids(loaded, site, text)
    n, m = len(ids["--toward"]), len(ids["--away"])
    pieces = {k: loaded.tokenizer.pieces(v) for k, v in ids.items()}
    if n != m:
        raise InputTextError(
            f"--toward and --away are added position by position, so they need the same "
            f"number of tokens, but --toward is {counted(n, 'token')} "
            f"{pieces['--toward']} and --away is {counted(m, 'token')} "
            f"{pieces['--away']}; add or remove words until they match")
    if site.pos is not None and site.pos >= n:
        start = " with the start token" if site.stack == "decoder" else ""
        raise RangeError(f"--steer {site.spec!r}: position {site.pos} is out of range: "
                         f"--toward and --away have {counted(n, 'token')}{start} "
                         f"(0 to {n - 1})")
    acts = []
    for option in ("--toward", "--away"):
        tr = _steering_run(loaded, site, ids[option], source)
        acts.append(tr.raw(site.name).clone())
    vector = acts[0] - acts[1]  # (*dims) over the steering texts' positions
    shown = vector[site.index(vector.ndim + 1, site.positions(n) if site.pos is not None
                              else None)[1:]]
    return vector, Intervention(
        kind="steer", site=site.spec, name=site.name, head=site.head, position=site.pos,
        toward=steer.toward, away=steer.away, toward_tokens=pieces["--toward"],
        away_tokens=pieces["--away"], scale=steer.scale,
        vector_norm=float(shown.double().norm()))


@contextmanager
def applied(loaded, p: Plan, source: str | None = None):
    """Install `p`'s ablations, compute each steering vector on the model as ablated (the
    vector one --steer would have alone), then install them all; yields an Applied to
    finish the result with.

    An encoder–decoder's steering texts are read by the stack the site is in: an encoder
    site's as the source, a decoder site's as the target (after the start token), with
    the command's own `source` text in the encoder, so the vector holds what the two
    targets write differently about the same source."""
    model = loaded.model
    counters, sites, records, edits = [], [], [], []
    for site in p.ablate:
        counter = [0]
        counters.append(counter)
        sites.append(site)
        rerouted = site.expert is not None  # an expert routed around, whatever the mode
        edit = route_around(site) if rerouted else ablation(site, p.mode)
        edits.append((site.name, _counted(edit, counter)))
        records.append(Intervention(kind="ablate", site=site.spec, name=site.name,
                                    head=site.head, position=site.pos,
                                    mode=ROUTE_AROUND if rerouted else p.mode))
    for name, edit, record, site in p.extra:
        if record is None:
            edits.append((name, edit))
            continue
        counter = [0]
        counters.append(counter)
        sites.append(site)
        edits.append((name, _counted(edit, counter)))
        records.append(record)
    with editing(model, edits):
        if not p.steers:
            done = Applied(records, counters, sites)
            with _scale_hint(model, [r.scale for r in records if r.kind == "steer"]):
                yield done
            return
        steered = []
        for steer in p.steers:
            vector, record = steering_vector(loaded, steer, source)
            counter = [0]
            counters.append(counter)
            sites.append(steer.site)
            records.append(record)
            steered.append((steer.site.name,
                            _counted(steering(steer.site, vector, steer.scale), counter)))
        for c in counters:
            c[0] = 0  # the steering texts' runs do not count as reaching a site
        with editing(model, steered), _scale_hint(model, [s.scale for s in p.steers]):
            yield Applied(records, counters, sites)


def _scale_hint(model, scales: list):
    """While steered (--steer, or a feature's --steer-feature), a NaN or an overflow
    suggests a smaller --scale first."""
    if not scales:
        return nullcontext()
    shown = ", ".join(f"{scale:g}" for scale in scales)
    return finite.hinting(model, f"use a smaller --scale (now {shown}): the steering vector "
                                 "times --scale overflows the activations")


def _steering_ids(loaded, site: Site, text: str) -> list[int]:
    """A steering text's ids as the site's stack reads it: a decoder site's after the
    start token, with no end token (the decoder goes on from it, as --target)."""
    if site.stack != "decoder":
        return encode(loaded, text)
    return read_seq(loaded, target=text).target


def _steering_run(loaded, site: Site, ids: list[int], source: str | None):
    """A steering text's run up to the site (its activation is the site's value)."""
    split = split_stack(site.name)[1]
    stop = -1 if split.startswith("embed.") else site.layer
    if not site.stack:
        return run(loaded, ids, [site.name], validate=False, stop_after=stop)
    if site.stack == "encoder":
        seq = Seq("encoder", "encoder.", loaded.model.encoder)
        return run(loaded, ids, [site.name], validate=False, stop_after=stop, seq=seq)
    if source is None:
        raise UsageError(f"--steer {site.spec!r} is in the decoder, whose steering texts "
                         "are targets read against a source; give the command's text")
    seq = Seq("decoder", "decoder.", loaded.model.decoder, target=ids)
    return run(loaded, encode(loaded, source), [site.name], validate=False, stop_after=stop,
               seq=seq)


# -- one-token answers -----------------------------------------------------------------
def one_token(loaded, text: str, option: str) -> TokenRef:
    """The id of a text that must be exactly one token (--answer, --wrong)."""
    if not isinstance(text, str) or not text:
        raise InputTextError(f"{option} is empty; give one token, e.g. {option} \" Paris\"")
    ids = loaded.tokenizer.encode(text)
    # the specials a tokenizer puts around every text (Gemma's <bos>, BERT's [CLS] and
    # [SEP]) are not part of the answer
    around = set(loaded.tokenizer.encode(""))
    while ids and ids[0] in around:
        ids = ids[1:]
    while ids and ids[-1] in around:
        ids = ids[:-1]
    pieces = loaded.tokenizer.pieces(ids)
    if len(ids) != 1:
        split = " + ".join(repr(p) for p in pieces) if pieces else "no tokens"
        first = _one_token_text(loaded.tokenizer, ids[0], around) if ids else None
        hint = f"; e.g. {option} {first!r}" if first is not None else \
            "; no single token of this tokenizer spells it, choose another word" if ids else ""
        if first is not None and (first.startswith(" ") or text.startswith(" ")):
            hint += " (the leading space is part of the token)"
        raise InputTextError(f"{option} {text!r} must be one token, but the "
                             f"{loaded.tokenizer.name} tokenizer splits it into "
                             f"{counted(len(ids), 'token')}: {split}{hint}")
    if ids[0] >= loaded.cfg.vocab_size:
        raise InputTextError(f"{option} {text!r} is token id {ids[0]}, outside the model's "
                             f"vocabulary of {loaded.cfg.vocab_size}")
    return TokenRef(id=ids[0], token=pieces[0])


def _one_token_text(tokenizer, token: int, around: set) -> str | None:
    """The text of `token` when that text is one token again (a suggestion that works);
    None for a piece of a character (a byte of an emoji) or a token no text makes."""
    text = tokenizer.decode([token])
    if not text or "\ufffd" in text:
        return None
    ids = [i for i in tokenizer.encode(text) if i not in around]
    return text if ids == [token] else None


def _metric(logits: torch.Tensor, answer: int, wrong: int | None) -> torch.Tensor:
    """logit(answer) − logit(wrong) at the last position of each row, in float64:
    logits (B, T, V) -> (B,)."""
    last = logits[:, -1].double()
    return last[:, answer] - (last[:, wrong] if wrong is not None else 0.0)


__all__ = ["Site", "parse_site", "site_names", "resid_pre_name", "editing", "ablation",
           "steering", "Steer", "Plan", "plan", "applied", "check_options", "pair_steers",
           "steering_vector", "one_token", "ABLATE_MODES", "STEER_PAIRING"]
