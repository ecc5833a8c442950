"""Every command as a function: the model options as keywords, the typed result back."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from ..core.spec import SPEC_DEFAULTS, spec_config
from ..errors import InputTextError, UsageError
from ._model import Model, _model, report_html, write_report  # noqa: F401 (re-exported)
from ._options import (_check_edits, _check_layer, _needs_head, _one_of_text_or_length, _spec,
                       _text, checked)
from ._options import _masked_lm_checks

if TYPE_CHECKING:  # the result classes load with the command that makes them
    from ..core.results import (AttendInputsResult, AttendResult, AttributeResult,
                                ConfigsResult, CountParamsResult, EmbedResult, FFNResult,
                                GenerateResult, LayerNormResult, LensResult, NextResult,
                                PatchPairsResult, PatchResult, PosencResult, ReportResult,
                                TokenizeResult, TraceResult, TrainResult)


# -- commands without a model --------------------------------------------------------
@checked
def tokenize(text: str, *, tokenizer: str | None = None, corpus: str | Path | None = None,
             config: str | None = None, weights: str | None = None) -> TokenizeResult:
    """Split `text` into tokens: with `tokenizer`, the tokenizer of `weights` (read from
    the checkpoint's header, no tensors), or the default one of `config`."""
    from ..core.results import InputInfo, ModelInfo, TokenizeResult
    from ..core.tokenizers import model_tokenizer

    spec, _ = _spec({"config": config, "weights": weights, "tokenizer": tokenizer,
                     "corpus": corpus})
    # weights alone: their tokenizer is all that is needed, not their architecture (a GGUF
    # tokenizes even when tfx cannot run its model)
    cfg = None if spec.weights and not spec.config else spec_config(spec)
    tok = model_tokenizer(spec, cfg, table=False)
    text = _text(text)
    ids = tok.encode(text)
    decoded = tok.decode(ids)
    return TokenizeResult(
        # which config's default tokenizer applied (none when the weights chose it)
        model=ModelInfo(config=None if weights else cfg.name, weights=weights),
        input=InputInfo(text=text, tokens=tok.pieces(ids), ids=ids),
        tokenizer=tok.name, vocab_size=tok.vocab_size, n_tokens=len(ids), decoded=decoded,
        round_trip=decoded == text, special_tokens=tok.added_specials(ids))


@checked
def configs() -> ConfigsResult:
    """Every preset with its shape, switches and parameter count."""
    from ..core.presets import DEFAULT_CONFIG, PRESETS
    from ..core.params import total_params
    from ..core.results import ConfigsResult, Preset

    return ConfigsResult(default=DEFAULT_CONFIG,
                         presets=[Preset(cfg, total_params(cfg)) for cfg in PRESETS.values()])


@checked
def count_params(*, config: str | None = None, weights: str | None = None,
                 heads: int | None = None, layers: int | None = None,
                 d_model: int | None = None, context: int | None = None,
                 tie: bool | None = None, seq_len: int | None = None,
                 verify: bool = False, vocab_size: int | None = None) -> CountParamsResult:
    """Parameters, weight memory and FLOPs per token of a config, or of a checkpoint's
    architecture (read from its header: no tensors are loaded). `verify` builds the
    model on torch's meta device and compares its parameters with the count."""
    from ..core.spec import with_overrides
    from ..core.params import analyse
    from ..core.results import ModelInfo
    from ..errors import ConfigError, RangeError

    spec, _ = _spec({"config": config, "weights": weights, "heads": heads, "layers": layers,
                     "d_model": d_model, "context": context})
    if weights and tie is not None:
        raise ConfigError("--tie/--no-tie cannot change a checkpoint; drop it, or use "
                          "--config for random weights")
    if weights and vocab_size is not None:
        raise ConfigError("--vocab-size cannot change a checkpoint; drop it, or use "
                          "--config for random weights")
    cfg = with_overrides(spec_config(spec), tie=tie, vocab_size=vocab_size)
    if seq_len is not None and seq_len > cfg.context_length:
        raise RangeError(f"--seq-len {seq_len} is longer than the context length "
                         f"{cfg.context_length:,}; pass a shorter --seq-len or raise --context")
    result = analyse(cfg, seq_len, model=ModelInfo(config=cfg.name, weights=weights, cfg=cfg))
    if verify:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            from ..errors import MissingPackageError

            raise MissingPackageError("--verify builds the model and needs torch: "
                                      "pip install torch")
        from ..core.analysis.stages import verify_params

        result.verify = verify_params(cfg, result.total)
    return result


@checked
def train(*, output: str | Path, pairs: str | Path | None = None,
          text: str | Path | None = None, steps: int = 200, lr: float = 0.01,
          force: bool = False, **model: Any) -> TrainResult:
    """Train a model of `config` from random weights (`seed`) on source -> target `pairs`
    (a TSV; encoder–decoder configs) or on a `text` file (next tokens; decoder-only), and
    write the checkpoint folder `output` that `weights=` loads. The vocabulary is built
    from the data (word or char tokenizer)."""
    from ..core.analysis import train as training

    spec, hooks = _spec(model)
    if spec.weights:
        raise UsageError("tfx train starts from random weights; drop --weights and name the "
                         "architecture with --config")
    if spec.corpus is not None:
        raise UsageError("tfx train builds its vocabulary from the training data; drop "
                         "--corpus")
    for option, given in (("dtype", spec.dtype != "float32"), ("device", spec.device != "cpu"),
                          ("max_memory", spec.max_memory is not None)):
        if given:
            raise UsageError(f"tfx train trains in float32 on the CPU; drop {option}= (the "
                             "trained folder runs in any dtype and on any device)")
    if (pairs is None) == (text is None):
        raise UsageError("give what to learn: --pairs FILE.tsv (source<TAB>target lines, for "
                         "an encoder–decoder) or --text FILE (next tokens), one of them")
    cfg = spec_config(spec)
    data = training.read_pairs(Path(pairs)) if pairs is not None else \
        training.read_text_file(Path(text))
    return training.run(cfg, data, Path(output), steps=steps, lr=lr, seed=spec.seed,
                        tokenizer=spec.tokenizer, force=force, progress=hooks.progress)


# -- stage commands ------------------------------------------------------------------
@checked
def embed(text: str, *, truncate: bool = False, target: str | None = None,
          stack: str | None = None, **model: Any) -> EmbedResult:
    """Token embedding rows, positional rows and their sum (builds no block); the
    decoder's (of `target`) for an encoder–decoder."""
    return _model(model, blocks=0).embed(text, truncate=truncate, target=target, stack=stack)


@checked
def posenc(text: str | None = None, *, length: int | None = None, truncate: bool = False,
           **model: Any) -> PosencResult:
    """The positional encoding for `text`'s positions, or for positions 0..length-1."""
    from ..core.analysis.stages import posenc as posenc_stage
    from ..core.load import load as load_model, model_info

    _one_of_text_or_length(text, length)
    spec, hooks = _spec(model)
    cfg = spec_config(spec)
    if text is None and cfg.positional in ("sinusoidal", "rope", "none"):
        # the table follows from the config alone: no weights to build or load
        return posenc_stage(cfg, length=length, info=model_info(cfg, spec))
    # T5's bias table is the embedding's; UMT5's the first layer's
    blocks = 1 if cfg.positional == "relative" and cfg.relative_per_layer else 0
    return Model(load_model(spec, blocks=blocks, **hooks)).posenc(
        text, length=length, truncate=truncate)


@checked
def attend(text: str | None = None, *, layer: int = 0, head: int | None = None,
           mask: str | None = None, kv: str | None = None, valid_lens: int | None = None,
           show: Sequence[str] | None = None, explain: bool = False,
           query_pos: int | None = None, inputs: str | Path | None = None,
           truncate: bool = False, ablate: Sequence[str] | None = None,
           ablate_mode: str | None = None, target: str | None = None,
           stack: str | None = None, cross: bool = False, sae: str | None = None,
           sae_site: str | None = None,
           **model: Any) -> AttendResult | AttendInputsResult:
    """One layer's attention, stage by stage (blocks 0..layer are built and run); or,
    with `inputs`, attention on hand-made matrices from a JSON file."""
    if inputs is not None:
        from ..core.analysis.inputs import attend_inputs

        if text is not None:
            raise InputTextError("give TEXT or --inputs FILE.json, not both")
        given = {"--layer": layer or None, "--mask": mask, "--kv": kv,
                 "--valid-lens": valid_lens, "--truncate": truncate or None,
                 "--ablate": ablate or None, "--ablate-mode": ablate_mode,
                 "--target": target, "--stack": stack, "--cross": cross or None,
                 "--sae": sae, "--sae-site": sae_site}
        given.update({"--" + k.replace("_", "-"): v for k, v in model.items()
                      if k in SPEC_DEFAULTS and v != SPEC_DEFAULTS[k]})
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise InputTextError(f"{named[0]} does not apply to --inputs: the file is one "
                                 "layer, its weights, mask and valid_lens are keys in it, "
                                 "and no model is built")
        return attend_inputs(inputs, head=head, explain=explain, query_pos=query_pos,
                             show=show)
    _check_edits(ablate=ablate, ablate_mode=ablate_mode, sae=sae, sae_site=sae_site)
    _check_layer(model, layer, target=target, stack=stack)
    return _model(model, blocks=max(layer, 0) + 1).attend(
        text, layer=layer, head=head, mask=mask, kv=kv, valid_lens=valid_lens, show=show,
        explain=explain, query_pos=query_pos, truncate=truncate, ablate=ablate,
        ablate_mode=ablate_mode, target=target, stack=stack, cross=cross, sae=sae,
        sae_site=sae_site)


@checked
def layernorm(text: str, *, layer: int = 0, which: str = "ln1", truncate: bool = False,
              target: str | None = None, stack: str | None = None,
              **model: Any) -> LayerNormResult:
    """One norm: per-token mean and variance, the normalised rows, γ, β and the output."""
    from ..core.analysis.stages import layernorm_blocks

    if which in ("ln1", "ln2", "ln3"):
        _check_layer(model, layer, target=target, stack=stack)
    return _model(model, blocks=layernorm_blocks(which, layer)).layernorm(
        text, layer=layer, which=which, truncate=truncate, target=target, stack=stack)


@checked
def ffn(text: str, *, layer: int = 0, truncate: bool = False, target: str | None = None,
        stack: str | None = None, **model: Any) -> FFNResult:
    """One feed-forward sublayer: hidden pre-activation, activation and output."""
    _check_layer(model, layer, target=target, stack=stack)
    return _model(model, blocks=max(layer, 0) + 1).ffn(text, layer=layer, truncate=truncate,
                                                       target=target, stack=stack)


@checked
def trace(text: str, *, select: Sequence[str] | None = None, truncate: bool = False,
          ablate: Sequence[str] | None = None, ablate_mode: str | None = None,
          steer: str | None = None, toward: str | None = None, away: str | None = None,
          scale: float | None = None, target: str | None = None,
          sae: str | None = None, sae_site: str | None = None,
          steer_feature: str | None = None, **model: Any) -> TraceResult:
    """The whole forward pass, recording the trace names `select` picks (globs)."""
    edits = dict(ablate=ablate, ablate_mode=ablate_mode, steer=steer, toward=toward,
                 away=away, scale=scale, sae=sae, sae_site=sae_site,
                 steer_feature=steer_feature)
    _check_edits(**edits)
    return _model(model).trace(text, select=select, truncate=truncate, target=target,
                               **edits)


@checked
def model_config(**model: Any):
    """The ModelConfig the model options name (a preset with overrides, or a checkpoint's
    architecture read from its header): no weights are built or loaded."""
    spec, hooks = _spec(model)
    return spec_config(spec, progress=hooks.progress)




@checked
def generate(prompt: str, *, max_new_tokens: int = 20, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None,
             stop: Sequence[str] | None = None, candidates: int = 5, no_cache: bool = False,
             select: Sequence[str] | None = None, truncate: bool = False,
             ignore_eos: bool = False, on_text: Callable[[str], None] | None = None,
             ablate: Sequence[str] | None = None, ablate_mode: str | None = None,
             steer: str | None = None, toward: str | None = None, away: str | None = None,
             scale: float | None = None, target: str | None = None,
             sae: str | None = None, sae_site: str | None = None,
             steer_feature: str | None = None, transcoders: str | None = None,
             set_feature: Sequence[str] | None = None, freeze_attention: bool = True,
             constrained_layers: str | None = None, allow_inactive: bool = False,
             **model: Any) -> GenerateResult:
    """Decode token by token after `prompt` (greedy unless temperature > 0); `on_text`
    receives the continuation as it is produced. `set_feature` (with `transcoders`):
    transcoder features set on the prompt's pass, as circuit-tracer's
    feature_intervention (`freeze_attention`, `constrained_layers` "START:END"); a feature
    not active at its position is refused unless `allow_inactive`. With `transcoders` the
    prompt's ids are graph's (a special token first when the text starts with none), so
    positions are the graph's; generated tokens continue that count."""
    from ._circuits import feature_edits

    from ..core.analysis.sampling import Sampling, check_new_tokens, check_sampling

    check_new_tokens(max_new_tokens)
    check_sampling(Sampling(temperature=temperature, top_k=top_k, top_p=top_p))
    edits = dict(ablate=ablate, ablate_mode=ablate_mode, steer=steer, toward=toward,
                 away=away, scale=scale, sae=sae, sae_site=sae_site,
                 steer_feature=steer_feature)
    _check_edits(**edits)
    _needs_head(model, "generate")
    _masked_lm_checks(model, "generate")
    with feature_edits(model, prompt, transcoders=transcoders, set_feature=set_feature,
                       freeze_attention=freeze_attention,
                       constrained_layers=constrained_layers, truncate=truncate,
                       no_cache=no_cache, allow_inactive=allow_inactive) as record:
        return record(_model(model).generate(
            prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
            top_p=top_p, stop=stop, candidates=candidates, no_cache=no_cache,
            select=select, truncate=truncate, ignore_eos=ignore_eos, on_text=on_text,
            target=target, bos=transcoders is not None, **edits))


@checked
def next(text: str, *, temperature: float = 1.0, top_k: int | None = None,  # noqa: A001
         top_p: float | None = None, candidates: int = 10, truncate: bool = False,
         ablate: Sequence[str] | None = None, ablate_mode: str | None = None,
         steer: str | None = None, toward: str | None = None, away: str | None = None,
         scale: float | None = None, target: str | None = None, sae: str | None = None,
         sae_site: str | None = None, steer_feature: str | None = None,
         transcoders: str | None = None, set_feature: Sequence[str] | None = None,
         freeze_attention: bool = True, constrained_layers: str | None = None,
         allow_inactive: bool = False, **model: Any) -> NextResult:
    """The distribution over the token after `text`, and what sampling filters keep.
    `set_feature` (with `transcoders`): transcoder features set, as circuit-tracer's
    feature_intervention (`freeze_attention`, `constrained_layers` "START:END"); a feature
    not active at its position is refused unless `allow_inactive`. With `transcoders` the
    ids are graph's (a special token first when the text starts with none): the plain
    prediction is the graph's and positions are the graph's."""
    from ._circuits import feature_edits

    from ..core.analysis.sampling import Sampling, check_sampling

    check_sampling(Sampling(temperature=temperature, top_k=top_k, top_p=top_p))
    edits = dict(ablate=ablate, ablate_mode=ablate_mode, steer=steer, toward=toward,
                 away=away, scale=scale, sae=sae, sae_site=sae_site,
                 steer_feature=steer_feature)
    _check_edits(**edits)
    _needs_head(model, "next")
    _masked_lm_checks(model, "next", text)
    with feature_edits(model, text, transcoders=transcoders, set_feature=set_feature,
                       freeze_attention=freeze_attention,
                       constrained_layers=constrained_layers, truncate=truncate,
                       allow_inactive=allow_inactive) as record:
        return record(_model(model).next(text, temperature=temperature, top_k=top_k,
                                         top_p=top_p, candidates=candidates,
                                         truncate=truncate, target=target,
                                         bos=transcoders is not None, **edits))


@checked
def lens(text: str, *, truncate: bool = False, ablate: Sequence[str] | None = None,
         ablate_mode: str | None = None, target: str | None = None,
         sae: str | None = None, sae_site: str | None = None, **model: Any) -> LensResult:
    """Logit lens: every layer's residual stream read through ln_f and the head (an
    encoder–decoder's decoder, on `target`)."""
    _check_edits(ablate=ablate, ablate_mode=ablate_mode, sae=sae, sae_site=sae_site)
    _needs_head(model, "lens")
    return _model(model).lens(text, truncate=truncate, ablate=ablate, ablate_mode=ablate_mode,
                              target=target, sae=sae, sae_site=sae_site)


@checked
def report(text: str, *, show_layers: str | Iterable[int] | None = None, candidates: int = 5,
           truncate: bool = False, output: str | Path | None = None, force: bool = False,
           ablate: Sequence[str] | None = None, ablate_mode: str | None = None,
           target: str | None = None, sae: str | None = None, sae_site: str | None = None,
           **model: Any) -> ReportResult:
    """What `tfx report` puts on its HTML page; with `output`, the page is written (an
    encoder–decoder's decoder, self- and cross-attention, with `target`)."""
    if output is not None:
        from ..render.plot import check_output_path

        check_output_path(output, force, suffixes=(".html", ".htm"), option="--output")
    _check_edits(ablate=ablate, ablate_mode=ablate_mode, sae=sae, sae_site=sae_site)
    return _model(model).report(text, show_layers=show_layers, candidates=candidates,
                                truncate=truncate, output=output, force=force, ablate=ablate,
                                ablate_mode=ablate_mode, target=target, sae=sae,
                                sae_site=sae_site)


# -- interventions -----------------------------------------------------------------
@checked
def patch(clean: str | None = None, *, corrupt: str | None = None,
          answer: str | None = None, wrong: str | None = None,
          pairs: str | Path | None = None, site: str = "resid_pre",
          batch: int | None = None, truncate: bool = False,
          ablate: Sequence[str] | None = None, ablate_mode: str | None = None,
          target: str | None = None, engine: str = "local",
          ray_address: str | None = None, workers: int | None = None,
          gpus_per_worker: float | None = None, verbose: bool = False,
          sae: str | None = None, sae_site: str | None = None,
          **model: Any) -> PatchResult | PatchPairsResult:
    """Activation patching: run `corrupt`, put in `clean`'s activation at one cell of
    `site` (resid_pre, attn_out, ffn_out: every layer × position; heads: every layer ×
    head; features: every feature of the SAE `sae` × position), and measure
    m = logit(answer) - logit(wrong) at the last position.
    tensors["patch.effect"] = (m - m_corrupt) / (m_clean - m_corrupt) per cell. An
    encoder–decoder's CLEAN and CORRUPT are sources read against `target`; its sweep
    covers both stacks (patch.encoder.effect, patch.decoder.effect, patch.cross.effect).
    With `pairs` (a JSONL file of {clean, corrupt, answer, wrong} lines) the effect is
    averaged over the pairs (tensors["patch.effect_std"]: its standard deviation), run by
    `engine` ("local", or "ray" with ray_address, workers, gpus_per_worker, verbose: see
    api.scan)."""
    from ..core.analysis.patching import check_site

    check_site(site, sae is not None)
    if pairs is not None:
        from ._datasets import patch_pairs

        given = [name for name, value in (("CLEAN", clean), ("--corrupt", corrupt),
                                          ("--answer", answer), ("--wrong", wrong),
                                          ("--truncate", truncate or None),
                                          ("--ablate", ablate or None),
                                          ("--target", target), ("--sae", sae),
                                          ("--sae-site", sae_site)) if value is not None]
        if given:
            raise UsageError(f"{given[0]} does not go with --pairs: every pair brings its own "
                             "clean, corrupt, answer and wrong; drop it")
        _needs_head(model, "patch")
        return patch_pairs(pairs, site=site, batch=batch, engine=engine,
                           ray_address=ray_address, workers=workers,
                           gpus_per_worker=gpus_per_worker, verbose=verbose, **model)
    engine_given = [name for name, value in (
        ("--engine", None if engine == "local" else engine), ("--ray-address", ray_address),
        ("--workers", workers), ("--gpus-per-worker", gpus_per_worker)) if value is not None]
    if engine_given:
        raise UsageError(f"{engine_given[0]} applies to patch --pairs (many prompt pairs); a "
                         f"single patch runs in this process: drop {engine_given[0]}")
    for option, value in (("--corrupt", corrupt), ("--answer", answer), ("--wrong", wrong)):
        if value is None:
            raise UsageError(f"{option} is missing; tfx patch CLEAN --corrupt TEXT --answer "
                             "TOKEN --wrong TOKEN (or --pairs FILE.jsonl)")
    _check_edits(ablate=ablate, ablate_mode=ablate_mode, sae=sae, sae_site=sae_site,
                 sae_used=True)
    _needs_head(model, "patch")
    _masked_lm_checks(model, "patch")
    return _model(model).patch(clean, corrupt=corrupt, answer=answer, wrong=wrong, site=site,
                               batch=batch, truncate=truncate, ablate=ablate,
                               ablate_mode=ablate_mode, target=target, sae=sae,
                               sae_site=sae_site)


@checked
def attribute(text: str, *, answer: str, wrong: str | None = None, per_head: bool = False,
              truncate: bool = False, target: str | None = None, sae: str | None = None,
              sae_site: str | None = None,
              **model: Any) -> AttributeResult:
    """Direct logit attribution: the logit of `answer` (minus `wrong`'s) at the last
    position, split into the embedding, every attention output (every head with
    `per_head`) and every FFN output through the frozen final norm, plus a remainder;
    result.parts sum to result.logit_diff. An encoder–decoder's is the decoder's, after
    `target`: its embedding, self-attention, cross-attention and FFN outputs. With `sae`,
    its site's share is split into the SAE's features (features.{k}, bias, error)."""
    if sae is not None or sae_site is not None:
        _check_edits(sae=sae, sae_site=sae_site, sae_used=True)
    _needs_head(model, "attribute")
    _masked_lm_checks(model, "attribute")
    return _model(model).attribute(text, answer=answer, wrong=wrong, per_head=per_head,
                                   truncate=truncate, target=target, sae=sae,
                                   sae_site=sae_site)
