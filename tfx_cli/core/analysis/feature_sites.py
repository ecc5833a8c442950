"""Features of an SAE as intervention sites: `--sae DIR --ablate features.{k}[:p=POS]`
and `--steer-feature DIR:IDX --scale K`, on the interventions of sites.py.

The SAE's site is replaced by its reconstruction plus its error term, x = x̂ + (x − x̂),
and an edit changes the features f to f': x̂' + (x − x̂) = x + (f' − f)·W_dec. That is how
it is computed, so with no feature changed the site is x itself, bit for bit, and
ablating feature k changes it by exactly −f_k × W_dec[k] (scaled back by a normalising
SAE's own factor). Several changes to one SAE's features are made on one encoding.

`check_options` and `plan` take the intervention options of sites.py plus `sae`,
`sae_site` and `steer_feature`; the feature edits ride in the Plan's `extra` list, so
sites.applied installs them with the others, counts them as reached and records them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
import torch

from ...errors import ConfigError, RangeError, SelectError, UsageError
from ...values import as_float
from ...words import counted
from ..results import Intervention
from . import sites
from .sites import Edit, Plan, Site, parse_site

FEATURE_OPTIONS = ("sae", "sae_site", "steer_feature")

_FEATURE = re.compile(r"^features\.(\d+)$")


def is_feature_spec(spec) -> bool:
    return isinstance(spec, str) and spec.strip().split(":")[0].startswith("features.")


@dataclass(frozen=True, eq=False)
class FeatureSite:
    """One feature of an SAE, optionally at one position (`features.12:p=3`)."""

    spec: str
    feature: int
    sae: object  # core.features.SAE
    pos: int | None = None
    option: str = "--ablate"

    @property
    def name(self) -> str:  # the tap it edits: the site the SAE reconstructs
        return self.sae.site_out

    def positions(self, T: int) -> slice:
        if self.pos is None:
            return slice(None)
        if self.pos >= T:
            raise RangeError(f"{self.option} {self.spec!r}: position {self.pos} is out of "
                             f"range: the text has {counted(T, 'token')} (0 to {T - 1})")
        return slice(self.pos, self.pos + 1)


def split_steer_feature(value: str) -> tuple[str, int]:
    """--steer-feature DIR:IDX -> (DIR, IDX)."""
    folder, _, index = (value or "").strip().rpartition(":")
    if not folder or not index.strip().isdigit():
        raise UsageError(f"--steer-feature {value!r} must be DIR:INDEX, the SAE's folder and "
                         "a feature of it, e.g. --steer-feature my-sae:12")
    return folder, int(index)


def check_feature_options(*, ablate=None, steer=None, toward=None, away=None, sae=None,
                          sae_site=None, steer_feature=None, sae_used: bool = False) -> None:
    """What can be refused about --sae, features.{k} and --steer-feature before a model
    loads. `sae_used`: the command reads --sae itself (patch --site features)."""
    features = [s for s in ablate or () if is_feature_spec(s)]
    if sae_site is not None and sae is None:
        raise UsageError("--sae-site names the site of --sae's SAE, which was not given; add "
                         "--sae DIR")
    if features and sae is None:
        raise UsageError(f"--ablate {features[0].strip()!r} is a feature of an SAE: add --sae "
                         "DIR, the folder of the SAE whose feature it is")
    if sae is not None and not features and not sae_used:
        raise UsageError("--sae gives the SAE whose features --ablate features.K edits, and no "
                         "features.K was given; add --ablate features.K, or see the features "
                         "with tfx features TEXT --sae DIR")
    if steer_feature is not None:
        split_steer_feature(steer_feature)
        if steer:
            raise UsageError("--steer and --steer-feature both given, and --scale would apply "
                             "to both; steer one of them")
        for option, value in (("--toward", toward), ("--away", away)):
            if value is not None:
                raise UsageError(f"{option} applies to --steer, not to --steer-feature (which "
                                 "adds --scale × the feature's decoder row); drop it")


def open_sae(loaded, path, site: str | None = None):
    """The SAE in folder `path`, checked against the loaded model: its site (from its
    file, or `site`, --sae-site) must be one of the model's sites, and its width the
    site's width (the heads of attn.context joined)."""
    from ..features import SAE, read_sae, site_needed, site_width, tfx_site
    from ..features.transcoder_set import read_layer_sae

    if loaded.cfg.is_encoder_decoder:
        raise UsageError(f"--sae reads a single-stack model's sites; {loaded.cfg.name} is an "
                         "encoder–decoder, whose SAE sites tfx does not read yet: use a "
                         "decoder-only or encoder-only model")
    file = read_layer_sae(path) or read_sae(path)  # a transcoder set's layer, or an SAE
    model, cfg = loaded.model, loaded.cfg
    spec = tfx_site(site, "--sae-site names") if site is not None else file.site
    if spec is None:
        raise site_needed(file)
    option = "--sae-site" if site is not None else f"--sae {file.path}: its site"

    def checked(spec: str, width: int, option: str, what: str) -> Site:
        found = parse_site(model, spec, option)
        if found.head is not None or found.pos is not None:
            raise UsageError(f"{option} {spec!r}: an SAE reads a whole site; drop :h= and :p=")
        has = site_width(cfg, found.dims)
        if has is None:
            raise SelectError(f"{option} {spec!r} has dims ({', '.join(found.dims)}), not an "
                              "activation an SAE reads: (T, width), or attention's context "
                              "(H, T, D) with the heads joined")
        if has != width:
            raise ConfigError(f"--sae {file.path} is {width:,} wide ({what}) but {spec} is "
                              f"{has:,} wide on {cfg.name} (dims {', '.join(found.dims)}); "
                              "the SAE was trained on another model or site (--sae-site "
                              "names the site)")
        return found

    inp = checked(spec, file.d_in, option, "d_in")
    out = inp
    if file.transcoder:
        out = checked(file.site_out, file.d_out, f"--sae {file.path}: its output site",
                      "d_out")
    sae = SAE(file, site=inp.name, site_out=out.name, spec=spec,
              device=getattr(loaded.spec, "device", "cpu"))
    sae.dims, sae.dims_out = inp.dims, out.dims
    return sae


def parse_feature(sae, spec: str, option: str = "--ablate") -> FeatureSite:
    """`features.K[:p=POS]` -> FeatureSite of `sae`, its index checked."""
    spec = spec.strip()
    name, *narrowing = spec.split(":")
    found = _FEATURE.match(name)
    if not found:
        raise SelectError(f"{option} {spec!r} is not a feature site; write features.K with K "
                          "a feature's index, e.g. features.12 (narrow with :p=POSITION)")
    pos = None
    for part in narrowing:
        got = re.match(r"^p=(\d+)$", part.strip())
        if not got or pos is not None:
            raise UsageError(f"{option} {spec!r}: {part!r} is not a narrowing of a feature; "
                             "write :p=POSITION once, e.g. features.12:p=3")
        pos = int(got.group(1))
    return FeatureSite(spec=spec, feature=_feature_index(sae, int(found.group(1)), option,
                                                         spec), sae=sae, pos=pos,
                       option=option)


def _feature_index(sae, k: int, option: str, spec: str) -> int:
    if not 0 <= k < sae.d_sae:
        raise RangeError(f"{option} {spec!r}: feature {k} is out of range: the SAE has "
                         f"{sae.d_sae:,} features (0 to {sae.d_sae - 1})")
    return k


@dataclass
class FeaturePlan:
    """The feature changes of one command: --sae's SAE, its ablated features, and the
    steered feature (its SAE in .sae); the ablation mode and K are the Plan's."""

    sae: object | None = None  # core.features.SAE of --sae
    ablate_features: list = field(default_factory=list)  # FeatureSite
    steer_feature: FeatureSite | None = None


def plan_features(loaded, *, ablate=None, sae=None, sae_site=None,
                  steer_feature=None) -> FeaturePlan:
    """Open --sae (and --steer-feature's SAE) and parse the feature sites."""
    p = FeaturePlan()
    if sae is not None:
        p.sae = open_sae(loaded, sae, sae_site)
        p.ablate_features = [parse_feature(p.sae, s, "--ablate") for s in ablate or ()
                             if is_feature_spec(s)]
    if steer_feature is not None:
        folder, index = split_steer_feature(steer_feature)
        same = sae is not None and Path(folder).expanduser().resolve() == \
            Path(sae).expanduser().resolve()
        which = p.sae if same else open_sae(loaded, folder)
        spec = f"features.{index}"
        p.steer_feature = FeatureSite(spec=spec, feature=_feature_index(
            which, index, "--steer-feature", steer_feature), sae=which,
            option="--steer-feature")
    return p


def feature_edit(sae, changes: list, mode: str = "zero", scale: float = 1.0,
                 captured: list | None = None) -> Edit:
    """The edit of the site `sae` reconstructs: x + (f' − f)·W_dec, f the features of
    its input (captured from the input's tap for a transcoder), f' them with `changes`
    (FeatureSite, "ablate" | "steer") made."""
    from ..features import SAE

    def edit(x: torch.Tensor) -> torch.Tensor:
        inp = captured[0] if captured is not None else x
        flat = SAE.flatten(inp, sae.dims)  # (B, T, d_in)
        acts = sae.encode(flat)  # (B, T, F) float32
        target = acts.clone()
        for where, kind in changes:
            k, positions = where.feature, where.positions(acts.shape[1])
            if kind == "steer":
                target[:, positions, k] += scale
            elif mode == "zero":
                target[:, positions, k] = 0.0
            else:
                target[:, positions, k] = acts[:, :, k].mean(dim=1, keepdim=True)
        moved = sae.delta(target - acts, flat)  # (B, T, d_out): 0 where nothing changed
        return x + SAE.unflatten(moved, sae.dims_out, x).to(x.dtype)

    return edit


def feature_edits(p: FeaturePlan, mode: str = "zero", scale: float = 1.0) -> list:
    """(tap name, edit, Intervention or None, FeatureSite) for the plan's feature
    changes: one edit per SAE (its changes made together on one encoding); a
    transcoder's input is captured first (record None)."""
    groups: dict[int, tuple] = {}
    for where in p.ablate_features:
        groups.setdefault(id(where.sae), (where.sae, []))[1].append((where, "ablate"))
    if p.steer_feature is not None:
        where = p.steer_feature
        groups.setdefault(id(where.sae), (where.sae, []))[1].append((where, "steer"))
    out = []
    for sae, changes in groups.values():
        captured = None
        if sae.site_out != sae.site:
            captured = [None]
            out.append((sae.site, _capture(captured), None, None))
        edit = feature_edit(sae, changes, mode, scale, captured)
        for i, (where, kind) in enumerate(changes):
            record = Intervention(
                kind=kind, site=where.spec, name=sae.site_out, head=None,
                position=where.pos, mode=mode if kind == "ablate" else None,
                scale=scale if kind == "steer" else None, sae=str(sae.path),
                feature=where.feature)
            # the one edit runs once per forward; each change counts it as reached
            out.append((sae.site_out, edit if i == 0 else (lambda x: x), record, where))
    return out


def _capture(box: list) -> Edit:
    def edit(x: torch.Tensor) -> torch.Tensor:
        box[0] = x
        return x

    return edit



def _feature_scale(scale) -> float | None:
    """--scale as --steer-feature reads it: one number (the command line passes a list,
    since --scale repeats with --steer)."""
    if isinstance(scale, (list, tuple)):
        if len(scale) > 1:
            raise UsageError(f"--steer-feature takes one --scale, but it is given "
                             f"{len(scale)} times; give it once")
        scale = scale[0] if scale else None
    return None if scale is None else as_float(scale, "--scale", finite=True)


def check_options(*, sae: str | None = None, sae_site: str | None = None,
                  steer_feature: str | None = None, sae_used: bool = False,
                  **edits) -> None:
    """sites.check_options, and what can be refused about the feature options before a
    model loads."""
    check_feature_options(ablate=edits.get("ablate"), steer=edits.get("steer"),
                          toward=edits.get("toward"), away=edits.get("away"), sae=sae,
                          sae_site=sae_site, steer_feature=steer_feature, sae_used=sae_used)
    if steer_feature is not None and not edits.get("steer"):
        _feature_scale(edits.get("scale"))
        edits = {**edits, "scale": None}  # --scale is the feature's here
    sites.check_options(**edits)


def plan(loaded, *, sae: str | None = None, sae_site: str | None = None,
         steer_feature: str | None = None, sae_used: bool = False, **edits) -> Plan:
    """sites.plan for the ordinary sites, then the feature sites' edits in its `extra`."""
    check_options(sae=sae, sae_site=sae_site, steer_feature=steer_feature,
                  sae_used=sae_used, **edits)
    ablate = edits.get("ablate")
    scale = edits.get("scale")
    rest = {**edits, "ablate": [s for s in ablate or () if not is_feature_spec(s)] or None}
    if rest["ablate"] is None:
        rest["ablate_mode"] = None  # it is the features' ablation mode alone
    feature_scale = 1.0  # what --steer-feature adds (--scale, default 1)
    if steer_feature is not None:
        rest["scale"] = None
        given = _feature_scale(scale)
        feature_scale = 1.0 if given is None else given
    done = sites.plan(loaded, **rest)
    done.mode = edits.get("ablate_mode") or "zero"
    done.features = plan_features(loaded, ablate=ablate, sae=sae, sae_site=sae_site,
                                  steer_feature=steer_feature)
    done.extra += feature_edits(done.features, done.mode, feature_scale)
    return done


__all__ = ["FeatureSite", "open_sae", "parse_feature", "feature_edit", "feature_edits",
           "check_options", "check_feature_options", "plan", "is_feature_spec",
           "split_steer_feature", "FEATURE_OPTIONS", "FeaturePlan", "plan_features"]
