"""circuit-tracer 0.5.0's own numbers on tiny random models, recorded for tfx's tests.

circuit-tracer pins transformers and transformer-lens versions that tfx's environment must
not get, so it runs in a virtual environment of its own (bench/circuit_tracer_venv.sh makes
it). From the repository root:

    bash bench/circuit_tracer_venv.sh
    /work/venvs/circuit-tracer/bin/python bench/circuit_tracer_record.py

This never imports tfx. For each case it builds, from fixed seeds and without the network,

- a tiny random causal LM with transformers (`model/`: config.json, model.safetensors,
  tokenizer.json, tokenizer_config.json) and a byte-level BPE tokenizer trained with the
  `tokenizers` library on a few fixed sentences (its post-processor puts the BOS first);
- random per-layer transcoders in circuit-tracer's layout (`transcoders/config.yaml` and one
  `layer_I.safetensors` each), with encoder biases set so that only some features fire;

then loads the transcoders with circuit-tracer's `load_transcoders` (the loader behind
`ReplacementModel.from_pretrained`), builds its TransformerLens replacement model offline
(transformer-lens's own config and weight conversion on the local folder, processed with
the flags `from_pretrained_and_transcoders` uses), and records per prompt: the clean
logits, `attribute`'s graph (active features, activations, logit targets and their
probabilities, the unpruned adjacency, the selected features), `prune_graph`'s masks,
`compute_graph_scores`, and `feature_intervention`'s logits and activations under several
settings. tests/recordings/circuit_tracer/README.md describes the files.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import yaml  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "recordings" / "circuit_tracer"

SENTENCES = [
    "The capital of France is Paris and the capital of Italy is Rome.",
    "When Mary and John went to the store, John gave a drink to Mary.",
    "The cat sat on the mat because the mat was warm.",
    "Two plus two is four, and three plus three is six.",
    "She opened the door and the dog ran into the garden.",
    "A small model reads the text and predicts the next word.",
]

# Each case: the architecture, its sizes, the transcoders' hooks and kind, the prompts.
CASES = {
    "gpt2": {
        "arch": "gpt2", "seed": 1, "d_model": 48, "n_layers": 3, "n_heads": 4,
        "vocab_size": 512, "bos": "<|endoftext|>", "final_gain": 6.0,
        "feature_input_hook": "ln2.hook_normalized", "feature_output_hook": "hook_mlp_out",
        "d_transcoder": 96, "activation": "relu", "skip": True, "fire_fraction": 0.12,
        "prompts": ["The capital of France is", "John gave a drink to"],
        "max_feature_nodes": 40,
    },
    "llama": {
        "arch": "llama", "seed": 2, "d_model": 48, "n_layers": 3, "n_heads": 4,
        "n_kv_heads": 2, "d_mlp": 96, "vocab_size": 512, "bos": "<s>", "eos": "</s>", "final_gain": 2.0,
        "feature_input_hook": "mlp.hook_in", "feature_output_hook": "mlp.hook_out",
        "d_transcoder": 128, "activation": "jumprelu", "skip": False, "fire_fraction": 0.10,
        "prompts": ["The cat sat on the", "Two plus two is"],
        "max_feature_nodes": 40,
    },
}

CASES["clt"] = {
    "arch": "gpt2", "seed": 3, "d_model": 48, "n_layers": 3, "n_heads": 4,
    "vocab_size": 512, "bos": "<|endoftext|>", "final_gain": 4.0,
    "feature_input_hook": "hook_resid_mid", "feature_output_hook": "hook_mlp_out",
    "d_transcoder": 64, "activation": "relu", "skip": False, "fire_fraction": 0.12,
    "clt": True, "prompts": ["When Mary and John went to the store", "The dog ran into the"],
    "max_feature_nodes": 40,
}

ATTRIBUTE = {"max_n_logits": 10, "desired_logit_prob": 0.95, "batch_size": 32}
PRUNE = {"node_threshold": 0.8, "edge_threshold": 0.98}

NODE_ORDER = (
    "Rows and columns of adjacency are the same node list: [selected features in "
    "active_features order (selected_features indexes active_features; all of them unless "
    "max_feature_nodes was set), error nodes layer-major (index n_features + layer * n_pos + "
    "pos), token embeddings (one per position), logit targets in logit_targets order]. "
    "adjacency[target, source] is the direct effect of source on target; rows of "
    "token nodes and of error nodes are zero. active_features rows are (layer, pos, feature) "
    "sorted as torch's sparse coalesce sorts them (layer, then pos, then feature); position 0 "
    "(the BOS) has no features and zero error vectors."
)


def build_tokenizer(case: dict, folder: Path):
    """A byte-level BPE trained on SENTENCES; its post-processor puts the BOS first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [case["bos"]] + ([case["eos"]] if case.get("eos") else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=case["vocab_size"], special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    # The prompts repeated, so that their words are whole tokens.
    tok.train_from_iterator(SENTENCES + 20 * case["prompts"], trainer=trainer)
    bos_id = tok.token_to_id(case["bos"])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{case['bos']} $A", special_tokens=[(case["bos"], bos_id)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=case["bos"],
                                   eos_token=case.get("eos") or case["bos"])
    fast.save_pretrained(folder)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)  # as read back (TransformerLens reloads it)


def _randomise(model: torch.nn.Module, seed: int, gain: float) -> None:
    """Norm gains away from 1 and nonzero biases, so that no term can be dropped unseen."""
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name or name.startswith("transformer.ln_f"):
                if name.endswith("weight"):
                    p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
        final = model.transformer.ln_f if hasattr(model, "transformer") else model.model.norm
        final.weight.mul_(gain)  # sharper next-token distributions than a flat random one


def build_hf_model(case: dict, vocab: int):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(case["seed"])
    if case["arch"] == "gpt2":
        cfg = GPT2Config(vocab_size=vocab, n_positions=64, n_embd=case["d_model"],
                         n_layer=case["n_layers"], n_head=case["n_heads"], n_ctx=64,
                         initializer_range=0.15, bos_token_id=0, eos_token_id=0,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(cfg)
    else:
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=case["d_model"],
                          intermediate_size=case["d_mlp"], num_hidden_layers=case["n_layers"],
                          num_attention_heads=case["n_heads"],
                          num_key_value_heads=case["n_kv_heads"], max_position_embeddings=64,
                          rope_theta=10000.0, rms_norm_eps=1e-5, initializer_range=0.15,
                          bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg)
    _randomise(model, case["seed"], case["final_gain"])
    return model.eval()


def save_model(case: dict, folder: Path):
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    tok = build_tokenizer(case, folder)
    model = build_hf_model(case, len(tok))
    model.config.bos_token_id = tok.bos_token_id
    model.config.eos_token_id = tok.eos_token_id
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)
    return model, tok


def mlp_inputs(case: dict, model, tok) -> list[torch.Tensor]:
    """Per layer, the transcoders' input site over all prompts' tokens (for the biases)."""
    blocks = model.transformer.h if case["arch"] == "gpt2" else model.model.layers
    seen: dict[int, list] = {i: [] for i in range(len(blocks))}
    resid_mid = case["feature_input_hook"] == "hook_resid_mid"  # the second norm's input
    handles = [(b.ln_2 if resid_mid else b.mlp).register_forward_pre_hook(
        lambda mod, args, i=i: seen[i].append(args[0][0].detach())) for i, b in enumerate(blocks)]
    with torch.no_grad():
        for text in case["prompts"] + SENTENCES:
            model(torch.tensor([tok(text).input_ids]))
    for h in handles:
        h.remove()
    out = []
    for i, b in enumerate(blocks):
        x = torch.cat(seen[i])
        if case["feature_input_hook"] == "ln2.hook_normalized":  # before the norm's gain
            x = (x - b.ln_2.bias) / b.ln_2.weight
        out.append(x)
    return out


def crossing(pre: torch.Tensor, fire_fraction: float) -> torch.Tensor:
    """Per feature, where its pre-activation should cross zero (or the threshold) so that
    about `fire_fraction` of the tokens seen fire it: halfway across the gap between two
    neighbouring pre-activations of those tokens that is nearest that fraction and at
    least MARGIN of their spread wide. A quantile can land exactly on a token's value
    (and the prompts share tokens: the BOS, the first word), and then rounding alone
    decides whether the feature fires on it."""
    ordered = pre.sort(dim=0).values  # (tokens, F)
    k = min(max(int(round((1 - fire_fraction) * (len(ordered) - 1))), 0), len(ordered) - 2)
    gaps = ordered[1:] - ordered[:-1]  # (tokens - 1, F)
    wide = gaps > MARGIN * (ordered[-1] - ordered[0])
    distance = (torch.arange(len(gaps))[:, None] - k).abs().float()
    j = torch.where(wide, distance, torch.inf).argmin(dim=0)  # the nearest wide gap
    cols = torch.arange(pre.shape[1])
    return (ordered[j, cols] + ordered[j + 1, cols]) / 2


MARGIN = 1e-3  # of a feature's spread of pre-activations


def make_transcoders(case: dict, inputs: list[torch.Tensor], folder: Path) -> list[str]:
    """One safetensors per layer in circuit-tracer's layout, and the set's config.yaml.
    b_enc is set per feature so that about `fire_fraction` of the tokens seen fire it."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    if case.get("clt"):
        return make_clt(case, inputs, folder)
    g = torch.Generator().manual_seed(case["seed"] + 2000)
    d, f = case["d_model"], case["d_transcoder"]
    names = []
    for layer, x in enumerate(inputs):
        w_enc = torch.randn(f, d, generator=g) / d ** 0.5
        pre = x @ w_enc.T  # (tokens, F)
        q = crossing(pre, case["fire_fraction"])
        tensors = {"W_enc": w_enc.contiguous(),
                   "W_dec": (0.3 * torch.randn(f, d, generator=g) / f ** 0.5).contiguous(),
                   "b_dec": 0.05 * torch.randn(d, generator=g)}
        if case["activation"] == "jumprelu":
            threshold = 0.05 + 0.1 * torch.rand(f, generator=g)
            tensors["activation_function.threshold"] = threshold
            tensors["b_enc"] = threshold - q  # pre-activation crosses the threshold at q
        else:
            tensors["b_enc"] = -q
        if case["skip"]:
            tensors["W_skip"] = (0.1 * torch.randn(d, d, generator=g) / d ** 0.5).contiguous()
        name = f"layer_{layer}.safetensors"
        save_file({k: v.float().contiguous() for k, v in tensors.items()}, str(folder / name))
        names.append(name)
    config = {"model_kind": "transcoder_set", "scan": f"tfx-recording/{case['arch']}",
              "feature_input_hook": case["feature_input_hook"],
              "feature_output_hook": case["feature_output_hook"], "transcoders": names}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return names


def make_clt(case: dict, inputs: list[torch.Tensor], folder: Path) -> list[str]:
    """A cross-layer transcoder in circuit-tracer's layout: per layer i, W_enc_i.safetensors
    (W_enc_i (F, D), b_enc_i (F), b_dec_i (D)) and W_dec_i.safetensors (W_dec_i
    (F, n_layers - i, D): layer i's features write into layers i, i+1, ...)."""
    g = torch.Generator().manual_seed(case["seed"] + 2000)
    d, f, n = case["d_model"], case["d_transcoder"], len(inputs)
    names = []
    for layer, x in enumerate(inputs):
        w_enc = torch.randn(f, d, generator=g) / d ** 0.5
        q = crossing(x @ w_enc.T, case["fire_fraction"])
        enc = {f"W_enc_{layer}": w_enc, f"b_enc_{layer}": -q,
               f"b_dec_{layer}": 0.05 * torch.randn(d, generator=g)}
        dec = {f"W_dec_{layer}": 0.3 * torch.randn(f, n - layer, d, generator=g) / f ** 0.5}
        for name, tensors in ((f"W_enc_{layer}.safetensors", enc),
                              (f"W_dec_{layer}.safetensors", dec)):
            save_file({k: v.float().contiguous() for k, v in tensors.items()},
                      str(folder / name))
            names.append(name)
    config = {"model_kind": "cross_layer_transcoder", "scan": "tfx-recording/clt",
              "feature_input_hook": case["feature_input_hook"],
              "feature_output_hook": case["feature_output_hook"]}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return names


def load_transcoders(folder: Path):
    """circuit-tracer's own loader on the config.yaml (its paths taken relative to it);
    for a cross-layer transcoder its load_clt on the folder (what its Hub loader calls on
    the downloaded folder)."""
    from circuit_tracer.transcoder.cross_layer_transcoder import load_clt
    from circuit_tracer.utils.hf_utils import load_transcoders as ct_load

    config = yaml.safe_load((folder / "config.yaml").read_text())
    if config["model_kind"] == "cross_layer_transcoder":
        return load_clt(str(folder), feature_input_hook=config["feature_input_hook"],
                        feature_output_hook=config["feature_output_hook"],
                        scan=config["scan"], device=torch.device("cpu"),
                        dtype=torch.float32, lazy_decoder=False, lazy_encoder=False)
    config["transcoders"] = [str(folder / p) for p in config["transcoders"]]
    return ct_load(config, device=torch.device("cpu"), dtype=torch.float32,
                   lazy_encoder=False, lazy_decoder=False)


# What TransformerLensReplacementModel.from_pretrained_and_transcoders passes to
# HookedTransformer.from_pretrained (the last two are from_pretrained's own defaults).
TL_FLAGS = {"fold_ln": False, "center_writing_weights": False, "center_unembed": False,
            "fold_value_biases": True, "refactor_factored_attn_matrices": False}


def build_replacement_model(model_dir: Path, hf_model, tok, transcoders):
    """HookedTransformer.from_pretrained without the Hub: it looks the name up in its list
    of official models first, so its steps are done here on the local folder. The folder is
    named relative to its parent (the caller's working directory), as "model": transformer-lens
    picks the architecture from the name when it contains "llama" and then fails to read
    the config."""
    assert Path.cwd().resolve() == model_dir.parent.resolve()
    model_dir = Path(model_dir.name)
    from circuit_tracer.replacement_model.replacement_model_transformerlens import (
        TransformerLensReplacementModel)
    from transformer_lens import loading_from_pretrained as loading

    cfg = loading.get_pretrained_model_config(str(model_dir), fold_ln=False, device="cpu",
                                              dtype=torch.float32)
    state = loading.get_pretrained_state_dict(str(model_dir), cfg, hf_model, dtype=torch.float32)
    model = TransformerLensReplacementModel(cfg, tok, move_to_device=False)
    model.load_and_process_state_dict(state, **TL_FLAGS)
    model.move_model_modules_to_device()
    model._configure_replacement_model(transcoders)
    return model.eval()


def pick_interventions(graph, n_layers: int) -> list[tuple[int, int, int, float]]:
    """Three (layer, pos, feature, value) triples from the graph's active features: the
    strongest one before the last position and the last layer doubled (its effect reaches
    later positions through attention, frozen or not), the strongest of the last layer at
    the last position switched off (so that the constrained settings, which drop layers outside their range, still
    change the last position), and a feature not active at layer 0 and the last position
    set on. Chosen by rule, so that a rerun picks the same."""
    feats = graph.active_features.tolist()
    vals = graph.activation_values.tolist()
    order = sorted(range(len(feats)), key=lambda i: (-vals[i], feats[i]))
    last = graph.n_pos - 1
    first = next(i for i in order if feats[i][1] < last and feats[i][0] < n_layers - 1)
    out = [(*feats[first], 2.0 * vals[first])]
    other = next(i for i in order if feats[i][0] == n_layers - 1 and feats[i][1] == last)
    out.append((*feats[other], 0.0))
    active_last = {f for (l, p, f) in feats if l == 0 and p == last}
    off = next(f for f in range(10 ** 6) if f not in active_last)
    out.append((0, last, off, 1.5))
    return [(int(l), int(p), int(f), float(v)) for l, p, f, v in out]


def intervention_settings(n_layers: int) -> dict[str, dict]:
    return {"freeze_attention": {"freeze_attention": True, "constrained_layers": None},
            "free": {"freeze_attention": False, "constrained_layers": None},
            "constrained_all": {"freeze_attention": True,
                                "constrained_layers": [0, n_layers]},
            "constrained_from_1": {"freeze_attention": True,
                                   "constrained_layers": [1, n_layers]}}


def record_interventions(model, ids, graph, n_layers: int, tensors: dict) -> dict:
    triples = pick_interventions(graph, n_layers)
    settings = intervention_settings(n_layers)
    for name, s in settings.items():
        layers = range(*s["constrained_layers"]) if s["constrained_layers"] else None
        logits, acts = model.feature_intervention(
            ids, triples, constrained_layers=layers, freeze_attention=s["freeze_attention"])
        tensors[f"intervention.{name}.logits"] = logits.reshape(len(ids), -1).float()
        tensors[f"intervention.{name}.activations"] = acts.float()
    return {"triples": triples, "settings": settings,
            "note": "constrained_layers [a, b] means range(a, b); activations are "
                    "(n_layers, n_pos, d_transcoder) after the activation function, as "
                    "feature_intervention returns them"}


def graph_tensors(prefix: str, graph, tensors: dict) -> dict:
    from circuit_tracer.graph import compute_graph_scores, prune_graph

    tensors[f"{prefix}.adjacency"] = graph.adjacency_matrix.float().contiguous()
    tensors[f"{prefix}.active_features"] = graph.active_features.long().contiguous()
    tensors[f"{prefix}.activation_values"] = graph.activation_values.float().contiguous()
    tensors[f"{prefix}.selected_features"] = graph.selected_features.long().contiguous()
    tensors[f"{prefix}.logit_probabilities"] = graph.logit_probabilities.float().contiguous()
    tensors[f"{prefix}.logit_token_ids"] = graph.logit_token_ids.long()
    pruned = prune_graph(graph, **PRUNE)
    tensors[f"{prefix}.prune.node_mask"] = pruned.node_mask.to(torch.uint8)
    tensors[f"{prefix}.prune.edge_mask"] = pruned.edge_mask.to(torch.uint8)
    tensors[f"{prefix}.prune.cumulative_scores"] = pruned.cumulative_scores.float()
    replacement, completeness = compute_graph_scores(graph)
    n_feat = len(graph.selected_features)
    return {"n_active_features": int(graph.active_features.shape[0]),
            "n_selected_features": n_feat,
            "n_nodes": int(graph.adjacency_matrix.shape[0]),
            "logit_targets": [{"token_str": t.token_str, "vocab_idx": int(t.vocab_idx)}
                              for t in graph.logit_targets],
            "logit_probabilities": graph.logit_probabilities.tolist(),
            "replacement_score": replacement, "completeness_score": completeness,
            "pruned_nodes": int(pruned.node_mask.sum()),
            "pruned_edges": int(pruned.edge_mask.sum())}


def record_prompt(model, hf_model, tok, case: dict, prompt: str, index: int,
                  folder: Path) -> dict:
    from circuit_tracer import attribute

    ids = torch.tensor(tok(prompt).input_ids)  # the BOS first, as ensure_tokenized keeps it
    n_layers = case["n_layers"]
    tensors: dict[str, torch.Tensor] = {"input_ids": ids.long()}
    with torch.no_grad():
        tensors["clean_logits"] = model(ids)[0].float()
        hf_logits = hf_model(ids[None]).logits[0].float()
    hf_diff = float((hf_logits - tensors["clean_logits"]).abs().max()
                    / hf_logits.abs().max())
    assert hf_diff < 1e-5, f"TransformerLens and transformers disagree: {hf_diff}"
    graph = attribute(ids, model, **ATTRIBUTE)
    entry = {"prompt": prompt, "input_ids": ids.tolist(),
             "tokens": tok.convert_ids_to_tokens(ids.tolist()),
             "input_string": graph.input_string, "n_pos": graph.n_pos,
             "clean_logits_vs_transformers": hf_diff,
             "graph": graph_tensors("graph", graph, tensors)}
    limited = attribute(ids, model, max_feature_nodes=case["max_feature_nodes"], **ATTRIBUTE)
    entry["graph_limited"] = graph_tensors("graph_limited", limited, tensors)
    entry["graph_limited"]["max_feature_nodes"] = case["max_feature_nodes"]
    entry["interventions"] = record_interventions(model, ids, graph, n_layers, tensors)
    name = f"prompt{index}.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / name))
    entry["tensors"] = name
    entry["_graph"] = graph
    return entry


def write_graph_json(graph, case_dir: Path, slug: str) -> str:
    """The file circuit-tracer's frontend opens, as its create_graph_files writes it."""
    from circuit_tracer.utils.create_graph_files import create_graph_files

    out = case_dir / "graph_files"
    if out.exists():
        shutil.rmtree(out)
    create_graph_files(graph, slug=slug, output_path=str(out), **PRUNE)
    return f"graph_files/{slug}.json"


def versions() -> dict:
    names = ["circuit-tracer", "torch", "transformer-lens", "transformers", "tokenizers",
             "safetensors", "numpy", "pydantic"]
    freeze = sorted(f"{d.metadata['Name']}=={d.version}" for d in md.distributions())
    return {"python": sys.version.split()[0], "key": {n: md.version(n) for n in names},
            "pip_freeze": freeze}


def fingerprint(case_dir: Path) -> dict:
    """sha256 of every file the recording describes (model, transcoders, tensors)."""
    import hashlib

    files = sorted(p for p in case_dir.rglob("*") if p.is_file()
                   and p.parts[len(case_dir.parts)] in ("model", "transcoders")
                   or p.parent == case_dir and p.suffix == ".safetensors")
    return {p.relative_to(case_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files}


def tl_config(model) -> dict:
    keys = ["n_layers", "d_model", "d_head", "n_heads", "n_key_value_heads", "d_mlp", "d_vocab",
            "n_ctx", "act_fn", "normalization_type", "positional_embedding_type", "eps",
            "rotary_base", "rotary_dim", "gated_mlp", "final_rms", "original_architecture"]
    cfg = model.cfg
    return {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
            for k in keys for v in [getattr(cfg, k, None)]}


def record_case(name: str, case: dict, out: Path, graph_json: bool) -> dict:
    import contextlib

    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    for old in case_dir.glob("prompt*.safetensors"):
        old.unlink()
    hf_model, tok = save_model(case, case_dir / "model")
    files = make_transcoders(case, mlp_inputs(case, hf_model, tok), case_dir / "transcoders")
    transcoders = load_transcoders(case_dir / "transcoders")
    with contextlib.chdir(case_dir):
        model = build_replacement_model(case_dir / "model", hf_model, tok, transcoders)
        prompts = [record_prompt(model, hf_model, tok, case, p, i, case_dir)
                   for i, p in enumerate(case["prompts"])]
        graph_file = write_graph_json(prompts[0]["_graph"], case_dir, f"{name}-prompt0") \
            if graph_json else None
    for p in prompts:
        del p["_graph"]
    meta = {
        "case": name, "versions": versions(), "seed": case["seed"],
        "model": {"folder": "model", "hf_config": json.loads(
            (case_dir / "model" / "config.json").read_text()), "transformer_lens": tl_config(model),
            "transformer_lens_flags": TL_FLAGS},
        "transcoders": {"folder": "transcoders", "files": files,
                        "kind": "cross_layer_transcoder" if case.get("clt") else "transcoder_set",
                        "feature_input_hook": case["feature_input_hook"],
                        "feature_output_hook": case["feature_output_hook"],
                        "d_transcoder": case["d_transcoder"], "activation": case["activation"],
                        "skip": case["skip"], "fire_fraction_target": case["fire_fraction"],
                        "loaded_with": ("circuit_tracer.transcoder.cross_layer_transcoder.load_clt"
                                        if case.get("clt") else
                                        "circuit_tracer.utils.hf_utils.load_transcoders")
                        + " (lazy_encoder=False, lazy_decoder=False, float32)"},
        "attribute": dict(ATTRIBUTE, update_interval=4, offload=None),
        "prune": PRUNE, "zero_positions": [0, 1], "node_order": NODE_ORDER,
        "graph_json": graph_file, "prompts": prompts, "fingerprint": fingerprint(case_dir),
    }
    (case_dir / "recording.json").write_text(json.dumps(meta, indent=1) + "\n")
    del model
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--graph-json", nargs="*", default=["gpt2"],
                    help="cases whose first prompt's graph.json is written")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # one summation order, so reruns write the same numbers
    torch.manual_seed(0)
    for name in args.cases:
        meta = record_case(name, CASES[name], args.out, name in args.graph_json)
        for p in meta["prompts"]:
            g = p["graph"]
            print(f"{name} {p['prompt']!r}: {g['n_active_features']} features, "
                  f"{len(g['logit_targets'])} logits, {g['pruned_nodes']} nodes kept, "
                  f"replacement {g['replacement_score']:.4f} "
                  f"completeness {g['completeness_score']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
