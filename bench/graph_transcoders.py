"""Write random transcoders with a realistic sparsity for a model, for timing `tfx graph`.

    python bench/graph_transcoders.py -w smollm2 --width 8192 --l0 64 OUT_DIR
    python bench/graph_transcoders.py -c gpt124m OUT_DIR     (random GPT-2-small weights)

Each layer's encoder and decoder rows are random unit vectors; the encoder bias is set so
that on a calibration text about --l0 features fire per token at that layer (one
threshold per layer: the quantile of the pre-activations). The folder is in
circuit-tracer's layout (config.yaml, one safetensors file per layer), reading ln2's
normalised rows (TransformerLens's ln2.hook_normalized, before the gain) and writing
the FFN output."""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
from safetensors.torch import save_file

CALIBRATION = ("The quick brown fox jumps over the lazy dog. In 1905 Einstein published "
               "four papers; the third introduced special relativity, and the capital of "
               "France is Paris, where the Seine flows past the Louvre.")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("-w", "--weights", default=None)
    ap.add_argument("-c", "--config", default=None, help="a preset with random weights")
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--l0", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from tfx_cli.core import load as loading
    from tfx_cli.core.spec import ModelSpec

    m = loading.load(ModelSpec(config=args.config) if args.config
                     else ModelSpec(weights=args.weights or "smollm2"))
    L, D = m.cfg.n_layers, m.cfg.d_model
    ids = m.tokenizer.encode(CALIBRATION)
    names = [f"blocks.{i}.ln2.normed" for i in range(L)]  # ln2.hook_normalized: before the gain
    with m.model.record(names) as tr, torch.inference_mode():
        m.model(torch.tensor([ids]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(args.seed)
    files = []
    for i in range(L):
        site = tr.raw(names[i]).float()[1:]  # (T, D), past position 0
        W_enc = torch.nn.functional.normalize(torch.randn(args.width, D, generator=g), dim=1)
        W_dec = torch.nn.functional.normalize(torch.randn(args.width, D, generator=g), dim=1)
        W_dec *= float(site.norm(dim=1).mean()) / args.l0 ** 0.5
        pre = site @ W_enc.T
        cut = torch.quantile(pre.flatten()[:2_000_000], 1 - args.l0 / args.width)
        files.append(f"layer_{i}.safetensors")
        save_file({"W_enc": W_enc, "W_dec": W_dec, "b_enc": torch.full((args.width,), -float(cut)),
                   "b_dec": torch.zeros(D)}, str(out / files[-1]))
    (out / "config.yaml").write_text(
        "model_kind: transcoder_set\nfeature_input_hook: ln2.hook_normalized\n"
        "feature_output_hook: hook_mlp_out\ntranscoders:\n"
        + "".join(f"  - {f}\n" for f in files), encoding="utf-8")


if __name__ == "__main__":
    main()
