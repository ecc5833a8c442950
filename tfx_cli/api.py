"""The Python API: every command as a function that returns the typed result it prints.

    from tfx_cli import api

    r = api.attend("When you play game of thrones", config="toy")
    r.tensors["blocks.0.attn.pattern"]      # numpy array, dims (H, T, S)
    r.explain, r.heads, r.mask              # the result's fields, by name
    r.to_dict()                             # exactly what `tfx attend ... --json` prints

    m = api.load(config="gpt124m", seed=123)  # build (or load) once, run many stages
    m.attend("Hello, I am", layer=3, head=5)
    m.trace("Hello, I am", select=["blocks.*.attn.pattern"]).arrays()

Keyword arguments are the command-line option names, with '_' for '-' (`max_new_tokens`
for --max-new-tokens). Every function that runs a model also takes the model options:
config, weights, seed, heads, layers, d_model, context, tokenizer, corpus,
no_cache_weights, force, dtype, max_memory, device, `progress` (a context-manager
factory shown while real weights load; the CLI passes its stderr progress bar) and
`notice` (called with one-line notes, such as a checkpoint being streamed from disk; the
CLI prints them on stderr). Bad values raise the same
`tfx_cli.errors.TfxError` subclasses whose one-line messages the CLI prints.

Importing this module does not import torch: the first model does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from typing import TYPE_CHECKING

from .core.config import SPEC_DEFAULTS, SPEC_FIELDS, ModelSpec, spec_config
from .errors import InputTextError, UsageError

if TYPE_CHECKING:  # the result classes load with the command that makes them
    from .core.results import (AttendInputsResult, AttendResult, ConfigsResult,
                               CountParamsResult, EmbedResult, FFNResult, GenerateResult,
                               LayerNormResult, LensResult, NextResult, PosencResult,
                               ReportResult, TokenizeResult, TraceResult)

__all__ = ["load", "Model", "tokenize", "configs", "count_params", "embed", "posenc",
           "attend", "layernorm", "ffn", "trace", "generate", "next", "lens", "report",
           "report_html", "write_report"]


class _Hooks(dict):
    """progress and notice: how a call shows its long work and its notes."""

    @property
    def progress(self):
        return self.get("progress")


def _spec(options: dict[str, Any]) -> tuple[ModelSpec, _Hooks]:
    """The model options of a call -> (ModelSpec, hooks for stages.load); unknown names
    are a TypeError naming the valid ones."""
    options = dict(options)
    hooks = _Hooks(progress=options.pop("progress", None), notice=options.pop("notice", None))
    unknown = sorted(set(options) - set(SPEC_FIELDS))
    if unknown:
        raise TypeError(f"unknown model option(s) {', '.join(unknown)}; valid: "
                        f"{', '.join(SPEC_FIELDS)}, progress, notice")
    for name in ("config", "weights", "tokenizer"):
        if options.get(name) is not None and not str(options[name]).strip():
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} is empty; give a value, or leave {flag} out for the "
                             "default")
    if options.get("corpus") is not None:
        options["corpus"] = Path(options["corpus"])
    from .core.memory import check_device, check_dtype, parse_size

    check_dtype(options.get("dtype", "float32"))
    check_device(options.get("device", "cpu"))
    if options.get("max_memory") is not None:
        parse_size(options["max_memory"])
    return ModelSpec(**options), hooks


def load(**model: Any) -> "Model":
    """A model to run many stages on: `api.load(config="gpt124m", seed=123)`, or real
    weights with `api.load(weights="smollm2")`. Takes the model options only."""
    from .core import stages

    spec, hooks = _spec(model)
    return Model(stages.load(spec, **hooks))


def _model(options: dict, *, blocks: int | None = None) -> "Model":
    from .core import stages

    spec, hooks = _spec(options)
    return Model(stages.load(spec, blocks=blocks, **hooks))


def _text(text: str | None, what: str = "text") -> str:
    if text is None:
        raise InputTextError(f"no {what} given; pass it as an argument or '-' to read stdin")
    if not isinstance(text, str) or not text.strip():
        raise InputTextError(f"the {what} is empty; give at least one word, e.g. \"Hello\"")
    return text


class Model:
    """A loaded model: every stage command as a method, all on the same weights.

    `config` is its ModelConfig, `tokenizer` its tokenizer and `module` the torch
    `Transformer` itself (for hooks or experiments of your own).
    """

    def __init__(self, loaded):
        self._loaded = loaded

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

    def embed(self, text: str, *, truncate: bool = False) -> EmbedResult:
        from .core import stages

        return stages.embed(self._loaded, _text(text), truncate=truncate)

    def posenc(self, text: str | None = None, *, length: int | None = None,
               truncate: bool = False) -> PosencResult:
        from .core import stages

        _one_of_text_or_length(text, length)
        return stages.posenc(self._loaded, None if text is None else _text(text),
                             length=length, truncate=truncate)

    def attend(self, text: str, *, layer: int = 0, head: int | None = None,
               mask: str | None = None, kv: str | None = None,
               valid_lens: int | None = None, show: Sequence[str] | None = None,
               explain: bool = False, query_pos: int | None = None,
               truncate: bool = False) -> AttendResult:
        from .core import stages

        if mask not in (None, "causal", "none"):
            raise UsageError(f"--mask {mask!r} is not a mask; valid: causal, none")
        return stages.attend(self._loaded, _text(text), layer=layer, head=head, mask=mask,
                             kv=None if kv is None else _text(kv, "--kv text"),
                             valid_lens=valid_lens, explain=explain, query_pos=query_pos,
                             show=list(show or ()), truncate=truncate)

    def layernorm(self, text: str, *, layer: int = 0, which: str = "ln1",
                  truncate: bool = False) -> LayerNormResult:
        from .core import stages

        if which not in stages.NORM_CHOICES:
            raise UsageError(f"--which {which!r} is not a norm; valid: "
                             f"{', '.join(stages.NORM_CHOICES)}")
        return stages.layernorm(self._loaded, _text(text), layer=layer, which=which,
                                truncate=truncate)

    def ffn(self, text: str, *, layer: int = 0, truncate: bool = False) -> FFNResult:
        from .core import stages

        return stages.ffn(self._loaded, _text(text), layer=layer, truncate=truncate)

    def trace(self, text: str, *, select: Sequence[str] | None = None,
              truncate: bool = False) -> TraceResult:
        from .core import stages

        return stages.trace(self._loaded, _text(text), list(select or ()),
                            truncate=truncate)

    def generate(self, prompt: str, *, max_new_tokens: int = 20, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None,
                 stop: Sequence[str] | None = None, candidates: int = 5,
                 no_cache: bool = False, select: Sequence[str] | None = None,
                 truncate: bool = False, ignore_eos: bool = False,
                 on_text: Callable[[str], None] | None = None) -> GenerateResult:
        from .core.generate import Sampling, generate

        return generate(self._loaded, _text(prompt, "prompt"), max_new_tokens=max_new_tokens,
                        sampling=Sampling(temperature=temperature, top_k=top_k, top_p=top_p),
                        use_cache=not no_cache, n_candidates=candidates,
                        select=list(select or ()), stops=list(stop or ()), on_text=on_text,
                        truncate=truncate, ignore_eos=ignore_eos)

    def next(self, text: str, *, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, candidates: int = 10,
             truncate: bool = False) -> NextResult:
        from .core.generate import Sampling, next_token

        return next_token(self._loaded, _text(text, "prompt"),
                          sampling=Sampling(temperature=temperature, top_k=top_k,
                                            top_p=top_p),
                          n_candidates=candidates, truncate=truncate)

    def lens(self, text: str, *, truncate: bool = False) -> LensResult:
        from .core.generate import lens

        return lens(self._loaded, _text(text), truncate=truncate)

    def report(self, text: str, *, show_layers: str | Iterable[int] | None = None,
               candidates: int = 5, truncate: bool = False, output: str | Path | None = None,
               force: bool = False) -> ReportResult:
        """What the HTML page shows; with `output`, the page is written there too."""
        from .core import stages

        n = self._loaded.cfg.n_layers
        if show_layers is None or isinstance(show_layers, str):
            layers = stages.report_layers(show_layers, n)
        else:
            layers = sorted(set(int(x) for x in show_layers))
            for layer in layers:
                stages.check_range("layer", layer, n, "--show-layers")
        path = None
        if output is not None:
            from .render.plot import check_output_path

            path = check_output_path(output, force, suffixes=(".html", ".htm"),
                                     option="--output")
        result = stages.report(self._loaded, _text(text), layers=layers, top_k=candidates,
                               truncate=truncate, output=None if path is None else str(path))
        if path is not None:
            write_report(result, path, force=force)
        return result


def _one_of_text_or_length(text, length) -> None:
    if (text is None) == (length is None):
        raise InputTextError("give TEXT or --length N (one of them), e.g. "
                             "`tfx posenc --length 16`")


# -- commands without a model --------------------------------------------------------
def tokenize(text: str, *, tokenizer: str | None = None, corpus: str | Path | None = None,
             config: str | None = None, weights: str | None = None) -> TokenizeResult:
    """Split `text` into tokens: with `tokenizer`, the tokenizer of `weights` (read from
    the checkpoint's header, no tensors), or the default one of `config`."""
    from .core.results import InputInfo, ModelInfo, TokenizeResult
    from .core.tokenizers import model_tokenizer

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


def configs() -> ConfigsResult:
    """Every preset with its shape, switches and parameter count."""
    from .core.config import DEFAULT_CONFIG, PRESETS
    from .core.params import total_params
    from .core.results import ConfigsResult, Preset

    return ConfigsResult(default=DEFAULT_CONFIG,
                         presets=[Preset(cfg, total_params(cfg)) for cfg in PRESETS.values()])


def count_params(*, config: str | None = None, weights: str | None = None,
                 heads: int | None = None, layers: int | None = None,
                 d_model: int | None = None, context: int | None = None,
                 tie: bool | None = None, seq_len: int | None = None,
                 verify: bool = False) -> CountParamsResult:
    """Parameters, weight memory and FLOPs per token of a config, or of a checkpoint's
    architecture (read from its header: no tensors are loaded). `verify` builds the
    model on torch's meta device and compares its parameters with the count."""
    from .core.config import with_overrides
    from .core.params import analyse
    from .core.results import ModelInfo
    from .errors import ConfigError, RangeError

    spec, _ = _spec({"config": config, "weights": weights, "heads": heads, "layers": layers,
                     "d_model": d_model, "context": context})
    if weights and tie is not None:
        raise ConfigError("--tie/--no-tie cannot change a checkpoint; drop it, or use "
                          "--config for random weights")
    cfg = with_overrides(spec_config(spec), tie=tie)
    if seq_len is not None and seq_len > cfg.context_length:
        raise RangeError(f"--seq-len {seq_len} is longer than the context length "
                         f"{cfg.context_length:,}; pass a shorter --seq-len or raise --context")
    result = analyse(cfg, seq_len, model=ModelInfo(config=cfg.name, weights=weights, cfg=cfg))
    if verify:
        try:
            import torch  # noqa: F401
        except ImportError:
            from .errors import MissingPackageError

            raise MissingPackageError("--verify builds the model and needs torch: "
                                      "pip install torch") from None
        from .core.stages import verify_params

        result.verify = verify_params(cfg, result.total)
    return result


# -- stage commands ------------------------------------------------------------------
def embed(text: str, *, truncate: bool = False, **model: Any) -> EmbedResult:
    """Token embedding rows, positional rows and their sum (builds no block)."""
    return _model(model, blocks=0).embed(text, truncate=truncate)


def posenc(text: str | None = None, *, length: int | None = None, truncate: bool = False,
           **model: Any) -> PosencResult:
    """The positional encoding for `text`'s positions, or for positions 0..length-1."""
    from .core import stages

    _one_of_text_or_length(text, length)
    spec, hooks = _spec(model)
    cfg = spec_config(spec)
    if text is None and cfg.positional in ("sinusoidal", "rope", "none"):
        # the table follows from the config alone: no weights to build or load
        return stages.posenc(cfg, length=length, info=stages.model_info(cfg, spec))
    return Model(stages.load(spec, blocks=0, **hooks)).posenc(
        text, length=length, truncate=truncate)


def attend(text: str | None = None, *, layer: int = 0, head: int | None = None,
           mask: str | None = None, kv: str | None = None, valid_lens: int | None = None,
           show: Sequence[str] | None = None, explain: bool = False,
           query_pos: int | None = None, inputs: str | Path | None = None,
           truncate: bool = False, **model: Any) -> AttendResult | AttendInputsResult:
    """One layer's attention, stage by stage (blocks 0..layer are built and run); or,
    with `inputs`, attention on hand-made matrices from a JSON file."""
    if inputs is not None:
        from .core.inputs import attend_inputs

        if text is not None:
            raise InputTextError("give TEXT or --inputs FILE.json, not both")
        given = {"--layer": layer or None, "--mask": mask, "--kv": kv,
                 "--valid-lens": valid_lens, "--truncate": truncate or None}
        given.update({"--" + k.replace("_", "-"): v for k, v in model.items()
                      if k in SPEC_DEFAULTS and v != SPEC_DEFAULTS[k]})
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise InputTextError(f"{named[0]} does not apply to --inputs: the file is one "
                                 "layer, its weights, mask and valid_lens are keys in it, "
                                 "and no model is built")
        return attend_inputs(inputs, head=head, explain=explain, query_pos=query_pos,
                             show=show)
    _check_layer(model, layer)
    return _model(model, blocks=max(layer, 0) + 1).attend(
        text, layer=layer, head=head, mask=mask, kv=kv, valid_lens=valid_lens, show=show,
        explain=explain, query_pos=query_pos, truncate=truncate)


def layernorm(text: str, *, layer: int = 0, which: str = "ln1", truncate: bool = False,
              **model: Any) -> LayerNormResult:
    """One norm: per-token mean and variance, the normalised rows, γ, β and the output."""
    from .core.stages import layernorm_blocks

    if which in ("ln1", "ln2"):
        _check_layer(model, layer)
    return _model(model, blocks=layernorm_blocks(which, layer)).layernorm(
        text, layer=layer, which=which, truncate=truncate)


def ffn(text: str, *, layer: int = 0, truncate: bool = False, **model: Any) -> FFNResult:
    """One feed-forward sublayer: hidden pre-activation, activation and output."""
    _check_layer(model, layer)
    return _model(model, blocks=max(layer, 0) + 1).ffn(text, layer=layer, truncate=truncate)


def trace(text: str, *, select: Sequence[str] | None = None, truncate: bool = False,
          **model: Any) -> TraceResult:
    """The whole forward pass, recording the trace names `select` picks (globs)."""
    return _model(model).trace(text, select=select, truncate=truncate)


def _check_layer(model: dict, layer: int) -> None:
    """A --layer past the model is refused from its config (a checkpoint's header),
    before any weights are read: a 27 GB checkpoint answers at once."""
    from .core.stages import check_range

    spec, hooks = _spec(model)
    check_range("layer", layer, spec_config(spec, progress=hooks.progress).n_layers, "--layer")


def _needs_head(model: dict, command: str) -> None:
    """Refuse a model without an output head before building or loading it."""
    from .core.generate import need_head

    spec, hooks = _spec(model)
    need_head(spec_config(spec, progress=hooks.progress), command)


def generate(prompt: str, *, max_new_tokens: int = 20, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None,
             stop: Sequence[str] | None = None, candidates: int = 5, no_cache: bool = False,
             select: Sequence[str] | None = None, truncate: bool = False,
             ignore_eos: bool = False, on_text: Callable[[str], None] | None = None,
             **model: Any) -> GenerateResult:
    """Decode token by token after `prompt` (greedy unless temperature > 0); `on_text`
    receives the continuation as it is produced."""
    from .core.generate import Sampling, check_new_tokens, check_sampling

    check_new_tokens(max_new_tokens)
    check_sampling(Sampling(temperature=temperature, top_k=top_k, top_p=top_p))
    _needs_head(model, "generate")
    return _model(model).generate(
        prompt, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
        top_p=top_p, stop=stop, candidates=candidates, no_cache=no_cache, select=select,
        truncate=truncate, ignore_eos=ignore_eos, on_text=on_text)


def next(text: str, *, temperature: float = 1.0, top_k: int | None = None,  # noqa: A001
         top_p: float | None = None, candidates: int = 10, truncate: bool = False,
         **model: Any) -> NextResult:
    """The distribution over the token after `text`, and what sampling filters keep."""
    from .core.generate import Sampling, check_sampling

    check_sampling(Sampling(temperature=temperature, top_k=top_k, top_p=top_p))
    _needs_head(model, "next")
    return _model(model).next(text, temperature=temperature, top_k=top_k, top_p=top_p,
                              candidates=candidates, truncate=truncate)


def lens(text: str, *, truncate: bool = False, **model: Any) -> LensResult:
    """Logit lens: every layer's residual stream read through ln_f and the head."""
    _needs_head(model, "lens")
    return _model(model).lens(text, truncate=truncate)


def report(text: str, *, show_layers: str | Iterable[int] | None = None, candidates: int = 5,
           truncate: bool = False, output: str | Path | None = None, force: bool = False,
           **model: Any) -> ReportResult:
    """What `tfx report` puts on its HTML page; with `output`, the page is written."""
    if output is not None:
        from .render.plot import check_output_path

        check_output_path(output, force, suffixes=(".html", ".htm"), option="--output")
    return _model(model).report(text, show_layers=show_layers, candidates=candidates,
                                truncate=truncate, output=output, force=force)


def report_html(result: ReportResult) -> str:
    """The self-contained HTML page of a report result."""
    from .render.report import build_html

    return build_html(result)


def write_report(result: ReportResult, path: str | Path, *, force: bool = False) -> int:
    """Write the page atomically (a temporary file renamed into place); returns its size
    in bytes."""
    from .render.plot import atomic_output

    page = report_html(result).encode("utf-8")
    with atomic_output(Path(path), force) as tmp:
        tmp.write_bytes(page)
    result.output = str(path)
    return len(page)
