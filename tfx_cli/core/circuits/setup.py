"""One forward pass of the real model on the prompt, and everything the graph needs from
it: the frozen patterns and norm divisors, each layer's transcoder activations at its
input site, the error terms (the real FFN output minus the reconstruction), the token
vectors and the logits. As circuit-tracer, position 0 (a BOS the prompt is given when it
starts with no special token) has no features and no error: its stream is a constant."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...errors import NonFiniteError
from ..analysis.common import with_bos  # noqa: F401  (the graph's ids)
from ..features.transcoder_set import TranscoderSet
from .graph import NodeOrder
from .linear import Frozen, FrozenAttention, FrozenNorm


@dataclass
class Prompt:
    ids: list[int]
    n_layers: int
    frozen: Frozen
    logits: torch.Tensor  # (V,) at the last position
    active: torch.Tensor  # (n, 3) layer, position, feature; sorted
    activations: torch.Tensor  # (n,)
    pre: torch.Tensor  # (n,) the active features' pre-activations
    encoder_vecs: torch.Tensor  # (n, D)
    decoder_vecs: torch.Tensor  # (n, D) activation · W_dec row (into its own layer)
    errors: torch.Tensor  # (L, T, D)
    token_vecs: torch.Tensor  # (T, D)
    constant_embed: torch.Tensor  # (T, D) the embedding's part that is no token node's
    unexplained0: torch.Tensor  # (L, D) position 0's FFN output beyond b_dec and skip
    final: torch.Tensor  # (T, D) the final norm's output
    unembed: torch.Tensor  # (V, D)
    sites: torch.Tensor  # (L, T, D) the transcoders' inputs

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    @property
    def n_features(self) -> int:
        return self.active.shape[0]

    def order(self, n_logits: int = 0) -> NodeOrder:
        """The node order while rows are made: every active feature a node."""
        return NodeOrder(self.n_features, self.n_layers, self.n_tokens, n_logits)

    @property
    def feature_layer(self) -> torch.Tensor:
        return self.active[:, 0]

    @property
    def feature_pos(self) -> torch.Tensor:
        return self.active[:, 1]

    @property
    def feature_blocks(self) -> list[list[tuple[int, slice]]]:
        """Per layer, (position, slice of the active features there): the features are
        sorted by layer, then position, so each block is contiguous."""
        if getattr(self, "_blocks", None) is None:
            keys = (self.feature_layer * self.n_tokens + self.feature_pos).tolist()
            blocks: list[list] = [[] for _ in range(self.n_layers)]
            start = 0
            for i in range(1, len(keys) + 1):
                if i == len(keys) or keys[i] != keys[start]:
                    layer, pos = divmod(keys[start], self.n_tokens)
                    blocks[layer].append((pos, slice(start, i)))
                    start = i
            self._blocks = blocks
        return self._blocks


def _norm(norm, var: torch.Tensor) -> FrozenNorm:
    shift = None if norm.shift is None else norm.shift.detach().float()
    return FrozenNorm(norm.gain.detach().float(), shift,
                      torch.sqrt(var.float() + norm.eps), norm.kind != "rmsnorm")


def _site_norm(site: str, ln2: FrozenNorm) -> FrozenNorm | None:
    """The map from the stream after attention to the features' input."""
    if site == "ln2.out":
        return ln2
    if site == "ln2.normed":  # before the gain and shift
        return FrozenNorm(torch.ones_like(ln2.gain), None, ln2.divisor, ln2.centred)
    return None


def _lin(layer) -> tuple:
    bias = None if layer.bias is None else layer.bias.detach().float()
    return layer.weight.detach().float(), bias


def forward(loaded, ids: list[int], tc: TranscoderSet) -> Prompt:
    """Run the model once on ids, recording what the graph freezes and reads."""
    model, cfg = loaded.model, loaded.cfg
    L = cfg.n_layers
    names = ["embed.tok", "embed.out", "ln_f.var", "ln_f.out", "logits"]
    for i in range(L):
        names += [f"blocks.{i}.ln1.var", f"blocks.{i}.attn.pattern", f"blocks.{i}.ln2.var",
                  f"blocks.{i}.{tc.site}", f"blocks.{i}.ffn.out"]
    with model.record(names) as tr, torch.inference_mode():
        model(torch.tensor([ids]), head="all")
    raw = {n: tr.raw(n).detach().float() for n in names}
    attn, ln2 = [], []
    for i, block in enumerate(model.blocks):
        a = block.attn
        (W_V, b_V), (W_O, b_O) = _lin(a.W_value), _lin(a.out_proj)
        attn.append(FrozenAttention(raw[f"blocks.{i}.attn.pattern"], W_V, b_V, W_O, b_O,
                                    a.n_kv_heads, _norm(block.ln1, raw[f"blocks.{i}.ln1.var"])))
        ln2.append(_norm(block.ln2, raw[f"blocks.{i}.ln2.var"]))
    frozen = Frozen(attn, ln2, _norm(model.ln_f, raw["ln_f.var"]), tc,
                    [_site_norm(tc.site, n) for n in ln2])
    sites = torch.stack([raw[f"blocks.{i}.{tc.site}"] for i in range(L)])
    outs = torch.stack([raw[f"blocks.{i}.ffn.out"] for i in range(L)])
    tok = raw["embed.tok"] * (math.sqrt(cfg.d_model) if cfg.embed_scale else 1.0)
    return _features(ids, L, frozen, sites, outs, tok, raw, model)


def _features(ids, L, frozen: Frozen, sites, outs, tok, raw, model) -> Prompt:
    tc = frozen.tc
    active, values, pres, enc, dec = [], [], [], [], []
    recon = torch.stack([b.expand(outs.shape[1], -1) for b in tc.b_dec]).clone()
    for layer in range(L):
        pre = tc.pre(layer, sites[layer])  # (T, F)
        acts = tc.activate(layer, pre)
        acts[0] = 0  # position 0 is a constant, as circuit-tracer's zero_positions
        pos, feat = acts.nonzero(as_tuple=True)
        vals = acts[pos, feat]
        active.append(torch.stack([torch.full_like(pos, layer), pos, feat], 1))
        values.append(vals)
        pres.append(pre[pos, feat])
        enc.append(tc.W_enc[layer][feat])
        dec.append(tc.decoder(layer, layer)[feat] * vals[:, None])
        for target in range(layer, L):  # a cross-layer transcoder writes every later layer
            W = tc.decoder(layer, target)
            if W is not None:
                recon[target] += acts @ W
        skip = tc.skip(layer, sites[layer])
        if skip is not None:
            recon[layer] += skip
    errors = outs - recon
    check_finite(errors, tc, "the transcoders' reconstruction of the MLP outputs")
    unexplained0 = errors[:, 0].clone()
    errors[:, 0] = 0
    W_U = model.lm_head.weight.detach().float()
    return Prompt(list(ids), L, frozen, raw["logits"][-1], torch.cat(active),
                  torch.cat(values), torch.cat(pres), torch.cat(enc), torch.cat(dec),
                  errors, tok, raw["embed.out"] - tok, unexplained0, raw["ln_f.out"],
                  W_U, sites)


def check_finite(values: torch.Tensor, tc: TranscoderSet, what: str) -> None:
    """NonFiniteError naming the transcoder set when `values` (made from its weights)
    holds NaN or inf, or inf once a target's inputs are added up (as pruning does):
    weights that large leave no edge meaningful."""
    summed = values.abs().sum(-1) if values.ndim > 1 else values
    if bool(torch.isfinite(values).all()) and bool(torch.isfinite(summed).all()):
        return
    raise NonFiniteError(f"{what} overflowed float32, so no edge of the graph would mean "
                         f"anything; --transcoders {tc.folder} holds weights up to "
                         f"{_largest(tc.W_enc):.3g} (W_enc) and {_largest(tc.W_dec):.3g} "
                         "(W_dec): check the set (a damaged file, or training that "
                         "diverged)")


def _largest(weights: list[torch.Tensor]) -> float:
    return max((float(W.abs().max()) for W in weights if W.numel()), default=0.0)


def targets(p: Prompt, *, max_logits: int, logit_prob: float,
            ids: list[int] | None = None) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """(token ids, probabilities, demeaned unembedding rows): the given ids, or the most
    likely tokens until their probabilities reach logit_prob, at most max_logits."""
    probs = torch.softmax(p.logits, -1)
    if ids is None:
        top_p, top_i = torch.topk(probs, min(max_logits, probs.shape[0]))
        cut = int(torch.searchsorted(torch.cumsum(top_p, 0), logit_prob)) + 1
        ids = top_i[:cut].tolist()
    chosen = torch.tensor(ids, dtype=torch.long)
    vecs = p.unembed[chosen] - p.unembed.mean(0, keepdim=True)
    return list(ids), probs[chosen], vecs
