"""api.graph: the attribution graph of a text's next token, on transcoders, or one read
back from its file (open=); api.open_graph: the same, for a file alone."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import UsageError
from ._model import _model
from ._options import _text, checked, option_name

if TYPE_CHECKING:
    from ..core.results.circuits import GraphResult


# What makes a graph, which a saved one already is (the thresholds prune it: a saved
# unpruned graph takes them, a graph.json is pruned already)
_MAKING = ("transcoders", "max_logits", "logit_prob", "targets", "max_features", "save",
           "labels", "truncate")
_PRUNING = ("node_threshold", "edge_threshold")


@checked
def graph(text: str | None = None, *, transcoders: str | None = None,
          max_logits: int | None = None, logit_prob: float | None = None,
          targets: Sequence[str] | None = None, max_features: int | None = None,
          node_threshold: float | None = None, edge_threshold: float | None = None,
          save: str | Path | None = None, truncate: bool = False,
          labels: Sequence[str] | None = None, open: str | Path | None = None,
          output: str | Path | None = None, html: str | Path | None = None,
          max_links: int | None = None, **model: Any) -> "GraphResult":
    """The attribution graph of `text`'s next token on the transcoder set `transcoders`
    (circuit-tracer's layout): nodes (features, errors, tokens, logits) pruned to
    `node_threshold` / `edge_threshold` of the influence, the two scores, and tensor
    graph.adjacency (targets × sources in result.nodes order). `save`: the unpruned graph
    (safetensors), which `open` reads back and prunes again at any thresholds; `open`
    also reads a graph.json (pruned already: no thresholds) and runs no model. `output`:
    graph.json; `html`: the page drawing it; both with at most `max_links` edges (0: all).
    An option left None takes its default, declared once in tfx_cli/option_table.py (as
    `tfx graph --help` shows it); files are checked before any work, and replaced only
    with `force`."""
    from ..core.outputs import check_output_files

    given = {name: value for name, value in locals().items()
             if name in (*_MAKING, *_PRUNING) and value is not None and value is not False}
    given.update((k, v) for k, v in model.items() if k not in _HOOKS and v is not None)
    option = _declared(locals())
    force, notice = bool(model.get("force")), model.get("notice")
    if open is not None:
        return _reopen(open, text, given, option, output, html, force, notice)
    if transcoders is None:
        raise UsageError("--transcoders is missing; tfx graph TEXT --transcoders DIR")
    text = _text(text)
    files = check_output_files({"-o": (output, "graph.json"), "--html": (html, "graph.html"),
                                "--save": (save, "graph.safetensors")}, force)
    from ..core.circuits.run import graph as run_graph

    result = run_graph(_model(model)._loaded, text, transcoders=str(transcoders),
                       max_logits=option["max_logits"], logit_prob=option["logit_prob"],
                       targets=list(targets) if targets else None,
                       max_features=option["max_features"],
                       node_threshold=option["node_threshold"],
                       edge_threshold=option["edge_threshold"], truncate=truncate,
                       labels=[str(x) for x in labels] if labels else None,
                       save=files.get("--save"), force=force,
                       progress=model.get("progress"))
    _write_views(result, files, force, option["max_links"], notice)
    return result


_HOOKS = ("progress", "notice", "force")  # how a call runs, not what it makes


def _declared(arguments: dict) -> dict:
    """The graph's options as given, each left None at its declared default."""
    from ..option_table import BLOCKS, options_of

    declared = options_of("graph")
    return {name: declared[name].default if arguments.get(name) is None else arguments[name]
            for name in ("transcoders", *BLOCKS["graph"])}


def _reopen(path, text, given: dict, option: dict, output, html, force: bool, notice):
    """`open`: the graph file at `path` (an unpruned --save file, pruned again at the
    thresholds; or a graph.json), refusing what makes (or, for graph.json, prunes) a
    graph, named as the command line spells it."""
    from ..core.circuits.graphfile import is_safetensors, open_graph as read_graph
    from ..core.outputs import check_output_files

    if text is not None:
        raise UsageError(f"--open {path} shows a saved graph, so it takes no TEXT; drop "
                         f"{text!r:.40}, or drop --open to compute the text's graph")
    saved = is_safetensors(path)
    for name in given:
        if name in _PRUNING and saved:
            continue
        flag = option_name(name, "graph")
        made = "made" if saved else "made and pruned"
        raise UsageError(f"--open {path} shows a saved graph, already {made}, so {flag} "
                         f"does not apply; drop {flag}, or drop --open to compute a graph")
    files = check_output_files({"-o": (output, "graph.json"),
                                "--html": (html, "graph.html")}, force)
    if saved:
        from ..core.circuits.run import open_saved

        result = open_saved(path, node_threshold=option["node_threshold"],
                            edge_threshold=option["edge_threshold"])
    else:
        result = read_graph(path)
    _write_views(result, files, force, option["max_links"], notice)
    return result


def _write_views(result, files: dict, force: bool, max_links: int, notice=None) -> None:
    """graph.json (-o) and the HTML page (--html), from the one mapping both writers
    read, with at most `max_links` edges (0: all; `notice` is told when some are left
    out); each written whole beside its name, moved into place once both are made."""
    from contextlib import ExitStack

    from ..core.circuits.neuronpedia import dumps, graph_json, strongest_links
    from ..core.outputs import atomic_file
    from ..core.results.circuits import graph_payload

    if not files.keys() & {"-o", "--html"}:
        return
    payload, total = strongest_links(graph_payload(result), max_links or None)
    if max_links and total > max_links and notice is not None:
        notice(f"graph.json/--html: the {max_links:,} strongest of the pruned graph's "
               f"{total:,} edges kept (--max-links 0 keeps all)")
    texts = {}
    if "-o" in files:
        texts["-o"] = dumps(graph_json(payload, slug=files["-o"].stem))
    if "--html" in files:
        from ..render.graph_page import graph_html

        texts["--html"] = graph_html(payload)
    with ExitStack() as stack:
        for option, text in texts.items():
            tmp = stack.enter_context(atomic_file(files[option], force=force, mode="umask"))
            tmp.write_text(text, encoding="utf-8")


def open_graph(path: str | Path) -> "GraphResult":
    """A graph file read back (`tfx graph --open`): the unpruned graph `tfx graph --save`
    wrote, pruned at the default thresholds (api.graph(open=..., node_threshold=...)
    prunes it at others), or a graph.json `tfx graph -o` or circuit-tracer's
    create_graph_files wrote (the layout Neuronpedia serves): nodes (a feature's clerp its
    label), tensor graph.adjacency from the links, the paths; the scores where the file
    holds them (None in circuit-tracer's files). Runs no model; draws itself in Jupyter as
    api.graph's result does."""
    if path is None or not isinstance(path, (str, Path)):
        raise UsageError("api.open_graph needs the path of a graph file, e.g. "
                         "api.open_graph(\"graph.json\")")
    return graph(open=path)


def feature_edits(model_options: dict, text: str, *, transcoders, set_feature,
                  freeze_attention: bool = True, constrained_layers: str | None = None,
                  truncate: bool = False, no_cache: bool = False,
                  allow_inactive: bool = False):
    """The context in which next's or generate's own first forward pass runs with
    transcoder features set (`set_feature`: LAYER:POS:FEATURE=VALUE strings), as
    circuit-tracer's feature_intervention; positions are the graph's: they count the ids
    `tfx graph` runs (with_bos: a special token first when the text starts with none),
    which next and generate run too when given `transcoders`; a feature not active at its
    position (in the plain run) is refused unless `allow_inactive`, one named twice or
    one `constrained_layers` drops is refused. It yields record(result), which adds each
    intervention, with the activation its value replaced, to result.interventions (the
    result unchanged when nothing is set; with `transcoders` alone the set is read and
    checked, the run is the graph's plain one)."""
    from contextlib import nullcontext

    from ..errors import UsageError

    if not set_feature:
        if constrained_layers is not None or allow_inactive:
            raise UsageError("--constrained-layers and --allow-inactive go with "
                             "--set-feature LAYER:POS:FEATURE=VALUE; add one, or drop them")
        if transcoders is not None:  # the graph's plain run: its model and set checked
            _transcoders(model_options, transcoders)
        return nullcontext(lambda result: result)
    if transcoders is None:
        raise UsageError("--set-feature needs --transcoders DIR (the transcoders whose "
                         "features it sets)")
    if no_cache:
        raise UsageError("--set-feature changes the prompt's pass, which later steps read "
                         "from the KV cache; drop --no-cache")
    from ..core.analysis.common import encode
    from ..core.circuits.intervene import (check_active, check_reach, intervening,
                                           parse_set_feature)

    loaded, tc = _transcoders(model_options, transcoders)
    ids = encode(loaded, _text(text), truncate=truncate, bos=True)
    texts = [str(x) for x in set_feature]
    changes = parse_set_feature(texts, n_layers=tc.n_layers, width=tc.width,
                                n_tokens=len(ids))
    constrained = _layer_range(constrained_layers, tc.n_layers)
    check_reach(tc, changes, texts, constrained)
    if not allow_inactive:
        check_active(loaded.model, ids, tc, changes, texts)
    return _recorded(intervening(loaded.model, ids, tc, changes,
                                 freeze_attention=freeze_attention, constrained=constrained),
                     changes, texts, str(transcoders))


@contextmanager
def _recorded(context, changes: list, texts: list[str], transcoders: str):
    """`context` entered; yields record(result), which appends one Intervention per
    --set-feature (its layer, position, feature, value and the activation it replaced)
    to result.interventions, after the command's own (--ablate, --steer)."""
    from ..core.results.interventions import Intervention

    with context as run:
        def record(result):
            done = [Intervention(kind="set", site=text, name=f"blocks.{layer}.ffn.out",
                                 position=pos, layer=layer, feature=feat, value=value,
                                 activation=run.replaced.get((layer, pos, feat)),
                                 transcoders=transcoders)
                    for text, (layer, pos, feat, value) in zip(texts, changes)]
            result.interventions = [*(result.interventions or []), *done]
            return result
        yield record


def _transcoders(model_options: dict, transcoders):
    """The model (one the replacement model is written for) and its transcoder set."""
    from ..core.analysis.replacement import open_transcoders

    loaded = _model(model_options)._loaded
    return loaded, open_transcoders(loaded, transcoders, "--transcoders")


def _layer_range(text: str | None, n_layers: int) -> range | None:
    from ..errors import UsageError

    if text is None:
        return None
    first, sep, last = str(text).partition(":")
    try:
        span = range(int(first), int(last)) if sep else range(int(first), int(first) + 1)
    except ValueError:
        raise UsageError(f"--constrained-layers {text} is not START:END; e.g. "
                         f"--constrained-layers 0:{n_layers}") from None
    if not span or span.start < 0 or span.stop > n_layers:
        raise UsageError(f"--constrained-layers {text} is not a range of this model's "
                         f"{n_layers} layers; e.g. --constrained-layers 0:{n_layers}")
    return span
