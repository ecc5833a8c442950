"""A loaded model with every stage command as a method (`api.load(...)`)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from ._options import _one_of_text_or_length, _spec, _target, _text, checked

if TYPE_CHECKING:
    from ..core.results import FeaturesResult
    from ..core.results import (AttendResult, AttributeResult, EmbedResult, FFNResult,
                                GenerateResult, LayerNormResult, LensResult, NextResult,
                                PatchResult, PosencResult, ReportResult, TraceResult)


@checked
def load(**model: Any) -> "Model":
    """A model to run many stages on: `api.load(config="gpt124m", seed=123)`, or real
    weights with `api.load(weights="smollm2")`. Takes the model options only."""
    from ..core.load import load as load_model

    spec, hooks = _spec(model)
    return Model(load_model(spec, **hooks))


def _model(options: dict, *, blocks: int | None = None) -> "Model":
    from ..core.load import load as load_model

    spec, hooks = _spec(options)
    return Model(load_model(spec, blocks=blocks, **hooks))


class Model:
    """A loaded model: every stage command as a method, all on the same weights.

    `config` is its ModelConfig, `tokenizer` its tokenizer and `module` the torch
    `Transformer` itself (for hooks or experiments of your own).

    The model commands take interventions as keyword arguments: `ablate` (a list of
    sites) with `ablate_mode` ("zero" or "mean"); and on next, generate and trace `steer`
    (a site) with `toward`, `away` and `scale`. They apply to that call only.
    """

    def __init__(self, loaded):
        self._loaded = loaded

    def _edited(self, run: Callable, source: str | None = None, **edits: Any):
        """run(plan) with the interventions `edits` asks for in place; the result says
        what was changed (result.interventions). `source`: the command's text, which an
        encoder–decoder's encoder reads while a decoder site's steering texts run."""
        if all(v is None for k, v in edits.items() if k != "sae_used"):
            return run(None)
        from ..core.analysis import feature_sites
        from ..core.analysis import sites as interventions

        plan = feature_sites.plan(self._loaded, **edits)
        with interventions.applied(self._loaded, plan, source=source) as done:
            result = run(plan)
        return done.finish(result)

    @property
    def config(self):
        return self._loaded.cfg

    @property
    def tokenizer(self):
        return self._loaded.tokenizer

    @property
    def module(self):
        return self._loaded.model

    def __repr__(self) -> str:
        info = self._loaded.info
        source = f"weights {info.weights}" if info.weights else f"seed {info.seed}"
        return f"<tfx Model {info.name} · {source}>"

    @checked
    def embed(self, text: str, *, truncate: bool = False, target: str | None = None,
              stack: str | None = None) -> EmbedResult:
        from ..core.analysis.stages import embed

        return embed(self._loaded, _text(text), truncate=truncate,
                            target=_target(target), stack=stack)

    @checked
    def posenc(self, text: str | None = None, *, length: int | None = None,
               truncate: bool = False) -> PosencResult:
        from ..core.analysis.stages import posenc

        _one_of_text_or_length(text, length)
        return posenc(self._loaded, None if text is None else _text(text),
                             length=length, truncate=truncate)

    @checked
    def attend(self, text: str, *, layer: int = 0, head: int | None = None,
               mask: str | None = None, kv: str | None = None,
               valid_lens: int | None = None, show: Sequence[str] | None = None,
               explain: bool = False, query_pos: int | None = None,
               truncate: bool = False, ablate: Sequence[str] | None = None,
               ablate_mode: str | None = None, target: str | None = None,
               stack: str | None = None, cross: bool = False, sae: str | None = None,
               sae_site: str | None = None) -> AttendResult:
        from ..core.analysis.attend import attend

        return self._edited(
            lambda _: attend(self._loaded, _text(text), layer=layer, head=head,
                                    mask=mask, kv=None if kv is None else _text(kv, "--kv text"),
                                    valid_lens=valid_lens, explain=explain,
                                    query_pos=query_pos, show=list(show or ()),
                                    truncate=truncate, target=_target(target), stack=stack,
                                    cross=cross),
            ablate=ablate, ablate_mode=ablate_mode, sae=sae, sae_site=sae_site)

    @checked
    def layernorm(self, text: str, *, layer: int = 0, which: str = "ln1",
                  truncate: bool = False, target: str | None = None,
                  stack: str | None = None) -> LayerNormResult:
        from ..core.analysis.stages import layernorm

        return layernorm(self._loaded, _text(text), layer=layer, which=which,
                                truncate=truncate, target=_target(target), stack=stack)

    @checked
    def ffn(self, text: str, *, layer: int = 0, truncate: bool = False,
            target: str | None = None, stack: str | None = None) -> FFNResult:
        from ..core.analysis.stages import ffn

        return ffn(self._loaded, _text(text), layer=layer, truncate=truncate,
                          target=_target(target), stack=stack)

    @checked
    def trace(self, text: str, *, select: Sequence[str] | None = None,
              truncate: bool = False, ablate: Sequence[str] | None = None,
              ablate_mode: str | None = None, steer: str | None = None,
              toward: str | None = None, away: str | None = None,
              scale: float | None = None, target: str | None = None,
              sae: str | None = None, sae_site: str | None = None,
              steer_feature: str | None = None) -> TraceResult:
        from ..core.analysis.stages import trace

        return self._edited(
            lambda _: trace(self._loaded, _text(text), list(select or ()),
                                   truncate=truncate, target=_target(target)),
            source=text, ablate=ablate, ablate_mode=ablate_mode, steer=steer, toward=toward,
            away=away, scale=scale, sae=sae, sae_site=sae_site, steer_feature=steer_feature)

    @checked
    def generate(self, prompt: str, *, max_new_tokens: int = 20, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None,
                 stop: Sequence[str] | None = None, candidates: int = 5,
                 no_cache: bool = False, select: Sequence[str] | None = None,
                 truncate: bool = False, ignore_eos: bool = False,
                 on_text: Callable[[str], None] | None = None,
                 ablate: Sequence[str] | None = None, ablate_mode: str | None = None,
                 steer: str | None = None, toward: str | None = None,
                 away: str | None = None, scale: float | None = None,
                 target: str | None = None, sae: str | None = None,
                 sae_site: str | None = None,
                 steer_feature: str | None = None, bos: bool = False) -> GenerateResult:
        """With interventions every step recomputes the whole text without the KV cache:
        a cached step would skip the edits at earlier positions. `bos`: run the ids
        `graph` runs (a special token first when the text starts with none)."""
        from ..core.analysis.generate import generate
        from ..core.analysis.sampling import Sampling

        return self._edited(
            lambda plan: generate(
                self._loaded, _text(prompt, "prompt"), max_new_tokens=max_new_tokens,
                sampling=Sampling(temperature=temperature, top_k=top_k, top_p=top_p),
                use_cache=not no_cache and not plan, n_candidates=candidates,
                select=list(select or ()), stops=list(stop or ()), on_text=on_text,
                truncate=truncate, ignore_eos=ignore_eos, target=_target(target), bos=bos),
            source=prompt, ablate=ablate, ablate_mode=ablate_mode, steer=steer,
            toward=toward, away=away, scale=scale, sae=sae, sae_site=sae_site,
            steer_feature=steer_feature)

    @checked
    def next(self, text: str, *, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, candidates: int = 10,
             truncate: bool = False, ablate: Sequence[str] | None = None,
             ablate_mode: str | None = None, steer: str | None = None,
             toward: str | None = None, away: str | None = None,
             scale: float | None = None, target: str | None = None,
             sae: str | None = None, sae_site: str | None = None,
             steer_feature: str | None = None, bos: bool = False) -> NextResult:
        """The distribution over the next token; `bos`: run the ids `graph` runs (a
        special token first when the text starts with none)."""
        from ..core.analysis.generate import next_token
        from ..core.analysis.sampling import Sampling

        return self._edited(
            lambda _: next_token(self._loaded, _text(text, "prompt"),
                                 sampling=Sampling(temperature=temperature, top_k=top_k,
                                                   top_p=top_p),
                                 n_candidates=candidates, truncate=truncate,
                                 target=_target(target), bos=bos),
            source=text, ablate=ablate, ablate_mode=ablate_mode, steer=steer, toward=toward,
            away=away, scale=scale, sae=sae, sae_site=sae_site, steer_feature=steer_feature)

    @checked
    def lens(self, text: str, *, truncate: bool = False, ablate: Sequence[str] | None = None,
             ablate_mode: str | None = None, target: str | None = None,
             sae: str | None = None, sae_site: str | None = None) -> LensResult:
        from ..core.analysis.generate import lens

        return self._edited(lambda _: lens(self._loaded, _text(text), truncate=truncate,
                                           target=_target(target)),
                            ablate=ablate, ablate_mode=ablate_mode, sae=sae,
                            sae_site=sae_site)

    @checked
    def patch(self, clean: str, *, corrupt: str, answer: str, wrong: str,
              site: str = "resid_pre", batch: int | None = None, truncate: bool = False,
              ablate: Sequence[str] | None = None, ablate_mode: str | None = None,
              target: str | None = None, sae: str | None = None,
              sae_site: str | None = None) -> PatchResult:
        """Activation patching: CORRUPT's run with one cell of CLEAN's activations at
        `site` put in, for every layer and position (or head); tensors["patch.effect"]
        (an encoder–decoder's, reading `target`: patch.encoder.effect,
        patch.decoder.effect and, for attn_out and heads, patch.cross.effect).
        site="features" with `sae`: the SAE's features × positions."""
        from ..core.analysis.patching import patch

        return self._edited(
            lambda plan: patch(self._loaded, _text(clean, "CLEAN text"),
                               corrupt=_text(corrupt, "--corrupt text"), answer=answer,
                               wrong=wrong, site=site, batch=batch, truncate=truncate,
                               target=_target(target),
                               sae=plan.features.sae if plan is not None and site == "features"
                               else None),
            ablate=ablate, ablate_mode=ablate_mode, sae=sae, sae_site=sae_site,
            sae_used=site == "features" or None)

    @checked
    def attribute(self, text: str, *, answer: str, wrong: str | None = None,
                  per_head: bool = False, truncate: bool = False,
                  target: str | None = None, sae: str | None = None,
                  sae_site: str | None = None) -> AttributeResult:
        """Direct logit attribution at the last position (an encoder–decoder's: the
        decoder's, after `target`): result.parts sum to result.logit_diff. With `sae`, its
        site's share split by feature."""
        from ..core.analysis.attribution import attribute

        opened = None
        if sae is not None or sae_site is not None:
            from ..core.analysis.feature_sites import check_feature_options, open_sae

            check_feature_options(sae=sae, sae_site=sae_site, sae_used=True)
            opened = open_sae(self._loaded, sae, sae_site)
        return attribute(self._loaded, _text(text), answer=answer, wrong=wrong,
                         per_head=per_head, truncate=truncate, target=_target(target),
                         sae=opened)

    def features(self, text: str, *, sae: str, sae_site: str | None = None,
                 per_token: int = 5, truncate: bool = False) -> "FeaturesResult":
        """An SAE's features on every token of `text` (api.features)."""
        from ..core.analysis.features import features

        return features(self._loaded, _text(text), sae=sae, sae_site=sae_site,
                        per_token=per_token, truncate=truncate)

    @checked
    def report(self, text: str, *, show_layers: str | Iterable[int] | None = None,
               candidates: int = 5, truncate: bool = False, output: str | Path | None = None,
               force: bool = False, ablate: Sequence[str] | None = None,
               ablate_mode: str | None = None, target: str | None = None,
               sae: str | None = None, sae_site: str | None = None) -> ReportResult:
        """What the HTML page shows; with `output`, the page is written there too."""
        from ..core.analysis.common import check_range
        from ..core.analysis.report import report, report_layers

        cfg = self._loaded.cfg
        n = cfg.n_decoder_layers if target is not None and cfg.is_encoder_decoder \
            else cfg.n_layers
        if show_layers is None or isinstance(show_layers, str):
            layers = report_layers(show_layers, n)
        else:
            layers = sorted(set(int(x) for x in show_layers))
            for layer in layers:
                check_range("layer", layer, n, "--show-layers")
        path = None
        if output is not None:
            from ..render.plot import check_output_path

            path = check_output_path(output, force, suffixes=(".html", ".htm"),
                                     option="--output")
        result = self._edited(
            lambda _: report(self._loaded, _text(text), layers=layers,
                                    top_k=candidates, truncate=truncate,
                                    output=None if path is None else str(path),
                                    target=_target(target), force=force,
                                    progress=self._loaded.progress),
            ablate=ablate, ablate_mode=ablate_mode, sae=sae, sae_site=sae_site)
        if path is not None:
            write_report(result, path, force=force)
        return result


def report_html(result: ReportResult) -> str:
    """The self-contained HTML page of a report result."""
    from ..render.report import build_html

    return build_html(result)


def write_report(result: ReportResult, path: str | Path, *, force: bool = False) -> int:
    """Write the page atomically (a temporary file renamed into place); returns its size
    in bytes."""
    from ..render.plot import atomic_output

    page = report_html(result).encode("utf-8")
    with atomic_output(Path(path), force) as tmp:
        tmp.write_bytes(page)
    result.output = str(path)
    return len(page)
