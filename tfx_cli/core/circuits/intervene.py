"""Setting transcoder features by hand, as circuit-tracer 0.5.0's
`ReplacementModel.feature_intervention` does (TransformerLens backend).

Each intervention (layer, position, feature, value) adds (value − the feature's current
activation) × its decoder row to the FFN output it writes (a cross-layer feature: to
every later layer's too). With `freeze_attention` the attention patterns are the plain
run's. With `constrained` (a range of layers) the FFN outputs of those layers are the
plain run's too (plus the interventions, whose deltas are then taken from the plain
run's activations; a transcoder's skip connection still sees the changed input), every
norm's divisor is frozen when the range covers every layer, and interventions on layers
outside it are dropped (a command refuses such an intervention: `check_reach`). Each run
records the activation every intervention replaced (`Intervened.replaced`). Everything
is done through the model's taps (`Tap.edit`)."""
from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch

from ...errors import RangeError, UsageError
from ..model import finite
from ..features.transcoder_set import TranscoderSet


def _record_plain(model, ids: list[int], tc: TranscoderSet) -> dict:
    L = len(model.blocks)
    names = [f"blocks.{i}.attn.pattern" for i in range(L)] + \
        [f"blocks.{i}.ffn.out" for i in range(L)] + [f"blocks.{i}.{tc.site}" for i in range(L)]
    norms = _norms(model)
    names += [f"{n}.var" for n in norms]
    with model.record(names) as tr, torch.inference_mode():
        model(torch.tensor([ids]))
    return {n: tr.raw(n).float()[None] for n in names}


def _norms(model) -> list[str]:
    out = []
    for i in range(len(model.blocks)):
        out += [f"blocks.{i}.ln1", f"blocks.{i}.ln2"]
    return out + ["ln_f"]


def _acts(tc: TranscoderSet, layer: int, x: torch.Tensor) -> torch.Tensor:
    acts = tc.activate(layer, tc.pre(layer, x[0].float()))
    acts[0] = 0  # circuit-tracer's zero_positions
    return acts


@dataclass
class Intervened:
    """What a run with interventions saw: each layer's transcoder activations (L entries,
    filled as the pass goes) and, for each (layer, position, feature) set, the activation
    its value replaced (the run's own, or the plain run's under `constrained`)."""

    acts: list
    replaced: dict = field(default_factory=dict)


def feature_intervention(model, ids: list[int], tc: TranscoderSet,
                         interventions: list[tuple[int, int, int, float]], *,
                         freeze_attention: bool = True,
                         constrained: range | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (T, V), the transcoders' activations (L, T, F)) of the run with the
    interventions made."""
    with intervening(model, ids, tc, interventions, freeze_attention=freeze_attention,
                     constrained=constrained) as run, torch.inference_mode():
        logits = model(torch.tensor([ids]))[0]
    return logits.float(), torch.stack(run.acts)


@contextmanager
def intervening(model, ids: list[int], tc: TranscoderSet,
                interventions: list[tuple[int, int, int, float]], *,
                freeze_attention: bool = True, constrained: range | None = None):
    """The interventions made on the next forward pass over `ids` (a command's own run:
    next's, generate's first step); the taps are left as they were after it. Yields the
    Intervened record the run fills."""
    L, T = len(model.blocks), len(ids)
    frozen = (freeze_attention or constrained is not None) and bool(interventions)
    plain = _record_plain(model, ids, tc) if frozen else None
    by_layer: dict[int, list] = {}
    for layer, pos, feat, value in interventions:
        by_layer.setdefault(layer, []).append((pos, feat, value))
    deltas = torch.zeros(L, T, tc.d_model)
    run = Intervened([None] * L)
    current = run.acts
    inputs: list = [None] * L
    in_range = constrained if constrained is not None else range(L)
    edits: dict[str, object] = {}

    def site_edit(layer):
        def edit(x):
            inputs[layer] = x
            current[layer] = _acts(tc, layer, x)
            return x
        return edit

    def out_edit(layer):
        def edit(x):
            if constrained is not None and layer in constrained:
                clean = plain[f"blocks.{layer}.ffn.out"].to(x.dtype)
                if tc.W_skip[layer] is not None:  # the skip follows the changed input
                    site = plain[f"blocks.{layer}.{tc.site}"]
                    clean = clean + tc.skip(layer, inputs[layer].float()) - tc.skip(layer, site)
                x = clean
            if layer in by_layer:
                base = _acts(tc, layer, plain[f"blocks.{layer}.{tc.site}"]) \
                    if constrained is not None else current[layer]
                _add_deltas(tc, deltas, layer, by_layer[layer], base, run.replaced)
            if layer in in_range:
                x = x + deltas[layer].to(x.dtype)
            deltas[layer].zero_()
            return x
        return edit

    for i in range(L):
        edits[f"blocks.{i}.{tc.site}"] = site_edit(i)
        edits[f"blocks.{i}.ffn.out"] = out_edit(i)
        if frozen:
            edits[f"blocks.{i}.attn.pattern"] = _fixed(plain[f"blocks.{i}.attn.pattern"])
    if constrained is not None and frozen and set(range(L)) <= set(constrained):
        _freeze_divisors(model, plain, edits)
    taps = model.taps

    def release():
        for name in edits:
            taps[name].edit = None
        taps["logits"].edit = None

    def after_first(x):  # the pass is over: later passes (decoding steps) run plain
        release()
        return x

    shown = ", ".join(f"{layer}:{pos}:{feat}={value:g}"
                      for layer, pos, feat, value in interventions)
    hint = (finite.hinting(model, f"set a smaller value with --set-feature (now {shown}): "
                                  "the feature's decoder row times it overflows the "
                                  "activations") if interventions else nullcontext())
    try:
        for name, fn in edits.items():
            taps[name].edit = fn
        taps["logits"].edit = after_first
        with hint:
            yield run
    finally:
        release()


FLOAT32_MAX = 3.4028234663852886e38


def parse_set_feature(texts: list[str], *, n_layers: int, width: int,
                      n_tokens: int) -> list[tuple[int, int, int, float]]:
    """--set-feature LAYER:POS:FEATURE=VALUE, each checked against the model and the
    transcoders; a feature named twice is refused (each copy would add its change)."""
    out: list[tuple[int, int, int, float]] = []
    given: dict[tuple[int, int, int], str] = {}
    for text in texts:
        where, eq, value = str(text).partition("=")
        parts = where.split(":")
        try:
            layer, pos, feat = (int(x) for x in parts)
            number = float(value)
        except ValueError:
            raise UsageError(f"--set-feature {text} is not LAYER:POS:FEATURE=VALUE; e.g. "
                             "--set-feature 3:5:1234=0 (turn feature 1234 of layer 3 off "
                             "at position 5)") from None
        if not eq or not math.isfinite(number):
            raise UsageError(f"--set-feature {text} needs a finite value after =; e.g. "
                             f"--set-feature {where}=0")
        if abs(number) > FLOAT32_MAX:  # the model runs in float32 (or narrower)
            raise RangeError(f"--set-feature {text}: {value} is beyond what float32 holds "
                             f"(±3.4e38); give a value a feature could take, e.g. "
                             f"--set-feature {where}=10")
        for name, got, n in (("layer", layer, n_layers), ("position", pos, n_tokens),
                             ("feature", feat, width)):
            if not 0 <= got < n:
                raise RangeError(f"--set-feature {text}: {name} {got} is out of range "
                                 f"(0 to {n - 1})")
        if (layer, pos, feat) in given:
            raise UsageError(f"--set-feature {text} sets feature {feat} of layer {layer} at "
                             f"position {pos} again (also --set-feature "
                             f"{given[layer, pos, feat]}); give each feature once, with the "
                             "value it should take")
        given[layer, pos, feat] = text
        out.append((layer, pos, feat, number))
    return out


def _writes(tc: TranscoderSet, layer: int) -> list[int]:
    """The layers whose FFN output a feature of `layer` writes: its own, and every later
    one a cross-layer transcoder decodes into."""
    return [t for t in range(layer, tc.n_layers) if tc.decoder(layer, t) is not None]


def check_reach(tc: TranscoderSet, changes: list[tuple[int, int, int, float]],
                texts: list[str], constrained: range | None) -> None:
    """Refuse an intervention `constrained` drops whole: one whose feature writes no layer
    in the range (its change would be computed and thrown away)."""
    if constrained is None:
        return
    for text, (layer, _pos, feat, _value) in zip(texts, changes):
        reach = _writes(tc, layer)
        if not set(reach) & set(constrained):
            where = f"layer {layer}" if reach == [layer] else \
                f"layers {reach[0]} to {reach[-1]}"
            span = f"{constrained.start}:{constrained.stop}"
            wide = f"{min(constrained.start, layer)}:{max(constrained.stop, layer + 1)}"
            raise UsageError(f"--set-feature {text} cannot take effect: feature {feat} of "
                             f"layer {layer} writes {where}, outside --constrained-layers "
                             f"{span}, which drops it; widen the range (e.g. "
                             f"--constrained-layers {wide}) or drop the feature")


def check_active(model, ids: list[int], tc: TranscoderSet,
                 changes: list[tuple[int, int, int, float]], texts: list[str]) -> None:
    """Each set feature must be active at its position in the plain run (position 0 never
    is: circuit-tracer's zero_positions): a feature set from nothing is more often a wrong
    index than a wish, so it takes --allow-inactive."""
    names = sorted({f"blocks.{layer}.{tc.site}" for layer, *_ in changes})
    with model.record(names) as tr, torch.inference_mode():
        model(torch.tensor([ids]))
    acts = {layer: _acts(tc, layer, tr.raw(f"blocks.{layer}.{tc.site}").float()[None])
            for layer in {c[0] for c in changes}}
    for text, (layer, pos, feat, _value) in zip(texts, changes):
        if float(acts[layer][pos, feat]) == 0.0:
            where = "position 0 holds no features" if pos == 0 else \
                f"feature {feat} of layer {layer} is not active at position {pos}"
            raise UsageError(f"--set-feature {text}: {where}; set one tfx graph lists there, "
                             "or add --allow-inactive to switch it on from zero")


def _chain(first, second):
    if first is None:
        return second
    return lambda x: second(first(x))


def _fixed(value: torch.Tensor):
    return lambda x: value.to(x.dtype)


def _add_deltas(tc: TranscoderSet, deltas: torch.Tensor, layer: int, changes: list,
                base: torch.Tensor, replaced: dict) -> None:
    """value − base activation, times the feature's decoder rows, into the layers it
    writes; the base activation recorded in `replaced`."""
    for pos, feat, value in changes:
        replaced[layer, pos, feat] = float(base[pos, feat])
        change = float(value) - float(base[pos, feat])
        if change == 0:
            continue
        for target in range(layer, deltas.shape[0]):
            W = tc.decoder(layer, target)
            if W is not None:
                deltas[target, pos] += change * W[feat]


def _freeze_divisors(model, plain: dict, edits: dict) -> None:
    """Every norm divides by the plain run's divisor: its normalised rows are the input
    (centred, for LayerNorm) over that fixed number (circuit-tracer's hook_scale
    frozen). The input is taken at the norm's `in` tap, the rows replaced at `normed`."""
    for name in _norms(model):
        norm = model.get_submodule(name)
        divisor = torch.sqrt(plain[f"{name}.var"] + norm.eps)[..., None]
        seen: dict = {}

        def keep(x, seen=seen):
            seen["x"] = x
            return x

        def rows(x, seen=seen, divisor=divisor, centred=norm.kind != "rmsnorm"):
            inp = seen["x"].float()
            if centred:
                inp = inp - inp.mean(dim=-1, keepdim=True)
            return (inp / divisor).to(x.dtype)

        previous = edits.get(f"{name}.normed")
        edits[f"{name}.in"] = keep
        edits[f"{name}.normed"] = rows if previous is None else _chain(rows, previous)
