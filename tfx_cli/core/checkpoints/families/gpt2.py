"""GPT-2 (HF GPT2LMHeadModel folders) and nanoGPT (ckpt.pt): configs and tensor names.

HF GPT-2 stores its linears as Conv1D, (in, out), and fuses q, k and v in c_attn; nanoGPT
uses nn.Linear, (out, in), with the same fusion. Both are tfx's pre-LN GPT with learned
positions."""
from __future__ import annotations

from ....errors import WeightsError
from .common import activation, norm_rules, strip_prefix, unprefixed
from .registry import Family, Renames, Split, TensorMap, Transpose, register


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


def _gpt_names(fused: tuple, linear: tuple, buffers: str) -> Renames:
    """GPT-2's tensor names, which nanoGPT keeps: `fused` the converters of c_attn (q, k
    and v in one linear), `linear` those of the other linears, `buffers` the causal-mask
    buffers' names to drop."""
    qkv = [rf"blocks.\1.attn.{name}.\2" for name in ("W_query", "W_key", "W_value")]
    return Renames([
        (r"wte\.weight", "embed.tok_emb.weight"), (r"wpe\.weight", "embed.pos_emb.weight"),
        *norm_rules(r"ln_f", "ln_f"), (r"lm_head\.weight", "lm_head.weight"),
        *norm_rules(r"h\.(\d+)\.ln_([12])", r"blocks.\1.ln\2"),
        (r"h\.(\d+)\.attn\.c_attn\.(weight|bias)", tuple(qkv), *fused),
        (r"h\.(\d+)\.attn\.c_proj\.(weight|bias)", r"blocks.\1.attn.out_proj.\2", *linear),
        (r"h\.(\d+)\.mlp\.c_fc\.(weight|bias)", r"blocks.\1.ffn.fc1.\2", *linear),
        (r"h\.(\d+)\.mlp\.c_proj\.(weight|bias)", r"blocks.\1.ffn.fc2.\2", *linear),
        (buffers, None),
    ])


# Each mapping returns (tfx name -> tensor, tfx name -> checkpoint name) and drops the
# checkpoint's non-parameters (causal-mask buffers). HF GPT-2's linears are Conv1D, (in,
# out): transposed to tfx's (out, in), c_attn's q, k, v side by side along the last axis
# (old saves keep the causal mask as attn.bias, attn.masked_bias).
_GPT2_NAMES = _gpt_names(fused=(Split(dim=-1), Transpose()), linear=(Transpose(),),
                         buffers=r"h\.\d+\.attn\.(?:bias|masked_bias)")


def map_gpt2(state: dict, cfg) -> tuple[dict, dict]:
    """An HF GPT-2 checkpoint's tensors -> (tfx name -> tensor, tfx name -> theirs)."""
    return _GPT2_NAMES.read(strip_prefix(state, ("transformer.",)), cfg).result()


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


# nanoGPT's linears are nn.Linear, (out, in) as tfx's, c_attn's q, k, v stacked by rows;
# attn.bias is the causal-mask buffer of its non-flash path
_NANOGPT_NAMES = _gpt_names(fused=(Split(dim=0),), linear=(), buffers=r"h\.\d+\.attn\.bias")


def map_nanogpt(state: dict, cfg) -> tuple[dict, dict]:
    """A nanoGPT ckpt.pt's model tensors -> (tfx name -> tensor, tfx name -> theirs)."""
    # torch.compile's wrapper, then the module nanoGPT holds its blocks in
    state = {unprefixed(unprefixed(key, ("_orig_mod.",)), ("transformer.",)): (key, t)
             for key, t in state.items()}
    out = TensorMap()
    for name, (key, t) in state.items():
        if not _NANOGPT_NAMES.apply(out, name, key, t, cfg):
            out.put(name, key, t)  # reported as unexpected
    if not cfg.proj_bias:
        # nanoGPT's bias=False LayerNorms have no shift; tfx's have one, and zero is exact
        import torch

        for ln in ["ln_f"] + [f"blocks.{i}.ln{j}" for i in range(cfg.n_layers) for j in (1, 2)]:
            if f"{ln}.scale" in out.tensors and f"{ln}.shift" not in out.tensors:
                out.put(f"{ln}.shift", "(zeros: LayerNorm without bias)",
                        torch.zeros_like(out.tensors[f"{ln}.scale"]))
    return out.result()
