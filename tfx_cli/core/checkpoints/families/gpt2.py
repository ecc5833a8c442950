"""GPT-2 (HF GPT2LMHeadModel folders) and nanoGPT (ckpt.pt): configs and tensor names.

HF GPT-2 stores its linears as Conv1D, (in, out), and fuses q, k and v in c_attn; nanoGPT
uses nn.Linear, (out, in), with the same fusion. Both are tfx's pre-LN GPT with learned
positions."""
from __future__ import annotations

from ....errors import WeightsError
from .common import activation, ln_leaf, norm_rules, strip_prefix
from .registry import Family, Renames, TensorMap, register


def gpt2_config(hf: dict, where: str) -> dict:
    """ModelConfig keyword arguments of a GPT2LMHeadModel config.json."""
    if hf.get("scale_attn_by_inverse_layer_idx") or hf.get("reorder_and_upcast_attn"):
        raise WeightsError(f"{where}: GPT-2 attention variants "
                           "(scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn) "
                           "are not supported")
    d = hf.get("n_embd", 768)
    return dict(
        vocab_size=hf.get("vocab_size", 50257), context_length=hf.get("n_positions", 1024),
        d_model=d, n_heads=hf.get("n_head", 12), n_layers=hf.get("n_layer", 12),
        d_ff=hf.get("n_inner") or 4 * d, qkv_bias=True, proj_bias=True,
        ln_eps=hf.get("layer_norm_epsilon", 1e-5),
        activation=activation(where, hf.get("activation_function", "gelu_new")),
        positional="learned", tie_embeddings=hf.get("tie_word_embeddings", True))


# Each mapping returns (tfx name -> tensor, tfx name -> checkpoint name) and drops the
# checkpoint's non-parameters (causal-mask buffers, position ids, rotary tables).
_GPT2_NAMES = Renames([
    (r"wte\.weight", "embed.tok_emb.weight"), (r"wpe\.weight", "embed.pos_emb.weight"),
    *norm_rules(r"ln_f", "ln_f"), (r"lm_head\.weight", "lm_head.weight"),
    *norm_rules(r"h\.(\d+)\.ln_([12])", r"blocks.\1.ln\2"),
    (r"h\.\d+\.attn\.(?:bias|masked_bias)", None),  # old saves: the causal mask, a buffer
])
# Conv1D linears, (in, out): transposed to tfx's (out, in)
_CONV1D = {"attn.c_proj": "attn.out_proj", "mlp.c_fc": "ffn.fc1", "mlp.c_proj": "ffn.fc2"}


def map_gpt2(state: dict, cfg) -> tuple[dict, dict]:
    """HF GPT-2 stores Conv1D weights as (in, out) and fuses q, k, v in c_attn."""
    state = strip_prefix(state, ("transformer.",))
    out = TensorMap()
    for key, t in state.items():
        if _GPT2_NAMES.apply(out, key, key, t):
            continue
        parts = key.split(".")
        rest, leaf = ".".join(parts[2:-1]), parts[-1]
        b = f"blocks.{parts[1]}" if parts[0] == "h" and len(parts) >= 4 else None
        if b and rest == "attn.c_attn":
            # (C, 3C) weight or (3C,) bias: q, k, v side by side along the last axis
            for name, part in zip(("W_query", "W_key", "W_value"), t.chunk(3, dim=-1)):
                out.put(f"{b}.attn.{name}.{leaf}", key, part.t() if leaf == "weight" else part)
        elif b and rest in _CONV1D:
            out.put(f"{b}.{_CONV1D[rest]}.{leaf}", key, t.t() if leaf == "weight" else t)
        else:
            out.keep(key, t)  # reported as unexpected
    return out.result()


GPT2 = register(Family("gpt2", ("GPT2LMHeadModel", "GPT2Model"), gpt2_config, map_gpt2,
                       model_types=("gpt2",), causal=True))


# -- nanoGPT ckpt.pt ----------------------------------------------------------------
def nanogpt_config(args: dict) -> dict:
    """ModelConfig keyword arguments of a nanoGPT checkpoint's model_args."""
    bias = bool(args.get("bias", True))
    # nanoGPT: exact GELU, head tied to the token embedding, GPT-2's BPE
    return dict(
        vocab_size=args.get("vocab_size", 50304), context_length=args.get("block_size", 1024),
        d_model=args.get("n_embd", 768), n_heads=args.get("n_head", 12),
        n_layers=args.get("n_layer", 12), qkv_bias=bias, proj_bias=bias, activation="gelu",
        positional="learned", causal=True, tie_embeddings=True, tokenizer="gpt2")


def map_nanogpt(state: dict, cfg) -> tuple[dict, dict]:
    """nanoGPT uses nn.Linear (out, in), so only c_attn needs splitting (along rows)."""
    state = strip_prefix(state, ("_orig_mod.",))  # torch.compile's wrapper
    out, src = {}, {}
    for key, t in state.items():
        parts = key.split(".")
        if parts[0] == "transformer":
            parts = parts[1:]
        ours = ".".join(parts)
        if parts[0] in ("wte", "wpe"):
            ours = f"embed.{'tok' if parts[0] == 'wte' else 'pos'}_emb.weight"
        elif parts[0] == "ln_f" and len(parts) == 2:
            ours = f"ln_f.{ln_leaf(parts[1])}"
        elif parts[0] == "h" and len(parts) >= 4:
            b, rest, leaf = f"blocks.{parts[1]}", ".".join(parts[2:-1]), parts[-1]
            if rest in ("ln_1", "ln_2"):
                ours = f"{b}.ln{rest[-1]}.{ln_leaf(leaf)}"
            elif rest == "attn.c_attn":
                for name, part in zip(("W_query", "W_key", "W_value"), t.chunk(3, dim=0)):
                    out[f"{b}.attn.{name}.{leaf}"] = part
                    src[f"{b}.attn.{name}.{leaf}"] = key
                continue
            elif rest == "attn" and leaf == "bias":
                continue  # the causal-mask buffer of the non-flash path
            elif rest in ("attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                ours = {"attn.c_proj": f"{b}.attn.out_proj", "mlp.c_fc": f"{b}.ffn.fc1",
                        "mlp.c_proj": f"{b}.ffn.fc2"}[rest] + f".{leaf}"
        out[ours], src[ours] = t, key
    if not cfg.proj_bias:
        # nanoGPT's bias=False LayerNorms have no shift; tfx's have one, and zero is exact
        import torch

        for ln in ["ln_f"] + [f"blocks.{i}.ln{j}" for i in range(cfg.n_layers) for j in (1, 2)]:
            if f"{ln}.scale" in out and f"{ln}.shift" not in out:
                out[f"{ln}.shift"] = torch.zeros_like(out[f"{ln}.scale"])
                src[f"{ln}.shift"] = "(zeros: LayerNorm without bias)"
    return out, src
