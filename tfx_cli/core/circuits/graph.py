"""The attribution graph as one object, and its influence, pruning and scores with
circuit-tracer 0.5.0's definitions (graph.py there: normalize_matrix, compute_influence,
find_threshold, prune_graph, compute_graph_scores, compute_partial_influences).

`NodeOrder` is where every node sits in an adjacency (targets × sources): features,
errors (layer-major), token embeddings, logits. Every index into a graph is computed
there and nowhere else. `Graph` is the unpruned graph of one prompt, however it came: a
run (attribution.attribute) or a file `tfx graph --save` wrote (Graph.load); it prunes
itself at any thresholds, gives its scores, names its nodes, and saves itself to one
safetensors file that Graph.load reads back (its layout: the last section)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from ...errors import InputTextError

if TYPE_CHECKING:
    from ..results import ModelInfo
    from .setup import Prompt


@dataclass(frozen=True)
class NodeOrder:
    """The nodes of a graph in order: `n_features` features (the graph's own order: by
    layer, position, index), an error node per (layer, position) (layer · T + position),
    a token embedding per position, `n_logits` logit targets. The sources are every node
    but the logits; the logits are the last rows."""

    n_features: int
    n_layers: int
    n_tokens: int
    n_logits: int

    @classmethod
    def of(cls, size: int, *, n_features: int, n_tokens: int, n_logits: int) -> "NodeOrder":
        """The order of a `size`-node graph, its layer count read from the rest."""
        layers, rest = divmod(size - n_features - n_logits - n_tokens, max(n_tokens, 1))
        if rest or layers < 0:
            raise ValueError(f"a {size}-node graph is not {n_features} features, layers of "
                             f"{n_tokens} error nodes, {n_tokens} tokens and {n_logits} logits")
        return cls(n_features, layers, n_tokens, n_logits)

    @property
    def features(self) -> slice:
        return slice(0, self.n_features)

    @property
    def errors(self) -> slice:
        return slice(self.n_features, self.n_features + self.n_layers * self.n_tokens)

    def error(self, layer: int, pos: int = 0) -> int:
        return self.n_features + layer * self.n_tokens + pos

    def layer_errors(self, layer: int) -> slice:
        """The error nodes of one layer, position 0 first."""
        return slice(self.error(layer), self.error(layer) + self.n_tokens)

    @property
    def tokens(self) -> slice:
        return slice(self.errors.stop, self.errors.stop + self.n_tokens)

    @property
    def n_sources(self) -> int:
        return self.tokens.stop

    @property
    def logits(self) -> slice:
        return slice(self.n_sources, self.size)

    @property
    def size(self) -> int:
        return self.n_sources + self.n_logits

    @property
    def always_kept(self) -> slice:
        """Tokens and logits: pruning keeps them whatever their influence."""
        return slice(self.tokens.start, self.size)

    def kind(self, index: int) -> tuple[str, int, int | None]:
        """("feature", i, None), ("error", layer, position), ("embedding", position, None)
        or ("logit", k, None) for node `index`."""
        if index < self.errors.start:
            return "feature", index, None
        if index < self.errors.stop:
            layer, pos = divmod(index - self.errors.start, self.n_tokens)
            return "error", layer, pos
        if index < self.tokens.stop:
            return "embedding", index - self.tokens.start, None
        return "logit", index - self.logits.start, None

    def logit_weights(self, probabilities: torch.Tensor) -> torch.Tensor:
        """Each node's weight in the influence on the logits: the logits' probabilities."""
        w = torch.zeros(self.size)
        w[self.logits] = probabilities
        return w


def normalized(matrix: torch.Tensor, *, in_place: bool = False) -> torch.Tensor:
    """|A| with each row (a target's inputs) summing to 1 (rows of zeros stay zero);
    in_place: overwrite `matrix` (a copy fewer of an N × N graph)."""
    a = matrix.abs_() if in_place else matrix.abs()
    return a.div_(a.sum(dim=1, keepdim=True).clamp_(min=1e-10))


def influence(A: torch.Tensor, weights: torch.Tensor, max_iter: int = 1000) -> torch.Tensor:
    """weights·(A + A² + A³ + …): the graph is acyclic, so the powers reach zero."""
    step = weights @ A
    total = step.clone()
    for _ in range(max_iter):
        if not bool(step.any()):
            return total
        step = step @ A
        total += step
    raise RuntimeError(f"influence did not converge in {max_iter} steps")


def _threshold(scores: torch.Tensor, keep: float) -> torch.Tensor:
    """The score at which the largest scores (all ≥ 0) reach `keep` of the total. Only the
    positive scores are sorted: trailing zeros add nothing to the running sum, and when
    the threshold falls past the positive ones it is the smallest score, zero."""
    positive = scores[scores > 0]
    if positive.numel() == 0:
        return scores.new_zeros(())
    ordered = torch.sort(positive, descending=True).values
    cumulative = torch.cumsum(ordered, 0) / ordered.sum()
    index = int(torch.searchsorted(cumulative, keep).item())
    if index >= len(ordered):
        return ordered[-1] if positive.numel() == scores.numel() else scores.new_zeros(())
    return ordered[index]


def logit_weights(n_nodes: int, probabilities: torch.Tensor) -> torch.Tensor:
    """The logits' probabilities on the last nodes of an `n_nodes` graph (a pruned one
    too), zero elsewhere."""
    K = len(probabilities)
    return NodeOrder.of(n_nodes, n_features=n_nodes - K, n_tokens=0,
                        n_logits=K).logit_weights(probabilities)


def prune(adjacency: torch.Tensor, probabilities: torch.Tensor, *, n_features: int,
          n_tokens: int, node_threshold: float, edge_threshold: float):
    """(node mask, edge mask, cumulative influence per node): the nodes carrying
    node_threshold of the influence on the logits (tokens and logits always kept), then
    the edges carrying edge_threshold of the influence through the nodes kept, then the
    features and errors left without an edge out (features: or in) dropped, repeatedly."""
    order = NodeOrder.of(adjacency.shape[0], n_features=n_features, n_tokens=n_tokens,
                         n_logits=len(probabilities))
    weights = order.logit_weights(probabilities)
    node_influence = influence(normalized(adjacency), weights)
    nodes = node_influence >= _threshold(node_influence, node_threshold)
    nodes[order.always_kept] = True
    pruned = adjacency.clone()
    pruned[~nodes] = 0
    pruned[:, ~nodes] = 0
    norm = normalized(pruned, in_place=True)
    through = influence(norm, weights) + weights
    edge_scores = norm.mul_(through[:, None])  # the normalised matrix is not read again
    edges = edge_scores >= _threshold(edge_scores.flatten(), edge_threshold)
    del norm, edge_scores, pruned
    inner = slice(0, order.always_kept.start)  # features and errors
    while True:
        before = nodes.clone()
        edges[~nodes] = False
        edges[:, ~nodes] = False
        nodes[inner] &= edges[:, inner].any(0)
        nodes[order.features] &= edges[order.features].any(1)
        if bool((nodes == before).all()):
            break
    order_scores, ranked = torch.sort(node_influence, descending=True)
    cumulative = torch.zeros_like(node_influence)
    cumulative[ranked] = torch.cumsum(order_scores, 0) / order_scores.sum()
    return nodes, edges, cumulative


def scores(adjacency: torch.Tensor, probabilities: torch.Tensor, *, n_features: int,
           n_tokens: int, n_layers: int) -> tuple[float, float]:
    """(replacement score, completeness score): the share of the tokens' and errors'
    influence on the logits that is the tokens'; and the influence-weighted share of the
    nodes' inputs that does not come from error nodes."""
    order = NodeOrder(n_features, n_layers, n_tokens, len(probabilities))
    weights = order.logit_weights(probabilities)
    norm = normalized(adjacency)
    node_influence = influence(norm, weights)
    tokens = node_influence[order.tokens].sum()
    errors = node_influence[order.errors].sum()
    replacement = tokens / (tokens + errors)
    not_error = 1 - norm[:, order.errors].sum(dim=-1)
    out = node_influence + weights
    completeness = (not_error * out).sum() / out.sum()
    return float(replacement), float(completeness)


def partial_influence(rows: torch.Tensor, probabilities: torch.Tensor,
                      row_nodes: torch.Tensor, max_iter: int = 128) -> torch.Tensor:
    """Each node's influence on the logits through the rows computed so far (rows[i] is
    node row_nodes[i]'s inputs; the logits' rows first): how circuit-tracer ranks the
    features still to visit when only --max-features of them get rows."""
    norm = rows.abs()  # the one copy: normalised in place
    norm /= norm.sum(dim=1, keepdim=True).clamp_(min=1e-8)
    total = torch.zeros(rows.shape[1])
    prod = logit_weights(rows.shape[1], probabilities)
    for _ in range(max_iter):
        prod = prod[row_nodes] @ norm
        if not bool(prod.any()):
            return total
        total += prod
    raise RuntimeError("the feature ranking did not converge")


# -- the graph --------------------------------------------------------------------------
@dataclass
class GraphSource:
    """What made a graph, as its result names it without the model: the text and its
    tokens as the tokenizer spells them, the logit targets' texts, the model, the
    transcoder set and its hooks, and how many of the text's first tokens --truncate
    left out."""

    text: str
    tokens: list[str]
    logit_texts: list[str]
    model: "ModelInfo"
    transcoders: str
    input_hook: str
    output_hook: str
    truncated: int = 0


class Pruned(NamedTuple):
    """A graph pruned: the nodes kept (indices, in node order), their adjacency (targets ×
    sources, the edges pruning dropped zeroed) and every node's cumulative influence."""

    kept: torch.Tensor
    adjacency: torch.Tensor
    cumulative: torch.Tensor


@dataclass
class Graph:
    """The unpruned attribution graph of one prompt. Nodes in `order`: the features that
    got rows (`selected`, indices into `active`), the errors, the tokens, the logits;
    `adjacency` is targets × sources (rows of features never visited are zero).
    `prompt`: the run's frozen model (None for a graph read from its file); `labels`:
    feature node index -> its label, for the features labelled so far."""

    ids: list[int]
    n_layers: int
    active: torch.Tensor  # (n, 3) every active feature: layer, position, index
    activations: torch.Tensor  # (n,)
    selected: torch.Tensor  # (F,) the features that are nodes, as indices into active
    logit_ids: list[int]
    probabilities: torch.Tensor  # (K,)
    adjacency: torch.Tensor  # (N, N)
    prompt: "Prompt | None" = None
    source: GraphSource | None = None
    labels: dict[int, str | None] = field(default_factory=dict)

    @property
    def order(self) -> NodeOrder:
        return NodeOrder(len(self.selected), self.n_layers, len(self.ids), len(self.logit_ids))

    def feature(self, index: int) -> tuple[int, int, int, float]:
        """(layer, position, transcoder index, activation) of feature node `index`."""
        row = int(self.selected[index])
        layer, pos, feature = self.active[row].tolist()
        return layer, pos, feature, float(self.activations[row])

    def prune(self, node_threshold: float, edge_threshold: float) -> Pruned:
        order = self.order
        nodes, edges, cumulative = prune(
            self.adjacency, self.probabilities, n_features=order.n_features,
            n_tokens=order.n_tokens, node_threshold=node_threshold,
            edge_threshold=edge_threshold)
        kept = torch.where(nodes)[0]
        return Pruned(kept, self.adjacency[kept][:, kept] * edges[kept][:, kept], cumulative)

    def scores(self) -> tuple[float, float]:
        """(replacement score, completeness score) of the unpruned graph."""
        order = self.order
        return scores(self.adjacency, self.probabilities, n_features=order.n_features,
                      n_tokens=order.n_tokens, n_layers=order.n_layers)

    def save(self, path: "str | Path", *, force: bool = False) -> "Path":
        """Write the graph to `path` (the file's layout: the module's last section),
        whole or not at all: `Graph.load` reads it back. Every feature node should be
        labelled."""
        return _save(self, path, force=force)

    @classmethod
    def load(cls, path: "str | Path") -> "Graph":
        """The graph `save` wrote, checked whole: tfx_cli.errors.InputTextError naming
        what is wrong with any other file."""
        return _load(path)


# -- the graph's file: `tfx graph --save` writes it, `tfx graph --open` reads it back ------
# One safetensors file, which any safetensors reader (a notebook's) reads too:
#
#   adjacency            (N, N) float32   targets × sources, in the graph's node order
#   active_features      (n, 3) int64     every active feature: layer, position, index
#   activations          (n,)   float32
#   selected_features    (F,)   int64     the feature nodes, as rows of the two above
#   input_ids            (T,)   int64     the ids the graph ran (a special token first)
#   logit_ids            (K,)   int64     the logit targets
#   logit_probabilities  (K,)   float32
#
# and in the header's metadata, under KEY, one JSON object: what the result shows without
# the model (the text, its tokens, the logits' texts, every feature node's label, the
# model, the transcoder set and its hooks, how many tokens --truncate left out), the
# layer count and the node order in words (ORDER). A file is read whole and checked
# before it is used: anything else is refused in one line naming the file and what is
# wrong (InputTextError).
KEY = "tfx_graph"
VERSION = 1
ORDER = ("features (selected_features' order), an error node per layer and position "
         "(layer · T + position), an embedding per position (input_ids), the logits "
         "(logit_ids); adjacency is targets × sources")
_FIX = "give a file `tfx graph --save` wrote"


def _save(graph: Graph, path: str | Path, *, force: bool = False) -> Path:
    """Write `graph` to `path`, whole or not at all (an existing file only with `force`),
    as an ordinary file (the umask's permissions)."""
    from safetensors.torch import save_file

    from ..outputs import atomic_file

    src = graph.source
    tensors = {"adjacency": graph.adjacency.contiguous(),
               "active_features": graph.active.long().contiguous(),
               "activations": graph.activations.float().contiguous(),
               "selected_features": graph.selected.long().contiguous(),
               "input_ids": torch.tensor(graph.ids, dtype=torch.long),
               "logit_ids": torch.tensor(graph.logit_ids, dtype=torch.long),
               "logit_probabilities": graph.probabilities.float().contiguous()}
    model = src.model
    about = {"version": VERSION, "node_order": ORDER, "n_layers": graph.n_layers,
             "text": src.text, "tokens": list(src.tokens), "logit_texts": list(src.logit_texts),
             "labels": [graph.labels.get(i) for i in range(len(graph.selected))],
             "model": {"config": model.config, "weights": model.weights, "seed": model.seed,
                       "dtype": model.dtype, "device": model.device,
                       "streamed": model.streamed,
                       "cfg": None if model.cfg is None else model.cfg.to_dict()},
             "transcoders": src.transcoders, "feature_input_hook": src.input_hook,
             "feature_output_hook": src.output_hook, "truncated": src.truncated}
    path = Path(path).expanduser()
    with atomic_file(path, force=force, mode="umask") as tmp:
        save_file(tensors, str(tmp), metadata={KEY: json.dumps(about, ensure_ascii=False)})
    return path


class _Reader:
    """The checks of one file: each failure is one line naming the file."""

    def __init__(self, path: Path):
        self.path = path

    def bad(self, problem: str) -> InputTextError:
        return InputTextError(f"--open {self.path}: {problem}; {_FIX}")

    def tensor(self, tensors: dict, name: str, ndim: int, floating: bool) -> torch.Tensor:
        t = tensors.get(name)
        if t is None:
            raise self.bad(f"it has no tensor {name}")
        if t.ndim != ndim or t.is_floating_point() != floating or t.is_complex():
            kind = "floats" if floating else "integers"
            raise self.bad(f"its {name} is {tuple(t.shape)} {t.dtype}, not {ndim}-D {kind}")
        t = t.float() if floating else t.long()
        if floating and not bool(torch.isfinite(t).all()):
            raise self.bad(f"its {name} holds NaN or infinite values (in float32)")
        return t

    def field(self, about: dict, key: str, kind, *, size: int | None = None,
              optional: bool = False) -> Any:
        """about[key] when it is a `kind` (a list of `size` of them); None when missing
        and `optional`."""
        value = about.get(key)
        if value is None and optional:
            return None
        name = kind.__name__ if isinstance(kind, type) else "text or null"
        if size is None and not _is(value, kind):
            raise self.bad(f"its {key} {value!r:.40} is not a {name}")
        if size is not None and not (isinstance(value, list) and len(value) == size
                                     and all(_is(v, kind) for v in value)):
            raise self.bad(f"its {key} is not a list of {size} (each a {name})")
        return value


def _is(value, kind) -> bool:
    return isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)


def _read(path: Path, reader: _Reader) -> tuple[dict, dict]:
    """(tensors, the tfx_graph metadata object) of the file at `path`."""
    from safetensors import safe_open

    if path.is_dir():
        raise InputTextError(f"--open {path} is a folder; give the graph's file")
    try:
        with safe_open(str(path), framework="pt") as handle:
            meta = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except FileNotFoundError:
        raise InputTextError(f"--open {path} does not exist; {_FIX}") from None
    except Exception as exc:  # safetensors' own error: a cut or garbled file
        raise reader.bad(f"not a whole safetensors file ({str(exc).splitlines()[0]:.120})") \
            from None
    if KEY not in meta:
        raise reader.bad("a safetensors file, but not a graph (its header has no "
                         f"{KEY} metadata)")
    try:
        about = json.loads(meta[KEY])
    except (ValueError, RecursionError):
        raise reader.bad(f"its {KEY} metadata is not JSON") from None
    if not isinstance(about, dict) or about.get("version") != VERSION:
        raise reader.bad(f"its {KEY} metadata is not version {VERSION}'s object")
    return tensors, about


def _load(path: str | Path) -> Graph:
    """The graph `_save` wrote to `path`, every tensor and field checked."""
    path = Path(path).expanduser()
    r = _Reader(path)
    tensors, about = _read(path, r)
    ids = r.tensor(tensors, "input_ids", 1, False)
    active = r.tensor(tensors, "active_features", 2, False)
    activations = r.tensor(tensors, "activations", 1, True)
    selected = r.tensor(tensors, "selected_features", 1, False)
    logit_ids = r.tensor(tensors, "logit_ids", 1, False)
    probabilities = r.tensor(tensors, "logit_probabilities", 1, True)
    adjacency = r.tensor(tensors, "adjacency", 2, True)
    n_layers = r.field(about, "n_layers", int)
    T, K, n, F = len(ids), len(logit_ids), len(activations), len(selected)
    if T < 1 or K < 1 or active.shape != (n, 3) or len(probabilities) != K:
        raise r.bad("its tensors do not fit one graph (input_ids, logit_ids and "
                    "logit_probabilities, or active_features and activations, disagree)")
    size = NodeOrder(F, n_layers, T, K).size
    if n_layers < 1 or adjacency.shape != (size, size):
        raise r.bad(f"its adjacency is {tuple(adjacency.shape)}, not ({size}, {size}) for "
                    f"{F} features, {n_layers} layers, {T} tokens and {K} logits")
    if F and (int(selected.min()) < 0 or int(selected.max()) >= n or
              len(set(selected.tolist())) != F):
        raise r.bad("its selected_features are not distinct rows of active_features")
    if n and (int(active.min()) < 0 or int(active[:, 0].max()) >= n_layers or
              int(active[:, 1].max()) >= T):
        raise r.bad(f"its active_features name a layer or position outside {n_layers} "
                    f"layers and {T} tokens")
    graph = Graph(ids.tolist(), n_layers, active, activations, selected, logit_ids.tolist(),
                  probabilities, adjacency)
    if not bool(torch.isfinite(adjacency.abs().sum(1)).all()):
        raise r.bad("its adjacency's weights add up past float32")
    if not all(0 <= p <= 1 for p in probabilities.tolist()):
        raise r.bad("its logit_probabilities are not probabilities")
    graph.source = _source(r, about, T, K)
    labels = r.field(about, "labels", (str, type(None)), size=len(selected))
    graph.labels = dict(enumerate(labels))
    return graph


def _source(r: _Reader, about: dict, T: int, K: int) -> GraphSource:
    """What made the graph, from the metadata: the texts, the model, the set."""
    from ...errors import ConfigError
    from ..config import config_from_dict
    from ..results import ModelInfo

    model = r.field(about, "model", dict)
    fields = {key: r.field(model, key, str, optional=True)
              for key in ("config", "weights", "dtype", "device")}
    cfg = r.field(model, "cfg", dict, optional=True)
    try:
        cfg = None if cfg is None else config_from_dict(cfg, source=f"--open {r.path}")
    except ConfigError as exc:
        raise r.bad(f"its model is not a config tfx reads ({exc.message})") from None
    info = ModelInfo(**fields, seed=r.field(model, "seed", int, optional=True), cfg=cfg,
                     streamed=r.field(model, "streamed", bool))
    truncated = r.field(about, "truncated", int)
    if truncated < 0:
        raise r.bad(f"its truncated {truncated} is negative")
    return GraphSource(
        text=r.field(about, "text", str), tokens=r.field(about, "tokens", str, size=T),
        logit_texts=r.field(about, "logit_texts", str, size=K), model=info,
        transcoders=r.field(about, "transcoders", str, optional=True),
        input_hook=r.field(about, "feature_input_hook", str, optional=True),
        output_hook=r.field(about, "feature_output_hook", str, optional=True),
        truncated=truncated)
