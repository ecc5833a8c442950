"""Every bad input tfx knows about, one row each, and the docs' table of them.

Each Case is run through the real CLI (CliRunner on tfx_cli.cli.app) in a scratch folder
holding the files it needs. It must exit with its code, print nothing on stdout, print
exactly one line `tfx: error: ...` on stderr, raise the catalogue class it names, and
leave the folder as it was (nothing written, nothing overwritten).

docs/errors.md's "What tfx does with bad input" table is generated from these cases and
holds the messages of real runs; test_errors_page_table_matches_the_cases keeps the two the same
(regenerate with `python tests/cli/test_bad_inputs.py --write`). Rows whose id names a test in
test_pipes.py (closed stdout, Ctrl-C) need real processes and are checked there.
"""
import hashlib
import json
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional
from unittest import mock

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, when run as a script
from collect_folders import hand_collected  # noqa: E402

from tfx_cli import cli, errors
from tfx_cli._clicks import CLICK_ERROR
from tfx_cli.cli import app

ROOT = Path(__file__).resolve().parents[2]
ERRORS_PAGE = ROOT / "docs" / "errors.md"  # the catalogue's page of the docs site
SENTENCE = "When you play game of thrones"
LONG = "a " * 100  # 100 word tokens: past the toy config's context of 64
TOY = ["-c", "toy"]
WORDY = ["-c", "gpt2", "--layers", "1", "--d-model", "6", "--heads", "2", "-t", "word"]
MLM = ["-c", "bert-base", "--layers", "1", "--d-model", "8", "--heads", "2"]  # a tiny masked LM
ELLIPSIS = "…"
MOE = ["-c", "tiny-moe"]  # 4 layers, 8 experts, 2 per token


# -- files the cases read -----------------------------------------------------------
def _text(name: str, content: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_text(content, encoding="utf-8")


def _bytes(name: str, content: bytes) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(content)


def _folder(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).mkdir()


# attribution graphs: a transcoder folder in circuit-tracer's layout, small and seeded
def _transcoders(name: str, *, layers: int = 1, d_model: int = 6, width: int = 4,
                 nan: bool = False, hook: str = "ln2.hook_normalized",
                 missing: bool = False, huge: bool = False) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        import torch
        from safetensors.torch import save_file

        folder = d / name
        folder.mkdir()
        g = torch.Generator().manual_seed(0)
        files = []
        for layer in range(layers):
            w = torch.randn(width, d_model, generator=g)
            if nan:
                w[0, 0] = float("nan")
            files.append(f"layer_{layer}.safetensors")
            # huge: finite decoder rows up to 3e38, whose products overflow float32
            dec = w / w.abs().max() * 3e38 if huge else w.clone()
            if not (missing and layer == layers - 1):
                save_file({"W_enc": w, "W_dec": dec, "b_enc": torch.zeros(width),
                           "b_dec": torch.zeros(d_model)}, str(folder / files[-1]))
        (folder / "config.yaml").write_text(
            f"feature_input_hook: {hook}\nfeature_output_hook: hook_mlp_out\ntranscoders:\n"
            + "".join(f"  - {f}\n" for f in files), encoding="utf-8")
    return make


def _transcoder_file(name: str, layer: str, change) -> Callable[[Path], None]:
    """_transcoders' set in `name` with `layer`'s file changed: `change(bytes) -> bytes`,
    or a dict of tensors to write in its place."""
    def make(d: Path) -> None:
        from safetensors.torch import load_file, save_file

        path = d / name / layer
        if callable(change):
            path.write_bytes(change(path.read_bytes()))
        else:
            save_file({**load_file(str(path)), **change}, str(path))
    return make


def _pairs(name: str = "acts", *, latents_file: Optional[int] = None) -> Callable[[Path], None]:
    """A collect folder of a 2-layer model's MLP pairs (blocks.{0,1}.ln2.out, .ffn.out),
    8 wide, 64 tokens, written by hand as tfx collect writes one."""
    def make(d: Path) -> None:
        import numpy as np
        from safetensors.numpy import save_file

        folder = d / name
        folder.mkdir()
        g = np.random.default_rng(0)
        sites = [f"blocks.{i}.{s}" for i in (0, 1) for s in ("ln2.out", "ffn.out")]
        shard = folder / "shard-00000.safetensors"
        save_file({s: g.standard_normal((64, 8)).astype(np.float32) for s in sites},
                  str(shard))
        (folder / "manifest.json").write_text(json.dumps({
            "schema": "tfx/1", "kind": "activations", "complete": True, "tokens": 64,
            "options": {"dtype": "float32", "ctx": 16},
            "model": {"config": "gpt2", "n_layers": 2},
            "sites": [{"name": s, "dims": ["T", "C"], "shape": [64, 8], "dtype": "F32"}
                      for s in sites],
            "shards": [{"file": shard.name, "first_token": 0, "tokens": 64,
                        "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()}]}))
    return make


def _tfx_layer(name: str, layer: int, latents: int) -> Callable[[Path], None]:
    """DIR `name` holding one layer file tfx train-transcoder wrote (ReLU, 8 wide)."""
    def make(d: Path) -> None:
        import torch

        from tfx_cli.core.features.transcoder_set import write_layer

        (d / name).mkdir(exist_ok=True)
        write_layer(d / name / f"layer_{layer}.safetensors",
                    {"W_enc": torch.ones(latents, 8), "W_dec": torch.ones(latents, 8),
                     "b_enc": torch.zeros(latents), "b_dec": torch.zeros(8)},
                    {"format": "circuit-tracer transcoder", "activation": "relu",
                     "layer": str(layer), "input_site": f"blocks.{layer}.ln2.out",
                     "output_site": f"blocks.{layer}.ffn.out",
                     "feature_input_hook": "mlp.hook_in",
                     "feature_output_hook": "hook_mlp_out"})
    return make


def _run_in_progress(name: str, layer: int, latents: int) -> Callable[[Path], None]:
    """DIR/state/layer_I of a train-transcoder run killed before its file was written."""
    def make(d: Path) -> None:
        state = d / name / "state" / f"layer_{layer}"
        state.mkdir(parents=True)
        (state / "train-state.json").write_text(json.dumps({
            "schema": "tfx-train-sae/1", "complete": False,
            "identity": {"layer": layer, "input": f"blocks.{layer}.ln2.out", "skip": False,
                         "architecture": "standard", "latents": latents, "k": None}}))
    return make


def _top_folder(name: str, *, sae: Optional[str] = None, sha: Optional[str] = None,
                site: str = "blocks.0.ln2.normed") -> Callable[[Path], None]:
    """A `tfx top -o DIR` folder: result.json of feature 1's examples and the manifest
    naming the SAE it ran (none: a site's own units)."""
    def make(d: Path) -> None:
        folder = d / name
        folder.mkdir()
        unit = {"unit": 1, "examples": [{"value": 1.0, "doc": 0, "position": 1,
                                         "token": "x", "context": {"tokens": ["a", "x"],
                                                                   "at": 1}}]}
        (folder / "result.json").write_text(json.dumps({
            "schema": "tfx/1", "command": "top", "result": {"site": site, "units": [unit]}}))
        options = {"site": site, "units": [1], **({"sae": sae, "sae_sha256": sha} if sae else {})}
        (folder / "manifest.json").write_text(json.dumps({
            "schema": "tfx/1", "kind": "top", "complete": True, "options": options}))
    return make


def _eval_run(kind: str, name: str) -> Callable[[Path], None]:
    """An eval-sae -o ev run of folder `name` (kind: transcoders or sae), kept; then the
    set's (or the SAE's) weights changed in place, at the same path."""
    def make(d: Path) -> None:
        from safetensors.torch import load_file, save_file

        from tfx_cli import api

        model = dict(config="gpt2", layers=1, d_model=6, heads=2, tokenizer="word")
        api.eval_sae("python-docs", **{kind: name}, max_docs=1, max_tokens=20, output="ev",
                     **model)  # in the case's folder, as the case's own run names them
        weights = d / name / ("layer_0.safetensors" if kind == "transcoders"
                              else "sae_weights.safetensors")
        t = load_file(str(weights))
        save_file({k: v * 2 for k, v in t.items()}, str(weights))
    return make


def _collected_tokens_damaged(d: Path) -> None:
    """A real collect folder of a tiny model's MLP pairs whose tokens.parquet was
    overwritten after collect wrote it."""
    from tfx_cli import api

    (d / "docs.txt").write_text("the cat sat on the mat and the dog ran off\n" * 8)
    api.collect(str(d / "docs.txt"), select=["blocks.*.ln2.out", "blocks.*.ffn.out"],
                output=str(d / "acts"), config="gpt2", layers=2, d_model=8, heads=2,
                tokenizer="word")
    (d / "acts" / "tokens.parquet").write_bytes(NOISE)
    (d / "docs.txt").unlink()


# Bytes that no reader accepts, but the same on every run (os.urandom would make the
# message of a parser that quotes them change between runs).
NOISE = bytes((i * 37 + 11) % 251 for i in range(1000))


def _torch_zip(name: str, keep: float) -> Callable[[Path], None]:
    """A real torch.save file cut to `keep` of its length (keep=1: whole)."""
    def make(d: Path) -> None:
        import torch

        torch.save({"model_args": {"n_layer": 1}, "model": {"w": torch.zeros(64, 64)}},
                   d / name)
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[:int(len(data) * keep)])
    return make


class Payload:
    """Unpickling this would run code: it writes the marker file `pwned.txt`."""

    def __reduce__(self):
        return (Path.write_text, (Path("pwned.txt"), "code ran"))


def _pickled_code(d: Path) -> None:
    import torch

    torch.save({"model_args": {}, "model": Payload()}, d / "evil.pt")


def _hf_truncated(d: Path) -> None:
    """An HF GPT-2 folder whose model.safetensors stops half way."""
    import json

    import torch
    from safetensors.torch import save_file

    folder = d / "gpt2-tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 8,
        "n_head": 2, "n_layer": 1, "n_positions": 16, "vocab_size": 50257}))
    save_file({"transformer.wte.weight": torch.zeros(50257, 8)},
              str(folder / "model.safetensors"))
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:len(data) // 2])


def _safetensors_alone(d: Path) -> None:
    (d / "shards").mkdir()
    (d / "shards" / "model.safetensors").write_bytes(NOISE)


def _word_tokenizer(path: Path, words: list, size: int) -> None:
    """A whitespace word-level tokenizer.json of `size` ids (the `tokenizers` package)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, **{w: i + 1 for i, w in enumerate(words)}}
    vocab.update({f"<unused{i}>": i for i in range(len(vocab), size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))


def _llama_folder(name: str, *, rope_scaling=None, shards=0) -> Callable[[Path], None]:
    """A one-layer HF Llama folder of zeros; with shards, an index naming that many shard
    files of which only the first is written."""
    def make(d: Path) -> None:
        import json

        import torch
        from safetensors.torch import save_file

        folder = d / name
        folder.mkdir()
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2,
               "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 16,
               "max_position_embeddings": 16}
        if rope_scaling:
            cfg["rope_scaling"] = rope_scaling
        (folder / "config.json").write_text(json.dumps(cfg))
        _word_tokenizer(folder / "tokenizer.json", ["hi", "there"], 16)
        tensors = {"model.embed_tokens.weight": torch.zeros(16, 8)}
        if not shards:
            save_file(tensors, str(folder / "model.safetensors"))
            return
        names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
        save_file(tensors, str(folder / names[0]))
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"model.embed_tokens.weight": names[0],
                            "model.norm.weight": names[-1]}}))
    return make


def _seq2seq_folder(name: str, family: str, tables_differ: bool = False,
                    **config) -> Callable[[Path], None]:
    """A tiny HF Marian or BART folder (config.json, a word tokenizer, zero tensors); with
    tables_differ its encoder's token table is saved apart from, and unlike, the shared
    one."""
    def make(d: Path) -> None:
        import json

        import torch
        from safetensors.torch import save_file

        folder = d / name
        folder.mkdir()
        arch = {"marian": "MarianMTModel", "bart": "BartForConditionalGeneration",
                "mbart": "MBartForConditionalGeneration", "t5": "T5ForConditionalGeneration"}
        cfg = {"architectures": [arch[family]], "model_type": family, "d_model": 8,
               "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
               "decoder_attention_heads": 2, "encoder_ffn_dim": 16, "decoder_ffn_dim": 16,
               "vocab_size": 16, "max_position_embeddings": 16, "decoder_start_token_id": 1,
               **config}
        (folder / "config.json").write_text(json.dumps(cfg))
        _word_tokenizer(folder / "tokenizer.json", ["hi", "there"], 16)
        tensors = {"model.shared.weight": torch.zeros(16, 8)}
        if tables_differ:
            tensors["model.encoder.embed_tokens.weight"] = torch.ones(16, 8)
        save_file(tensors, str(folder / "model.safetensors"))
    return make


def _t5_folder(name: str, **config) -> Callable[[Path], None]:
    """A tiny HF T5 folder (one encoder and one decoder block, d_model 8, two heads 4
    wide, a word tokenizer), every tensor zeros."""
    def make(d: Path) -> None:
        import json

        import torch
        from safetensors.torch import save_file

        folder = d / name
        folder.mkdir()
        cfg = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
               "d_model": 8, "d_kv": 4, "d_ff": 16, "num_layers": 1, "num_heads": 2,
               "vocab_size": 16, "relative_attention_num_buckets": 8,
               "relative_attention_max_distance": 16, "decoder_start_token_id": 0,
               **config}
        (folder / "config.json").write_text(json.dumps(cfg))
        _word_tokenizer(folder / "tokenizer.json", ["hi", "there"], 16)
        tensors = {"shared.weight": torch.zeros(16, 8)}
        for stack, sublayers in (("encoder", ("SelfAttention", "DenseReluDense")),
                                 ("decoder", ("SelfAttention", "EncDecAttention",
                                              "DenseReluDense"))):
            block = f"{stack}.block.0.layer"
            for j, sub in enumerate(sublayers):
                tensors[f"{block}.{j}.layer_norm.weight"] = torch.zeros(8)
                shapes = {"wi": (16, 8), "wo": (8, 16)} if sub == "DenseReluDense" else \
                    {"q": (8, 8), "k": (8, 8), "v": (8, 8), "o": (8, 8)}
                for leaf, shape in shapes.items():
                    tensors[f"{block}.{j}.{sub}.{leaf}.weight"] = torch.zeros(shape)
            tensors[f"{block}.0.SelfAttention.relative_attention_bias.weight"] = \
                torch.zeros(8, 2)
            tensors[f"{stack}.final_layer_norm.weight"] = torch.zeros(8)
        save_file(tensors, str(folder / "model.safetensors"))
    return make


def _gguf_of(name: str, arch: str) -> Callable[[Path], None]:
    """A GGUF file whose header names `arch` (and one tensor)."""
    def make(d: Path) -> None:
        import gguf
        import numpy as np

        w = gguf.GGUFWriter(str(d / name), arch)
        w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return make


def _gguf_moe(d: Path) -> None:
    """A llama GGUF whose header says it has 8 experts (llama.cpp's Mixtral)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(d / "mixtral.gguf"), "llama")
    w.add_uint32("llama.expert_count", 8)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _gguf_cut(d: Path) -> None:
    """A whole GGUF (one 64 x 64 tensor) cut to half its length: a partial download."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(d / "cut.gguf"), "llama")
    w.add_tensor("token_embd.weight", np.zeros((64, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = (d / "cut.gguf").read_bytes()
    (d / "cut.gguf").write_bytes(data[:len(data) // 2])


def _gpt2_wrong_shape(d: Path) -> None:
    """A GPT-2 folder whose config says a 12-wide MLP where the tensors are 32 wide."""
    import json

    import torch
    from safetensors.torch import save_file

    folder = d / "gpt2-odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "n_embd": 8, "n_head": 2, "n_layer": 1,
        "n_positions": 16, "vocab_size": 16, "n_inner": 12}))
    save_file({"transformer.h.0.mlp.c_fc.weight": torch.zeros(8, 32)},
              str(folder / "model.safetensors"))


def _llama_zeros(d: Path) -> None:
    """A whole two-layer HF Llama folder of zeros whose blocks (263 kB each in float32)
    outweigh its embedding and head (4 kB each), with a word tokenizer that knows 'hi'."""
    import json

    import torch
    from safetensors.torch import save_file

    folder = d / "llama-zeros"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 16, "max_position_embeddings": 16}))
    _word_tokenizer(folder / "tokenizer.json", ["hi", "there"], 16)
    tensors = {"model.embed_tokens.weight": torch.zeros(16, 64),
               "model.norm.weight": torch.zeros(64), "lm_head.weight": torch.zeros(16, 64)}
    for i in range(2):
        layer = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", (64, 64)), ("self_attn.k_proj", (64, 64)),
                            ("self_attn.v_proj", (64, 64)), ("self_attn.o_proj", (64, 64)),
                            ("mlp.gate_proj", (256, 64)), ("mlp.up_proj", (256, 64)),
                            ("mlp.down_proj", (64, 256)), ("input_layernorm", (64,)),
                            ("post_attention_layernorm", (64,))):
            tensors[f"{layer}{name}.weight"] = torch.zeros(shape)
    save_file(tensors, str(folder / "model.safetensors"))


def _trained(name: str, vocab: Optional[str]) -> Callable[[Path], None]:
    """A folder `tfx train` wrote (toy, one step), its vocab.json then replaced by `vocab`
    (None: deleted)."""
    def make(d: Path) -> None:
        from tfx_cli import api

        api.train(config="toy", pairs=ROOT / "samples" / "seed001.tsv", output=d / name,
                  steps=1)
        if vocab is None:
            (d / name / "vocab.json").unlink()
        else:
            (d / name / "vocab.json").write_text(vocab, encoding="utf-8")
    return make


GEMMA_LIKE = json.dumps({"name": "tiny-gemma", "vocab_size": 256, "context_length": 16,
                         "d_model": 8, "n_heads": 2, "n_kv_heads": 1, "n_layers": 1,
                         "d_ff": 16, "norm": "rmsnorm", "norm_plus_one": True,
                         "embed_scale": True, "tokenizer": "byte", "activation": "gelu",
                         "positional": "rope"})
PAIRS = (ROOT / "samples" / "seed001.tsv").read_text(encoding="utf-8")
SMALL_GPT2 = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2"]


# -- corpus commands -------------------------------------------------------------------
TINY = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2"]


def _parquet(d: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["hi there"]}), d / "docs.parquet")


def _other_run(d: Path) -> None:
    """A collect folder of another model (gpt2) over the same corpus."""
    (d / "acts").mkdir()
    (d / "acts" / "manifest.json").write_text(json.dumps({
        "schema": "tfx/1", "kind": "activations", "model": {"config": "gpt2"},
        "corpus": {"source": "python-docs"}, "options": {}}))
def _sae(name: str, hook: str, d_in: int = 6, d_sae: int = 8,
         npz: bool = False) -> Callable[[Path], None]:
    """A random SAE folder as SAELens writes one (cfg.json + sae_weights.safetensors), or
    as Gemma Scope does (params.npz, no config: it names no site)."""
    def make(d: Path) -> None:
        import json

        import torch
        from safetensors.torch import save_file

        folder = d / name
        folder.mkdir()
        g = torch.Generator().manual_seed(0)
        tensors = {"W_enc": torch.randn(d_in, d_sae, generator=g),
                   "W_dec": torch.randn(d_sae, d_in, generator=g),
                   "b_enc": torch.zeros(d_sae), "b_dec": torch.zeros(d_in)}
        if npz:
            import numpy as np

            np.savez(folder / "params.npz", threshold=np.zeros(d_sae, dtype=np.float32),
                     **{k: v.numpy() for k, v in tensors.items()})
            return
        (folder / "cfg.json").write_text(json.dumps({
            "architecture": "standard", "d_in": d_in, "d_sae": d_sae,
            "metadata": {"hook_name": hook, "sae_lens_version": "6.18.0"}}))
        save_file(tensors, str(folder / "sae_weights.safetensors"))
    return make


# -- the cases ------------------------------------------------------------------------
def _collected(d: Path) -> None:
    """A small collect folder written by hand (tests/collect_folders.py) at d/acts."""
    hand_collected(d / "acts")


def _other_sae_run(d: Path) -> None:
    """An SAE folder holding another train-sae run's state."""
    (d / "sae").mkdir()
    (d / "sae" / "train-state.json").write_text(json.dumps({
        "schema": "tfx-train-sae/1", "identity": {"site": "blocks.3.resid_out"},
        "complete": False}))


def _mlp_input_only(d: Path) -> None:
    """A collect folder of a 2-layer model holding block 0's MLP input but not its output."""
    hand_collected(d / "acts")
    site = "blocks.0.ln2.out"
    shard = d / "acts" / "shard-00000.safetensors"
    from safetensors.numpy import load_file, save_file

    save_file({site: load_file(str(shard))["blocks.0.resid_out"]}, str(shard))
    manifest = json.loads((d / "acts" / "manifest.json").read_text())
    manifest["model"]["n_layers"] = 2
    manifest["sites"][0]["name"] = site
    manifest["shards"][0]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (d / "acts" / "manifest.json").write_text(json.dumps(manifest))


def _hf_config(name: str, **change) -> Callable[[Path], None]:
    """A small Mixtral config.json with `change` applied (None: the key left out)."""
    hf = {"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
          "intermediate_size": 96, "vocab_size": 256, "num_local_experts": 8,
          "num_experts_per_tok": 2}
    hf = {k: v for k, v in {**hf, **change}.items() if v is not None}
    return _text(name, json.dumps(hf))


# -- held folders, damaged shards, non-finite SAEs ----------------------------------------
_HELD: list = []  # the folder holds of the last case that made one


def _held(name: str) -> Callable[[Path], None]:
    """Folder `name`, held as a running tfx run holds its output folder."""
    def make(d: Path) -> None:
        from tfx_cli.core.outputs import FolderHold

        while _HELD:
            _HELD.pop().release()
        (d / name).mkdir()
        _HELD.append(FolderHold(d / name))
    return make


def _shard_poisoned(rehash: bool) -> Callable[[Path], None]:
    """_collected's folder with a NaN at row 9 of its shard; `rehash`: the manifest's
    sha256 written anew (only the value betrays it)."""
    def make(d: Path) -> None:
        import numpy as np
        from safetensors.numpy import load_file, save_file

        _collected(d)
        file = d / "acts" / "shard-00000.safetensors"
        tensors = load_file(str(file))
        tensors["blocks.0.resid_out"][9, 2] = np.nan
        save_file(tensors, str(file))
        if rehash:
            manifest = json.loads((d / "acts" / "manifest.json").read_text())
            manifest["shards"][0]["sha256"] = hashlib.sha256(file.read_bytes()).hexdigest()
            (d / "acts" / "manifest.json").write_text(json.dumps(manifest))
    return make


def _sae_damaged(name: str, tensor: str, at: tuple, value: float) -> Callable[[Path], None]:
    """_sae's folder with one value of `tensor` replaced."""
    def make(d: Path) -> None:
        from safetensors.torch import load_file, save_file

        _sae(name, "blocks.0.hook_resid_post")(d)
        file = d / name / "sae_weights.safetensors"
        tensors = load_file(str(file))
        tensors[tensor][at] = value
        save_file(tensors, str(file))
    return make


# Where a diverging run first breaks follows the CPU's rounding: the same `train` broke
# at step 3 with encoder.embed.tok NaN on one x86-64 CPU, at step 4 with
# encoder.blocks.0.ln1.var inf on another. Such a message is checked by its form (a step,
# a site and what went wrong are named, each shaped as tfx writes them) and the errors page shows
# … for each; a message that lacks one of them no longer matches the errors page's row.
DIVERGED_AT = (
    r"(?<=diverged at step )[1-9]\d*(?= of \d+: )",
    r"(?<=\d: )(?:the loss|the weight [a-z_][\w.]*|[a-z_]\w*(?:\.\w+)+)(?= became )",
    r"(?<= became )(?:(?:NaN|nan|-?inf)(?: and (?:NaN|-?inf))*|not finite)(?= in this )",
)


@dataclass
class Case:
    id: str  # table row key
    what: str  # the input tried, in words (table column)
    args: list
    error: str  # the catalogue class raised (UsageError for Click's own parsing errors)
    expect: str  # a phrase the message must hold
    exit: int = 2
    stdin: Optional[bytes] = None
    files: tuple = ()  # callables that create files in the scratch folder
    shown: Optional[str] = None  # the command as the table shows it (default: from args)
    volatile: tuple = ()  # regexes for machine-dependent parts (the table shows …)
    computed: tuple = ()  # regexes for numbers a forward pass computed (see same_message)
    keep: dict = field(default_factory=dict)  # files that must keep this content
    hide: tuple = ()  # modules made unimportable for the run (a missing package)


# tfx graph --open: a two-token graph.json (two embeddings, one logit), links as given
def _graph_file(name: str, links: list) -> Callable[[Path], None]:
    node = {"feature": 0, "ctx_idx": 0, "token_prob": 0.0, "is_target_logit": False,
            "run_idx": 0, "reverse_ctx_idx": 0, "jsNodeId": "", "clerp": "",
            "influence": 0.5, "activation": None}
    nodes = [{**node, "node_id": f"E_{5 + p}_{p}", "feature": p, "layer": "E", "ctx_idx": p,
              "feature_type": "embedding"} for p in (0, 1)]
    nodes.append({**node, "node_id": "3_7_1", "feature": 7, "layer": "3", "ctx_idx": 1,
                  "feature_type": "logit", "token_prob": 0.5, "is_target_logit": True,
                  "clerp": 'Output "x" (p=0.500)', "influence": None})
    doc = {"metadata": {"slug": "g", "scan": "m", "transcoder_list": [],
                        "prompt_tokens": ["a", "b"], "prompt": "ab"},
           "qParams": {}, "nodes": nodes, "links": links}
    return _text(name, json.dumps(doc))


def _graph_weight(name: str, weight: str) -> Callable[[Path], None]:
    """The two-token graph.json above with one link whose weight is written as `weight`
    (JSON text: 1e39, or an integer of 401 digits)."""
    def make(d: Path) -> None:
        _graph_file(name, [{"source": "E_5_0", "target": "3_7_1", "weight": 0.5}])(d)
        text = (d / name).read_text(encoding="utf-8")
        (d / name).write_text(text.replace('"weight": 0.5', f'"weight": {weight}'),
                              encoding="utf-8")
    return make


def _saved_graph(name: str, cut: int = 0) -> Callable[[Path], None]:
    """An unpruned graph as `tfx graph --save` writes it (one layer, two tokens, one
    feature, one logit), its last `cut` bytes left out."""
    def make(d: Path) -> None:
        import torch

        from tfx_cli.core.circuits.graph import Graph, GraphSource
        from tfx_cli.core.results import ModelInfo

        size = 1 + 2 * 2 + 1  # a feature, the errors and tokens of two positions, a logit
        g = Graph([5, 6], 1, torch.tensor([[0, 1, 3]]), torch.tensor([1.5]),
                  torch.tensor([0]), [7], torch.tensor([0.5]), torch.rand(size, size),
                  source=GraphSource("a b", ["a", "b"], ["x"], ModelInfo(config="gpt2"),
                                     "tc", "hook_resid_mid", "hook_mlp_out"),
                  labels={0: "'x'"})
        g.save(d / name)
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[:len(data) - cut])
    return make


CASES = [
    # text
    Case("empty-text", "empty text", ["embed", "", *TOY], "InputTextError", "is empty"),
    Case("blank-text", "whitespace-only text", ["trace", " \n\t ", *TOY], "InputTextError",
         "is empty", shown='tfx trace " \\n\\t " -c toy'),
    Case("no-text", "no text at all", ["layernorm", *TOY], "InputTextError", "no text given"),
    Case("empty-stdin", "empty standard input", ["ffn", "-", *TOY], "InputTextError",
         "is empty", stdin=b"\n", shown="echo | tfx ffn - -c toy"),
    Case("empty-prompt", "empty prompt", ["generate", "", *TOY], "InputTextError",
         "needs at least one token"),
    Case("long-text", "text longer than the context (100 tokens, context 64)",
         ["trace", LONG, *TOY], "InputTextError", "context length is 64",
         shown='tfx trace "a a a … (100 words)" -c toy'),
    Case("long-prompt", "prompt longer than the context",
         ["generate", LONG, *TOY, "-n", "1"], "InputTextError", "pass --truncate",
         shown='tfx generate "a a a … (100 words)" -c toy -n 1'),
    Case("long-kv", "--kv text longer than the context",
         ["attend", "you win", "--kv", LONG, *TOY, "--mask", "none"], "InputTextError",
         "is 100 tokens", shown='tfx attend "you win" --kv "a a a … (100 words)" -c toy '
         "--mask none"),
    Case("stdin-not-utf8", "standard input that is not UTF-8",
         ["tokenize", "-"], "InputTextError", "byte 3", stdin=b"ok \xff\xfe",
         shown="printf 'ok \\xff\\xfe' | tfx tokenize -"),
    Case("unknown-encoding", "an --encoding Python does not know",
         ["embed", "-", *TOY, "--encoding", "klingon"], "InputTextError", "unknown encoding",
         stdin=b"hello", shown="echo hello | tfx embed - -c toy --encoding klingon"),
    Case("argv-not-utf8", "command-line text with undecodable bytes",
         ["tokenize", "ok \udcff"], "InputTextError", "not valid UTF-8",
         shown="tfx tokenize $'ok \\xff'"),
    # configs
    Case("unknown-preset", "unknown preset", ["trace", "hi", "-c", "gpt5"], "ConfigError",
         "unknown config 'gpt5'"),
    Case("config-syntax", "config file with a JSON syntax error",
         ["attend", "hi", "-c", "bad.json"], "ConfigError", "line 2, column",
         files=(_text("bad.json", '{"d_model": 8,\n "n_heads": 2'),)),
    Case("config-unknown-key", "config file with an unknown key (n_head for n_heads)",
         ["count-params", "-c", "typo.json"], "ConfigError", "unknown config key(s) n_head",
         files=(_text("typo.json", '{"d_model": 8, "n_head": 2}'),)),
    Case("config-unknown-architecture", "a HuggingFace config.json of an architecture tfx "
         "does not read", ["count-params", "-c", "mamba.json"], "ConfigError",
         "unknown architecture MambaForCausalLM; tfx reads the families",
         files=(_text("mamba.json", '{"architectures": ["MambaForCausalLM"], '
                      '"model_type": "mamba", "hidden_size": 768, "state_size": 16}'),)),
    Case("config-wrong-type", "config file with a string where a number goes",
         ["count-params", "-c", "types.json"], "ConfigError", "must be a whole number",
         files=(_text("types.json", '{"d_model": "512"}'),)),
    Case("config-heads", "config whose heads do not divide d_model",
         ["embed", "hi", "-c", "heads.json"], "ConfigError", "does not divide",
         files=(_text("heads.json", '{"d_model": 8, "n_heads": 3}'),)),
    Case("config-zero-size", "config with a non-positive size",
         ["ffn", "hi", "-c", "zero.json"], "ConfigError", "must be positive",
         files=(_text("zero.json", '{"n_layers": 0}'),)),
    Case("config-not-object", "config file that is not a JSON object",
         ["trace", "hi", "-c", "list.json"], "ConfigError", "expected a JSON object",
         files=(_text("list.json", "[8, 2]"),)),
    Case("config-missing", "config file that does not exist",
         ["trace", "hi", "-c", "nothere.json"], "ConfigError", "cannot read config file"),
    Case("heads-override", "--heads that does not divide d_model",
         ["attend", "hi", *TOY, "--heads", "4"], "ConfigError", "does not divide"),
    Case("size-beyond-limit", "absurd --d-model", ["posenc", "--length", "4",
         "--d-model", "10000000"], "ConfigError", "beyond tfx's limit"),
    Case("zero-layers", "--layers 0", ["embed", "hi", "--layers", "0"], "UsageError",
         "not in the range x>=1"),
    Case("too-big-for-memory", "a model too large for memory (about 774 GiB of weights)",
         ["trace", "hi", "--d-model", "16384", "--heads", "16", "--layers", "64"],
         "ResourceError", "pass --force", volatile=(r"(?<=only )[\d.]+(?= GiB)",)),
    # ranges
    Case("layer-range", "--layer past the last block", ["attend", SENTENCE, *TOY,
         "--layer", "1"], "RangeError", "0 to 0"),
    Case("negative-layer", "negative --layer", ["layernorm", SENTENCE, *TOY, "--layer", "-1"],
         "RangeError", "--layer -1"),
    Case("ffn-layer-range", "--layer past the last block", ["ffn", SENTENCE, *TOY,
         "--layer", "5"], "RangeError", "--layer 5"),
    Case("head-range", "--head past the last head", ["attend", SENTENCE, *TOY, "--head", "2"],
         "RangeError", "2 heads"),
    Case("query-pos-range", "--query-pos past the text", ["attend", SENTENCE, *TOY,
         "--explain", "--query-pos", "9"], "RangeError", "--query-pos 9"),
    Case("valid-lens-range", "--valid-lens 0", ["attend", SENTENCE, *TOY, "--valid-lens", "0"],
         "RangeError", "1 to 6"),
    Case("length-range", "--length past the context", ["posenc", *TOY, "--length", "65"],
         "RangeError", "1 to 64"),
    Case("show-layers-range", "--show-layers past the last block",
         ["report", SENTENCE, *TOY, "--show-layers", "0,3", "-o", "r.html"], "RangeError",
         "--show-layers 3"),
    Case("seq-len-range", "--seq-len longer than the context",
         ["count-params", "--seq-len", "5000"], "RangeError", "longer than the context"),
    Case("kv-causal", "causal cross-attention between texts of different lengths",
         ["attend", "you win", "--kv", SENTENCE, *TOY, "--mask", "causal"], "RangeError",
         "--mask none"),
    # selection
    Case("select-nothing", "--select glob that matches nothing",
         ["trace", "hi", *TOY, "-s", "blocks.9.*"], "SelectError", "matches no trace name"),
    Case("show-unknown", "--show stage that does not exist",
         ["attend", "hi", *TOY, "--show", "scores,bogus"], "SelectError", "'bogus'"),
    # sampling
    Case("negative-temperature", "negative --temperature",
         ["generate", "hi", *TOY, "--temperature", "-1"], "UsageError", "--temperature -1"),
    Case("top-k-vocab", "--top-k larger than the vocabulary",
         ["next", "hi", *TOY, "--top-k", "100000"], "RangeError", "larger than the vocabulary"),
    Case("top-p-range", "--top-p above 1", ["next", "hi", *TOY, "--top-p", "1.5"],
         "UsageError", "(0, 1]"),
    Case("zero-new-tokens", "--max-new-tokens 0", ["generate", "hi", *TOY, "-n", "0"],
         "UsageError", "at least 1"),
    Case("no-lm-head", "next-token commands on an encoder", ["lens", "hi", "-c", "minilm"],
         "ConfigError", "no output head"),
    # tokenizers
    Case("unknown-tokenizer", "unknown tokenizer", ["tokenize", "hi", "-t", "klingon"],
         "TokenizerError", "unknown tokenizer"),
    Case("corpus-missing", "--corpus file that does not exist",
         ["tokenize", "hi", "-t", "word", "--corpus", "nothere.txt"], "TokenizerError",
         "does not exist"),
    Case("corpus-binary", "--corpus file that is not text",
         ["embed", "hi", *TOY, "--corpus", "noise.bin"], "TokenizerError", "not UTF-8",
         files=(_bytes("noise.bin", NOISE),)),
    # weights
    Case("weights-missing", "--weights path that does not exist",
         ["trace", "hi", "-w", "nothere"], "WeightsError", "not found"),
    Case("tokenize-weights-missing", "tokenize --weights path that does not exist",
         ["tokenize", "hi", "-w", "nothere"], "WeightsError", "not found"),
    Case("weights-garbage-torch", "a .pt file of random bytes", ["next", "hi", "-w", "junk.pt"],
         "WeightsError", "corrupted", files=(_bytes("junk.pt", NOISE),)),
    Case("weights-truncated-torch", "a torch checkpoint cut short",
         ["next", "hi", "-w", "cut.pt"], "WeightsError", "truncated or corrupted",
         files=(_torch_zip("cut.pt", 0.5),)),
    Case("weights-pickled-code", "a checkpoint whose pickle would run code",
         ["generate", "hi", "-w", "evil.pt"], "WeightsError", "never unpickles code",
         files=(_pickled_code,)),
    Case("weights-garbage-gguf", "a .gguf file of random bytes",
         ["trace", "hi", "-w", "junk.gguf"], "WeightsError", "is not a GGUF file",
         files=(_bytes("junk.gguf", NOISE),)),
    Case("weights-truncated-safetensors", "an HF folder whose model.safetensors is cut short",
         ["attend", "hi", "-w", "gpt2-tiny"], "WeightsError", "truncated or corrupted",
         files=(_hf_truncated,)),
    Case("weights-no-config", "a folder with model.safetensors but no config.json",
         ["trace", "hi", "-w", "shards"], "WeightsError", "has no config.json",
         files=(_safetensors_alone,)),
    Case("weights-missing-shard", "an HF folder whose index names a shard it lacks",
         ["next", "hi", "-w", "sharded"], "WeightsError",
         "names the shard model-00002-of-00002.safetensors",
         files=(_llama_folder("sharded", shards=2),)),
    Case("weights-rope-scaling", "a config.json with a rope_scaling type tfx does not compute",
         ["next", "hi", "-w", "dynamic"], "WeightsError",
         "rope scaling type 'dynamic' is not supported",
         files=(_llama_folder("dynamic", rope_scaling={"rope_type": "dynamic",
                                                       "factor": 2.0}),)),
    Case("weights-shape-mismatch", "a checkpoint tensor whose shape disagrees with the config",
         ["next", "hi", "-w", "gpt2-odd"], "WeightsError",
         "h.0.mlp.c_fc.weight (tfx blocks.0.ffn.fc1.weight) has shape",
         files=(_gpt2_wrong_shape,)),
    Case("weights-gguf-architecture", "a GGUF of an architecture tfx does not read",
         ["next", "hi", "-w", "rwkv.gguf"], "WeightsError",
         "GGUF architecture 'rwkv6' is not supported", files=(_gguf_of("rwkv.gguf", "rwkv6"),)),
    # T5 (its relative position bias is a switch of the model)
    Case("t5-decoder-without-target", "a T5 command on the decoder without --target",
         ["trace", "hi", "-w", "t5", "-s", "decoder.*.cross.pattern"], "SelectError",
         "give it with --target TEXT", files=(_t5_folder("t5"),)),
    Case("weights-t5-activation", "a T5 config with a gated activation tfx lacks",
         ["count-params", "-w", "t5"], "WeightsError", "feed_forward_proj 'gated-relu'",
         files=(_t5_folder("t5", feed_forward_proj="gated-relu"),)),
    Case("weights-unshared-embeddings", "a Marian folder whose stacks have their own tables",
         ["generate", "hi", "-w", "marian"], "WeightsError",
         "share_encoder_decoder_embeddings is false",
         files=(_seq2seq_folder("marian", "marian", share_encoder_decoder_embeddings=False),)),
    Case("weights-untied-seq2seq", "a BART folder with tie_word_embeddings false",
         ["next", "hi", "-w", "bart"], "WeightsError", "tie_word_embeddings is false",
         files=(_seq2seq_folder("bart", "bart", tie_word_embeddings=False),)),
    Case("weights-decoder-vocab", "a Marian folder with a decoder vocabulary of its own",
         ["attend", "hi", "-w", "marian"], "WeightsError",
         "decoder_vocab_size 32 differs from vocab_size 16",
         files=(_seq2seq_folder("marian", "marian", decoder_vocab_size=32),)),
    Case("weights-seq2seq-sizes", "an encoder and a decoder with different head counts",
         ["trace", "hi", "-w", "bart"], "WeightsError",
         "encoder_attention_heads 2 and decoder_attention_heads 4 differ",
         files=(_seq2seq_folder("bart", "bart", decoder_attention_heads=4),)),
    Case("weights-legacy-switch", "a BART config asking for pre-LN (normalize_before)",
         ["next", "hi", "-w", "bart"], "WeightsError", "normalize_before true is not BART",
         files=(_seq2seq_folder("bart", "bart", normalize_before=True),)),
    Case("weights-seq2seq-activation", "a BART config with an activation tfx lacks",
         ["ffn", "hi", "-w", "bart"], "WeightsError", "activation_function 'tanh'",
         files=(_seq2seq_folder("bart", "bart", activation_function="tanh"),)),
    Case("weights-no-decoder-start", "an mBART config that names no decoder start token",
         ["generate", "hi", "-w", "mbart"], "WeightsError", "decoder_start_token_id",
         files=(_seq2seq_folder("mbart", "mbart", decoder_start_token_id=None,
                                bos_token_id=None),)),
    Case("weights-token-tables-differ", "a Marian checkpoint whose stacks' token tables differ",
         ["next", "hi", "-w", "marian"], "WeightsError",
         "model.encoder.embed_tokens.weight differs from model.shared.weight",
         files=(_seq2seq_folder("marian", "marian", tables_differ=True),)),
    # precision, device, memory
    Case("dtype-unknown", "--dtype not in the list", ["attend", "hi", *TOY, "--dtype",
         "float64"], "UsageError", "choose float32 (the default), bfloat16 or float16"),
    Case("device-unknown", "--device tfx does not know", ["attend", "hi", *TOY, "--device",
         "tpu"], "UsageError", "is not a device tfx knows"),
    Case("device-no-cuda", "--device cuda where torch has no CUDA", ["attend", "hi", *TOY,
         "--device", "cuda"], "UsageError", "run on the CPU (--device cpu"),
    Case("max-memory-not-a-size", "--max-memory that is not a size",
         ["next", "hi", *TOY, "--max-memory", "lots"], "UsageError", "is not a size"),
    Case("max-memory-one-block", "--max-memory that cannot hold one block of a checkpoint",
         ["next", "hi", "-w", "llama-zeros", "--max-memory", "100kB"], "ResourceError",
         "each block needs 263 kB in float32", files=(_llama_zeros,)),
    Case("max-memory-run", "--max-memory that holds a block but not the run (every tensor "
         "recorded)", ["trace", "hi", "-w", "llama-zeros", "--max-memory", "265kB"],
         "ResourceError", "recorded tensors", files=(_llama_zeros,)),
    Case("max-memory-random", "--max-memory below random weights (made in memory, never "
         "streamed)", ["attend", "hi", "--max-memory", "100MB"], "ResourceError",
         "random weights are made in memory"),
    Case("weights-and-config", "--weights with --config",
         ["trace", "hi", "-w", "minilm", *TOY], "ConfigError", "drop --config"),
    Case("weights-and-size", "--weights with a size override",
         ["trace", "hi", "-w", "minilm", "--layers", "2"], "ConfigError",
         "cannot change a checkpoint's shape"),
    # output files
    Case("report-exists", "report over an existing file",
         ["report", "hi", *TOY, "-o", "old.html"], "OutputFileError", "pass --force",
         files=(_text("old.html", "mine"),), keep={"old.html": "mine"}),
    Case("plot-exists", "--plot over an existing file",
         ["embed", "hi", *TOY, "--plot", "old.png"], "OutputFileError", "pass --force",
         files=(_text("old.png", "mine"),), keep={"old.png": "mine"}),
    Case("output-no-folder", "output into a folder that does not exist",
         ["report", "hi", *TOY, "-o", "nodir/r.html"], "OutputFileError", "create it first"),
    Case("output-is-folder", "output path that is a folder",
         ["report", "hi", *TOY, "-o", "pages.html"], "OutputFileError", "is a folder",
         files=(_folder("pages.html"),)),
    Case("output-under-file", "output path under a file",
         ["attend", "hi", *TOY, "--plot", "notes.txt/a.png"], "OutputFileError",
         "is a file, not a folder", files=(_text("notes.txt", "mine"),),
         keep={"notes.txt": "mine"}),
    Case("output-type", "--plot with an extension it cannot draw",
         ["layernorm", "hi", *TOY, "--plot", "norms.txt"], "UsageError", ".png or .svg"),
    Case("plot-no-matplotlib", "--plot without matplotlib installed",
         ["attend", "hi", *TOY, "--plot", "a.png"], "MissingPackageError", "pip install",
         hide=("matplotlib",), shown="tfx attend hi -c toy --plot a.png  (no matplotlib)"),
    Case("report-no-output", "report without -o", ["report", "hi", *TOY], "UsageError",
         "--output FILE.html"),
    # usage
    Case("unknown-option", "misspelt option", ["attend", "hi", "--heds", "2"], "UsageError",
         "No such option"),
    Case("not-a-number", "a word where a number goes", ["attend", "hi", "--layer", "two"],
         "UsageError", "is not a valid int"),
    Case("unknown-command", "misspelt command", ["atend", "hi"], "UsageError",
         "No such command"),
    Case("seed-range", "negative --seed", ["trace", "hi", *TOY, "--seed", "-1"], "UsageError",
         "not in the range 0<=x<="),
    Case("inputs-and-text", "attend --inputs together with TEXT",
         ["attend", "hi", "--inputs", "m.json"], "InputTextError", "not both",
         files=(_text("m.json", "{}"),)),
    Case("inputs-ragged", "attend --inputs with a ragged matrix",
         ["attend", "--inputs", "m.json"], "InputTextError", "ragged",
         files=(_text("m.json", '{"x": [[1, 0], [1]], "w_q": [[1]], "w_k": [[1]], '
                                '"w_v": [[1]]}'),)),
    Case("inputs-nan", "attend --inputs with NaN in x",
         ["attend", "--inputs", "m.json"], "InputTextError", "finite number",
         files=(_text("m.json", '{"x": [[NaN, 1], [1, 2]], "w_q": [[1, 0], [0, 1]], '
                                '"w_k": [[1, 0], [0, 1]], "w_v": [[1, 0], [0, 1]]}'),)),
    Case("inputs-overflow", "attend --inputs whose scores overflow (1e308)",
         ["attend", "--inputs", "m.json"], "InputTextError", "overflow",
         files=(_text("m.json", '{"x": [[1e308, 1e308], [1, 2]], "w_q": [[1e308, 0], [0, 1]],'
                                ' "w_k": [[1, 0], [0, 1]], "w_v": [[1, 0], [0, 1]]}'),)),
    Case("inputs-and-model", "attend --inputs with a model option",
         ["attend", "--inputs", "m.json", "--heads", "2"], "InputTextError",
         "--heads does not apply to --inputs",
         files=(_text("m.json", '{"x": [[1, 2]], "w_q": [[1], [0]], "w_k": [[1], [0]], '
                                '"w_v": [[1], [0]]}'),)),
    # what was typed, read the way it was meant
    Case("tokenizer-and-weights", "--tokenizer with --weights (ids the model would misread)",
         ["attend", "hi", "-w", "minilm", "-t", "gpt2"], "ConfigError", "drop --tokenizer"),
    Case("tokenize-config-and-weights", "tokenize with --config and --weights",
         ["tokenize", "hi", "-c", "toy", "-w", "minilm"], "ConfigError", "drop --config"),
    Case("tokenize-weights-garbage", "tokenize --weights of random bytes",
         ["tokenize", "hi", "-w", "junk.bin"], "WeightsError", "corrupted",
         files=(_bytes("junk.bin", NOISE),)),
    Case("weights-safetensors-alone", "a .safetensors file with no config.json beside it",
         ["trace", "hi", "-w", "junk.safetensors"], "WeightsError", "without the config.json",
         files=(_bytes("junk.safetensors", NOISE),)),
    Case("empty-weights", "an empty --weights", ["trace", "hi", "-w", ""], "UsageError",
         "--weights is empty"),
    Case("empty-config", "an empty --config", ["embed", "hi", "--config", ""], "UsageError",
         "--config is empty"),
    Case("empty-select", "an empty --select", ["trace", "hi", *TOY, "-s", ""], "UsageError",
         "--select has an empty name"),
    Case("config-rope-theta", "config with a non-positive rope_theta",
         ["attend", "hi", "-c", "rope.json"], "ConfigError", "positive, finite",
         files=(_text("rope.json", '{"positional": "rope", "rope_theta": -5}'),)),
    Case("config-eos", "config with an end-of-sequence id past the vocabulary",
         ["generate", "hi", "-c", "eos.json"], "ConfigError", "eos_ids",
         files=(_text("eos.json", '{"vocab_size": 100, "eos_ids": [100]}'),)),
    Case("word-vocab-too-big", "a word vocabulary larger than the config's table",
         ["embed", "hi", "-c", "small.json"], "TokenizerError", "embedding table",
         files=(_text("small.json", '{"vocab_size": 10, "tokenizer": "word"}'),)),
    Case("corpus-not-word", "--corpus with a tokenizer that reads no corpus",
         ["tokenize", "hi", "-t", "gpt2", "--corpus", "c.txt"], "TokenizerError",
         "drop --corpus", files=(_text("c.txt", "some words"),)),
    Case("encoding-argument", "--encoding for text given as an argument",
         ["tokenize", "hi", "--encoding", "latin-1"], "UsageError", "applies to text read"),
    Case("unquoted-text", "a text of several words without quotes",
         ["tokenize", "Hello", "world"], "UsageError", "goes in quotes"),
    Case("too-many-tokens", "an absurd --max-new-tokens",
         ["generate", "hi", *TOY, "-n", "99999999999999999999"], "UsageError",
         "more than tfx generates"),
    Case("temperature-inf", "--temperature inf", ["generate", "hi", *TOY, "--temperature",
                                                  "inf"], "UsageError", "finite"),
    Case("count-weights-tie", "count-params --tie on a checkpoint",
         ["count-params", "-w", "minilm", "--tie"], "ConfigError", "cannot change a checkpoint"),
    Case("completion-shell", "--show-completion for a shell tfx does not complete",
         ["--show-completion", "tcsh"], "UsageError", "not a shell"),
    # encoder–decoder: the decoder's input, the stacks, cross-attention
    Case("target-one-stack", "--target on a model with one stack",
         ["attend", "hi", "--target", "there", "--layers", "1"], "UsageError",
         "--target needs an encoder–decoder model"),
    Case("target-encoder-only", "--target on an encoder-only model",
         ["next", "hi", "-w", "minilm", "--target", "there"], "ConfigError",
         "no output head"),
    Case("cross-without-target", "--cross without --target",
         ["attend", SENTENCE, *TOY, "--cross"], "UsageError", "give it with --target"),
    Case("stack-decoder-without-target", "--stack decoder without --target",
         ["ffn", SENTENCE, *TOY, "--stack", "decoder"], "UsageError",
         "--stack decoder needs the decoder's input"),
    Case("target-too-long", "a --target longer than the context",
         ["attend", "hi", *TOY, "--target", LONG], "InputTextError",
         "the target is 101 tokens"),
    Case("cross-causal", "--cross with --mask causal",
         ["attend", SENTENCE, *TOY, "--target", "you", "--cross", "--mask", "causal"],
         "UsageError", "does not apply to cross-attention"),
    Case("trace-decoder-without-target", "trace --select of decoder names without --target",
         ["trace", SENTENCE, *TOY, "-s", "decoder.*"], "SelectError",
         "give it with --target"),
    # training
    Case("train-no-output", "train without --output",
         ["train", *TOY, "--pairs", "p.tsv"], "UsageError", "no output folder",
         files=(_text("p.tsv", "a b\tc d\n"),)),
    Case("train-no-data", "train without --pairs or --text",
         ["train", *TOY, "-o", "out"], "UsageError", "give what to learn"),
    Case("train-pairs-one-stack", "train --pairs on a model with one stack",
         ["train", *WORDY, "--pairs", "p.tsv", "-o", "out"], "UsageError",
         "has one stack", files=(_text("p.tsv", "a b\tc d\n"),)),
    Case("train-text-seq2seq", "train --text on an encoder–decoder",
         ["train", *TOY, "--text", "t.txt", "-o", "out"], "UsageError",
         "learns source -> target pairs", files=(_text("t.txt", "a b c\n"),)),
    Case("train-bad-line", "a --pairs line without a tab",
         ["train", *TOY, "--pairs", "p.tsv", "-o", "out"], "InputTextError",
         "line 2 is not `source<TAB>target`",
         files=(_text("p.tsv", "a b\tc d\nno tab here\n"),)),
    Case("train-output-exists", "train onto an existing folder",
         ["train", *TOY, "--pairs", "p.tsv", "-o", "out"], "UsageError",
         "pass --force to replace it",
         files=(_text("p.tsv", "a b\tc d\n"), _folder("out"))),
    Case("train-lr", "train --lr 0", ["train", *TOY, "--pairs", "p.tsv", "-o", "out",
                                      "--lr", "0"], "UsageError", "must be a positive",
         files=(_text("p.tsv", "a b\tc d\n"),)),
    # interventions: sites, ablation, steering, patching, attribution (on a one-layer
    # GPT reading words, and on toy's two stacks)
    Case("steer-decoder-position", "--steer narrowed past an encoder–decoder's steering "
         "targets", ["next", SENTENCE, *TOY, "--target", "you win", "--steer",
                     "decoder.blocks.0.resid_pre:p=3", "--toward", "win", "--away", "die"],
         "RangeError", "have 2 tokens with the start token (0 to 1)"),
    Case("ablate-no-stack", "--ablate on an encoder–decoder without the stack in the name",
         ["next", SENTENCE, *TOY, "--ablate", "blocks.0.attn.out"], "SelectError",
         "write encoder.blocks.0.attn.out or decoder.blocks.0.attn.out"),
    Case("ablate-unknown-site", "--ablate a name that is no site",
         ["trace", SENTENCE, *WORDY, "--ablate", "blocks.0.attn.output"], "SelectError",
         "valid sites: embed.tok"),
    Case("ablate-not-a-site", "--ablate a trace name nothing downstream reads",
         ["next", SENTENCE, *WORDY, "--ablate", "blocks.0.attn.scores"], "SelectError",
         "recorded but is not a site"),
    Case("ablate-block-range", "--ablate in a block the model lacks",
         ["lens", SENTENCE, *WORDY, "--ablate", "blocks.3.ffn.out"], "RangeError",
         "block 3 is out of range"),
    Case("ablate-head-range", "--ablate a head past the last",
         ["attend", SENTENCE, *WORDY, "--ablate", "blocks.0.attn.context:h=2"], "RangeError",
         "head 2 is out of range"),
    Case("ablate-no-heads", "--ablate narrowed to a head where there are none",
         ["trace", SENTENCE, *WORDY, "--ablate", "blocks.0.ffn.out:h=0"], "SelectError",
         "has no heads"),
    Case("ablate-position-range", "--ablate narrowed to a position past the text",
         ["trace", SENTENCE, *WORDY, "--ablate", "blocks.0.resid_out:p=6"], "RangeError",
         "the text has 6 tokens"),
    Case("ablate-bad-narrowing", "--ablate with a narrowing other than :h= and :p=",
         ["report", SENTENCE, *WORDY, "--ablate", "embed.out:pos=1", "-o", "r.html"],
         "UsageError", "not a narrowing"),
    Case("ablate-never-reached", "--ablate after the layer attend stops at",
         ["attend", "hi", "--layers", "2", "--d-model", "8", "--heads", "2", "-t", "byte",
          "--ablate", "blocks.1.attn.out"], "RangeError", "never reached"),
    Case("ablate-mode-alone", "--ablate-mode without --ablate",
         ["generate", "hi", *WORDY, "--ablate-mode", "mean"], "UsageError",
         "--ablate-mode applies to --ablate"),
    Case("ablate-mode-unknown", "--ablate-mode that is no mode",
         ["next", "hi", *WORDY, "--ablate", "embed.out", "--ablate-mode", "half"], "UsageError",
         "is not one of"),
    Case("ablate-inputs", "--ablate with attend --inputs",
         ["attend", "--inputs", "m.json", "--ablate", "blocks.0.attn.out"], "InputTextError",
         "--ablate does not apply to --inputs",
         files=(_text("m.json", '{"x": [[1, 2]], "w_q": [[1], [0]], "w_k": [[1], [0]], '
                                '"w_v": [[1], [0]]}'),)),
    Case("toward-without-steer", "--toward without --steer",
         ["next", "hi", *WORDY, "--toward", "win"], "UsageError", "add --steer SITE"),
    Case("steer-without-away", "--steer without --away",
         ["generate", "hi", *WORDY, "--steer", "blocks.0.resid_pre", "--toward", "win"],
         "UsageError", "--away is missing"),
    Case("steer-lengths", "--toward and --away of different token lengths",
         ["trace", SENTENCE, *WORDY, "--steer", "blocks.0.resid_pre", "--toward", "you win",
          "--away", "die"], "InputTextError", "need the same number of tokens"),
    Case("steer-empty", "an empty --toward", ["next", "hi", *WORDY, "--steer", "embed.out",
                                              "--toward", "", "--away", "die"],
         "InputTextError", "--toward is empty"),
    Case("steer-scale", "--scale that is not finite",
         ["next", "hi", *WORDY, "--steer", "embed.out", "--toward", "win", "--away", "die",
          "--scale", "nan"], "UsageError", "finite number"),
    Case("steer-position", "--steer narrowed past the steering texts",
         ["next", SENTENCE, *WORDY, "--steer", "embed.out:p=2", "--toward", "win",
          "--away", "die"], "RangeError", "--toward and --away have 1 token"),
    Case("patch-lengths", "patch CLEAN and CORRUPT of different token lengths",
         ["patch", SENTENCE, "--corrupt", "When you play", "--answer", "win", "--wrong",
          "die", *WORDY], "InputTextError", "same number of tokens"),
    Case("patch-answer-split", "patch --answer of more than one token",
         ["patch", SENTENCE, "--corrupt", "When you play game of you", "--answer", "you win",
          "--wrong", "die", *WORDY], "InputTextError", "splits it into 2 tokens"),
    Case("patch-same-answer", "patch --answer and --wrong the same token",
         ["patch", SENTENCE, "--corrupt", "When you play game of you", "--answer", "win",
          "--wrong", "win", *WORDY], "InputTextError", "the same token"),
    Case("patch-no-corrupt", "patch without --corrupt",
         ["patch", SENTENCE, "--answer", "win", "--wrong", "die", *WORDY], "UsageError",
         "--corrupt is missing"),
    Case("patch-no-difference", "patch CORRUPT giving the same logit difference as CLEAN",
         ["patch", SENTENCE, "--corrupt", SENTENCE, "--answer", "win", "--wrong", "die",
          *WORDY], "InputTextError", "same logit difference",
         computed=(r"(?<=same logit difference \()[^)]+(?=\))",)),
    Case("patch-site", "patch --site that is no patching site",
         ["patch", SENTENCE, "--corrupt", SENTENCE, "--answer", "win", "--wrong", "die",
          "--site", "neurons", *WORDY], "UsageError", "is not one of"),
    Case("patch-batch", "patch --batch 0",
         ["patch", SENTENCE, "--corrupt", SENTENCE, "--answer", "win", "--wrong", "die",
          "--batch", "0", *WORDY], "UsageError", "not in the range x>=1"),
    Case("patch-encoder", "patch on a model without an output head",
         ["patch", "hi", "--corrupt", "yo", "--answer", "a", "--wrong", "b", "-c", "minilm"],
         "ConfigError", "no output head"),
    Case("attribute-no-answer", "attribute without --answer",
         ["attribute", SENTENCE, *WORDY], "UsageError", "--answer is missing"),
    Case("attribute-empty-answer", "attribute with an empty --answer",
         ["attribute", SENTENCE, *WORDY, "--answer", ""], "InputTextError",
         "--answer is empty"),
    Case("attribute-wrong-split", "attribute --wrong of more than one token",
         ["attribute", SENTENCE, *WORDY, "--answer", "win", "--wrong", "or die"],
         "InputTextError", "must be one token"),
    # issue 25: non-finite values, repeated options, runaway output, damaged folders
    Case("nan-steer-scale", "--scale so large the steered stream overflows float32",
         ["next", "hi", *WORDY, "--steer", "blocks.0.resid_pre", "--toward", "win",
          "--away", "die", "--scale", "1e30"], "NonFiniteError", "use a smaller --scale"),
    Case("nan-train-lr", "train with a learning rate that diverges",
         ["train", *TOY, "--pairs", "p.tsv", "-o", "out", "--lr", "1e6", "--steps", "60"],
         "NonFiniteError", "lower --lr", files=(_text("p.tsv", PAIRS),),
         volatile=DIVERGED_AT),
    Case("float16-gemma", "--dtype float16 on a Gemma model (it overflows float16)",
         ["next", "hi", "-c", "gemma.json", "--dtype", "float16"], "UsageError",
         "--dtype bfloat16", files=(_text("gemma.json", GEMMA_LIKE),)),
    Case("steer-counts", "--steer twice but --toward three times",
         ["next", "hi", *WORDY, "--steer", "embed.out", "--steer", "blocks.0.resid_pre",
          "--toward", "a", "--toward", "b", "--toward", "c", "--away", "d"], "UsageError",
         "--steer is given 2 times but --toward 3 times"),
    Case("steer-token-ids", "--steer tokens.ids (ids, not activations)",
         ["next", "hi", *WORDY, "--steer", "tokens.ids", "--toward", "a", "--away", "b"],
         "SelectError", "use embed.tok or embed.out"),
    Case("ablate-glob", "--ablate a glob instead of site names",
         ["next", "hi", *WORDY, "--ablate", "blocks.*.attn.out"], "SelectError",
         "is a glob"),
    Case("ablate-target-position", "--ablate a decoder position past the target",
         ["next", SENTENCE, *TOY, "--target", "you win", "--ablate",
          "decoder.blocks.0.cross.pattern:p=5"], "RangeError",
         "the target (with its start token) has 3 tokens"),
    Case("stdin-twice", "patch reading CLEAN and --corrupt both from stdin",
         ["patch", "-", "--corrupt", "-", "--answer", "a", "--wrong", "b", *WORDY],
         "InputTextError", "standard input can be read once", stdin=b"hello\n",
         shown="echo hello | tfx patch - --corrupt - --answer a --wrong b -c gpt2 …"),
    Case("answer-emoji", "an --answer no single token spells (an emoji)",
         ["attribute", "hello", *SMALL_GPT2, "--answer", "\U0001F4A5"], "InputTextError",
         "no single token of this tokenizer spells it"),
    Case("report-too-large", "report whose page would pass 200 MB",
         ["report", "a" * 1100, "-c", "gpt124m", "--layers", "1", "--d-model", "64",
          "--heads", "64", "--context", "2048", "-t", "byte", "-o", "r.html"],
         "OutputFileError", "the page would be about",
         shown='tfx report "aaa… (1,100 bytes)" -c gpt124m --layers 1 --d-model 64 '
               '--heads 64 --context 2048 -t byte -o r.html'),
    Case("train-output-no-folder", "train -o inside a folder that does not exist",
         ["train", *TOY, "--pairs", "p.tsv", "-o", "nodir/sub/out"], "UsageError",
         "does not exist", files=(_text("p.tsv", PAIRS),)),
    Case("train-output-empty", "train -o with an empty name",
         ["train", *TOY, "--pairs", "p.tsv", "-o", ""], "UsageError", "--output is empty",
         files=(_text("p.tsv", PAIRS),), shown='tfx train -c toy --pairs p.tsv -o ""'),
    Case("trained-vocab-missing", "a trained folder without its vocab.json",
         ["next", "you win", "-w", "tr"], "WeightsError", "has no vocab.json",
         files=(_trained("tr", None),)),
    Case("trained-vocab-empty", "a trained folder whose vocab.json is empty",
         ["next", "you win", "-w", "tr"], "TokenizerError", "is not a tfx vocabulary",
         files=(_trained("tr", ""),)),
    Case("trained-vocab-short", "a trained folder whose vocab.json lists too few tokens",
         ["generate", "you win", "-w", "tr", "-n", "2"], "WeightsError",
         "the folder is damaged",
         files=(_trained("tr", '{"format": "tfx-vocab/1", "kind": "word", "tokens": []}'),)),
    # masked language models (fill-mask) and the families' missing norms
    Case("mask-on-causal", "a [MASK] to fill on a causal model",
         ["next", "Paris is the [MASK] of France."], "InputTextError", "is a causal model"),
    Case("fill-mask-no-mask", "a masked LM given a text without its mask token",
         ["next", "Paris is the capital of France.", *MLM], "InputTextError",
         "the text has none"),
    Case("fill-mask-tokenizer", "a masked LM read with a tokenizer that has no mask token",
         ["next", "hi", *MLM, "-t", "byte"], "TokenizerError", "has no mask token"),
    Case("generate-masked-lm", "generate on a masked LM", ["generate", "hi", "-c", "bert-base"],
         "ConfigError", "is a masked language model"),
    Case("patch-masked-lm", "patch on a masked LM",
         ["patch", "hi", "--corrupt", "yo", "--answer", "a", "--wrong", "b", "-c",
          "bert-base"], "ConfigError", "is a masked language model"),
    Case("attribute-masked-lm", "attribute on a masked LM",
         ["attribute", "hi", "--answer", "a", "-c", "bert-base"], "ConfigError",
         "is a masked language model"),
    Case("train-masked-lm", "train on a masked LM (it learns next tokens)",
         ["train", *MLM, "--text", "t.txt", "-o", "out"], "ConfigError",
         "is a masked language model", files=(_text("t.txt", "a b c\n"),)),
    Case("layernorm-no-norm", "layernorm --which ln1 where the family has none (OLMo 2)",
         ["layernorm", "hi", "-c", "olmo.json"], "RangeError", "has no norm before",
         files=(_text("olmo.json", '{"d_model": 8, "n_heads": 2, "n_layers": 1, '
                       '"context_length": 16, "vocab_size": 64, "norm": "rmsnorm", '
                       '"pre_norms": false, "sandwich_norm": true, "tokenizer": "word"}'),)),
    # -- mixtures of experts: the router and its sites
    Case("route-dense", "tfx route on a model without experts",
         ["route", SENTENCE, *WORDY], "ConfigError", "has no mixture-of-experts layers"),
    Case("ablate-router-dense", "a router site on a dense model",
         ["next", SENTENCE, *WORDY, "--ablate", "blocks.0.moe.expert:e=1"], "SelectError",
         "is a router site"),
    Case("ablate-expert-range", "--ablate an expert past the last",
         ["route", "hi", *MOE, "--ablate", "blocks.1.moe.expert:e=8"], "RangeError",
         "expert 8 is out of range"),
    Case("ablate-expert-unnamed", "--ablate an expert site without :e=",
         ["next", "hi", *MOE, "--ablate", "blocks.1.moe.expert"], "UsageError",
         "names no expert"),
    Case("ablate-expert-indices", "--ablate the chosen experts' indices",
         ["trace", "hi", *MOE, "--ablate", "blocks.0.moe.experts"], "SelectError",
         "holds expert indices"),
    Case("steer-expert", "--steer an expert site",
         ["next", "hi", *MOE, "--steer", "blocks.0.moe.expert:e=1", "--toward", "a",
          "--away", "b"], "UsageError", "routed around with --ablate"),
    Case("ffn-moe-layer", "tfx ffn on a mixture-of-experts layer",
         ["ffn", "hi", *MOE, "--layer", "2"], "UsageError", "is a mixture of experts"),
    Case("weights-gguf-moe", "a GGUF mixture of experts (llama.cpp's stacked experts)",
         ["route", "hi", "-w", "mixtral.gguf"], "WeightsError", "is not read yet",
         files=(_gguf_moe,)),
    # corpus commands: scan, top, collect, patch --pairs (core/datasets)
    Case("dataset-missing", "a corpus file that does not exist",
         ["scan", "nope.txt", *TINY], "InputTextError", "does not exist"),
    Case("corpus-empty", "a corpus with no document (blank lines only)",
         ["scan", "empty.txt", *TINY], "InputTextError", "holds no document",
         files=(_text("empty.txt", "\n  \n\n"),)),
    Case("dataset-binary", "a binary file given as a .txt corpus",
         ["scan", "noise.txt", *TINY], "InputTextError", "binary file",
         files=(_bytes("noise.txt", NOISE),)),
    Case("corpus-kind", "a corpus file that is neither .txt, .jsonl nor .parquet",
         ["top", "docs.csv", *TINY, "--site", "blocks.0.ffn.act"], "InputTextError",
         "neither .txt", files=(_text("docs.csv", "a,b\n"),)),
    Case("corpus-jsonl-line", "a JSONL corpus with a line that is not JSON",
         ["scan", "docs.jsonl", *TINY], "InputTextError", "line 2",
         files=(_text("docs.jsonl", '{"text": "hi there"}\n{oops\n'),)),
    Case("corpus-field", "a JSONL corpus without the --field key",
         ["scan", "docs.jsonl", *TINY], "InputTextError", "no field 'text'",
         files=(_text("docs.jsonl", '{"body": "hi there"}\n'),)),
    Case("corpus-column", "a Parquet corpus without the --field column",
         ["collect", "docs.parquet", *TINY, "--field", "body", "-s", "blocks.0.resid_out",
          "-o", "acts"], "InputTextError", "no column 'body'", files=(_parquet,)),
    Case("corpus-max-docs", "--max-docs 0", ["scan", "python-docs", *TINY, "--max-docs", "0"],
         "UsageError", "at least 1"),
    Case("corpus-ctx", "--ctx longer than the model's context",
         ["scan", "python-docs", *TINY, "--ctx", "5000"], "RangeError",
         "longer than the model's context"),
    Case("collect-select", "collect --select that matches no site",
         ["collect", "python-docs", *TINY, "-s", "blocks.7.*", "-o", "acts"], "SelectError",
         "matches no site"),
    Case("collect-no-output", "collect without -o DIR",
         ["collect", "python-docs", *TINY, "-s", "blocks.0.resid_out"], "UsageError",
         "-o DIR is missing"),
    Case("collect-other-run", "collect into a folder that holds another run",
         ["collect", "python-docs", *TINY, "-s", "blocks.0.resid_out", "-o", "acts"],
         "OutputFileError", "holds another run", files=(_other_run,),
         volatile=(r"'[0-9a-f]{64}'", r"(?<=documents None -> )\d+")),
    Case("collect-strangers", "collect into a folder of files tfx did not write",
         ["collect", "python-docs", *TINY, "-s", "blocks.0.resid_out", "-o", "acts"],
         "OutputFileError", "did not write", files=(_folder("acts"),
                                                    _text("acts/notes.txt", "mine"))),
    Case("top-no-site", "top without --site", ["top", "python-docs", *TINY], "UsageError",
         "--site is missing"),
    Case("top-site", "top --site that names no site with one row per token",
         ["top", "python-docs", *TINY, "--site", "blocks.0.attn.pattern"], "SelectError",
         "matches no site"),
    Case("top-unit", "top --units past the site's width",
         ["top", "python-docs", *TINY, "--site", "blocks.0.ffn.act", "--units", "0,99"],
         "RangeError", "unit 99 is out of range"),
    Case("pairs-not-json", "patch --pairs with a line that is not JSON",
         ["patch", "--pairs", "pairs.jsonl", *TINY], "InputTextError", "line 1",
         files=(_text("pairs.jsonl", "{clean\n"),)),
    Case("pairs-key", "patch --pairs with a line missing a key",
         ["patch", "--pairs", "pairs.jsonl", *TINY], "InputTextError", "no text 'corrupt'",
         files=(_text("pairs.jsonl", '{"clean": "hi", "answer": " a", "wrong": " b"}\n'),)),
    Case("pairs-and-clean", "patch --pairs together with CLEAN",
         ["patch", "hi", "--pairs", "pairs.jsonl", *TINY], "UsageError",
         "does not go with --pairs"),
    # features of sparse autoencoders (--sae)
    Case("features-no-sae", "features without --sae", ["features", SENTENCE, *WORDY],
         "UsageError", "--sae is missing"),
    Case("sae-missing", "--sae of a folder that does not exist",
         ["features", SENTENCE, *WORDY, "--sae", "nosae"], "WeightsError", "no such folder"),
    Case("sae-width", "--sae trained on a wider model (d_in 32, d_model 6)",
         ["features", SENTENCE, *WORDY, "--sae", "wide"], "ConfigError", "32 wide",
         files=(_sae("wide", "blocks.0.hook_resid_post", d_in=32),)),
    Case("sae-site-range", "--sae of a block the model lacks",
         ["features", SENTENCE, *WORDY, "--sae", "deep"], "RangeError",
         "block 4 is out of range", files=(_sae("deep", "blocks.4.hook_resid_post"),)),
    Case("sae-hook-unmapped", "--sae reading a TransformerLens hook tfx does not map",
         ["features", SENTENCE, *WORDY, "--sae", "heads"], "SelectError", "does not map",
         files=(_sae("heads", "blocks.0.attn.hook_result"),)),
    Case("sae-no-site", "--sae of a params.npz whose folder names no site",
         ["features", SENTENCE, *WORDY, "--sae", "plain"], "SelectError", "--sae-site",
         files=(_sae("plain", "", npz=True),)),
    Case("sae-site-not-activation", "--sae-site naming an attention pattern",
         ["features", SENTENCE, *WORDY, "--sae", "sae", "--sae-site", "blocks.0.attn.pattern"],
         "SelectError", "not an activation an SAE reads",
         files=(_sae("sae", "blocks.0.hook_resid_post"),)),
    Case("feature-without-sae", "--ablate features.K without --sae",
         ["next", SENTENCE, *WORDY, "--ablate", "features.3"], "UsageError", "add --sae DIR"),
    Case("sae-without-feature", "--sae on trace without a features.K to edit",
         ["trace", SENTENCE, *WORDY, "--sae", "sae"], "UsageError", "no features.K",
         files=(_sae("sae", "blocks.0.hook_resid_post"),)),
    Case("feature-range", "--ablate features.K past the SAE's width",
         ["next", SENTENCE, *WORDY, "--sae", "sae", "--ablate", "features.8"], "RangeError",
         "the SAE has 8 features", files=(_sae("sae", "blocks.0.hook_resid_post"),)),
    Case("steer-feature-format", "--steer-feature without :INDEX",
         ["generate", "hi", *WORDY, "--steer-feature", "sae"], "UsageError", "DIR:INDEX"),
    # tfx top --sae and tfx train-sae
    Case("top-sae-unit", "top --sae with --units past the SAE's width",
         ["top", "python-docs", *WORDY, "--sae", "sae", "--units", "3,9"], "RangeError",
         "the SAE has 8 features", files=(_sae("sae", "blocks.0.hook_resid_post"),)),
    Case("top-sae-sites", "top --sae with --site and --sae-site naming two sites",
         ["top", "python-docs", *WORDY, "--sae", "sae", "--site", "blocks.0.resid_out",
          "--sae-site", "blocks.0.resid_mid"], "UsageError", "disagree",
         files=(_sae("sae", "blocks.0.hook_resid_post"),)),
    Case("train-sae-missing", "train-sae of a folder that does not exist",
         ["train-sae", "nosuch", "--site", "blocks.0.resid_out", "-o", "sae"],
         "InputTextError", "no such folder"),
    Case("train-sae-not-collect", "train-sae of a folder tfx collect did not write",
         ["train-sae", "plain", "--site", "blocks.0.resid_out", "-o", "sae"],
         "InputTextError", "not a tfx collect folder", files=(_folder("plain"),)),
    Case("train-sae-site", "train-sae --site that the collect folder lacks",
         ["train-sae", "acts", "--site", "blocks.3.resid_out", "-o", "sae"], "SelectError",
         "is not in", files=(_collected,)),
    Case("train-sae-k", "train-sae --k larger than --latents",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--k", "80",
          "--latents", "64"], "RangeError", "between 1 and the 64 latents",
         files=(_collected,)),
    Case("train-sae-latents", "train-sae --latents 0",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--latents", "0"],
         "RangeError", "at least 1", files=(_collected,)),
    Case("train-sae-width-twice", "train-sae with both --latents and --expansion",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--latents", "64",
          "--expansion", "8"], "UsageError", "give one", files=(_collected,)),
    Case("train-sae-l1-k", "train-sae with both --l1 and --k",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--l1", "0.1",
          "--k", "8"], "UsageError", "give one of them", files=(_collected,)),
    Case("train-sae-batch", "train-sae --batch-size above the training tokens",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--batch-size",
          "4096"], "RangeError", "training tokens", files=(_collected,)),
    Case("train-sae-no-output", "train-sae without -o SAE_DIR",
         ["train-sae", "acts", "--site", "blocks.0.resid_out"], "UsageError", "-o SAE_DIR",
         files=(_collected,)),
    Case("train-sae-output-exists", "train-sae -o a folder of other files, without --force",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "mine", "--batch-size",
          "32"], "OutputFileError", "pass --force",
         files=(_collected, _folder("mine"), _text("mine/notes.txt", "mine"))),
    Case("train-sae-other-run", "train-sae -o a folder of another training run",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--batch-size",
          "32"], "OutputFileError", "another training run", files=(_collected, _other_sae_run)),
    Case("patch-features-no-sae", "patch --site features without --sae",
         ["patch", SENTENCE, "--corrupt", "When you play game of you", "--answer", "win",
          "--wrong", "die", "--site", "features", *WORDY], "UsageError", "give --sae DIR"),
    # --engine ray (core/datasets/ray_engine.py)
    Case("ray-missing", "--engine ray without Ray installed",
         ["scan", "python-docs", *TINY, "--engine", "ray"], "MissingPackageError",
         "needs Ray", hide=("ray",),
         shown="tfx scan python-docs -c gpt124m --engine ray  (no ray)"),
    Case("ray-address", "--ray-address where no Ray cluster listens",
         ["scan", "python-docs", *TINY, "--engine", "ray", "--ray-address", "127.0.0.1:1"],
         "UsageError", "no Ray cluster answers"),
    Case("ray-workers", "more --workers than the Ray runtime's CPUs hold",
         ["scan", "python-docs", *TINY, "--engine", "ray", "--workers", "100000"],
         "ResourceError", "could not start",
         volatile=(r"(?<=has )\d+(?= CPUs)", r"(?<=--workers )\d+(?= or fewer)")),
    Case("workers-local", "--workers with the local engine",
         ["scan", "python-docs", *TINY, "--workers", "2"], "UsageError",
         "is an option of --engine ray"),
    Case("engine-single-patch", "--engine ray on a single patch (not --pairs)",
         ["patch", "hi", "--corrupt", "ho", "--answer", " a", "--wrong", " b", *TINY,
          "--engine", "ray"], "UsageError", "applies to patch --pairs"),
    # corpus lines, SAE inputs, GGUF files, config sizes and tokenizers a new user tried
    Case("corpus-jsonl-array", "a JSONL corpus line that is an array, not an object",
         ["scan", "docs.jsonl", *TINY], "InputTextError", "is an array, not an object",
         files=(_text("docs.jsonl", '["hi there"]\n'),)),
    Case("pairs-number", "patch --pairs with an answer that is a number",
         ["patch", "--pairs", "pairs.jsonl", *TINY], "InputTextError",
         "'answer' is a number (3), not text", files=(_text(
             "pairs.jsonl", '{"clean": "hi", "corrupt": "ho", "answer": 3, "wrong": " b"}\n'),)),
    Case("train-sae-file", "train-sae of a corpus file instead of a collect folder",
         ["train-sae", "c1.txt", "--site", "blocks.0.resid_out", "-o", "sae"],
         "InputTextError", "is a file, not a tfx collect folder",
         files=(_text("c1.txt", "hi there\n"),)),
    Case("weights-cut-gguf", "a GGUF file cut short (half of it)",
         ["trace", "hi", "-w", "cut.gguf"], "WeightsError", "cut.gguf is truncated",
         files=(_gguf_cut,)),
    Case("config-layers-huge", "a config file asking for 1e30 layers",
         ["count-params", "--config", "big.json"], "ConfigError", "out of range",
         files=(_text("big.json", json.dumps({
             "name": "big", "vocab_size": 16, "context_length": 8, "d_model": 8,
             "n_heads": 2, "n_layers": 1e30, "d_ff": 16})),)),
    Case("mlm-tokenizer-missing", "fill-mask on modernbert-base's random weights, whose "
         "own tokenizer does not ship",
         ["next", "Paris is the [MASK] of France.", "-c", "modernbert-base", "--layers", "1"],
         "InputTextError", "--tokenizer minilm"),
    # -- hostile input: routing around experts, config files, the Python API's values
    Case("ablate-experts-most", "--ablate routing around 7 of a layer's 8 experts (2 per token)",
         ["route", "hi", *MOE, *[a for e in range(7)
                                 for a in ("--ablate", f"blocks.2.moe.expert:e={e}")]],
         "UsageError", "at most 6 of a layer's experts",
         shown="tfx route hi -c tiny-moe --ablate blocks.2.moe.expert:e=0 … "
               "--ablate blocks.2.moe.expert:e=6"),
    Case("ablate-experts-all", "--ablate routing around every expert of a layer",
         ["route", "hi", *MOE, *[a for e in range(8)
                                 for a in ("--ablate", f"blocks.2.moe.expert:e={e}")]],
         "UsageError", "all 8 experts of block 2",
         shown="tfx route hi -c tiny-moe --ablate blocks.2.moe.expert:e=0 … "
               "--ablate blocks.2.moe.expert:e=7"),
    Case("hf-config-experts-zero", "a config.json with num_local_experts 0",
         ["count-params", "--config", "moe.json"], "ConfigError",
         "config key num_local_experts must be a whole number of at least 1",
         files=(_hf_config("moe.json", num_local_experts=0),)),
    Case("hf-config-heads-zero", "a config.json with num_attention_heads 0",
         ["count-params", "--config", "moe.json"], "ConfigError",
         "config key num_attention_heads must be a whole number of at least 1",
         files=(_hf_config("moe.json", num_attention_heads=0),)),
    Case("hf-config-rope-string", "a config.json whose rope_scaling is a string",
         ["count-params", "--config", "moe.json"], "ConfigError",
         "config key rope_scaling must be an object",
         files=(_hf_config("moe.json", rope_scaling="linear"),)),
    Case("hf-config-width-infinite", "a config.json with hidden_size Infinity",
         ["count-params", "--config", "moe.json"], "ConfigError",
         "config key hidden_size must be a whole number of at least 1, got Infinity",
         files=(_hf_config("moe.json", hidden_size=float("inf")),)),
    Case("hf-config-width-missing", "a config.json without hidden_size",
         ["count-params", "--config", "moe.json"], "ConfigError",
         "config key hidden_size is missing", files=(_hf_config("moe.json", hidden_size=None),)),
    Case("config-nested", "a config file of 100,000 nested [",
         ["count-params", "--config", "deep.json"], "ConfigError", "nested too deeply",
         files=(_text("deep.json", "[" * 100_000),)),
    Case("config-nested-run", "a -c config file of 100,000 nested [",
         ["next", "hi", "-c", "deep.json"], "ConfigError", "nested too deeply",
         files=(_text("deep.json", "[" * 100_000),)),
    Case("top-units-fraction", "top --units with a unit that is not whole (api.top refuses "
         "units=[1.5] alike)",
         ["top", "python-docs", *TINY, "--site", "blocks.0.ffn.act", "--units", "1.5"],
         "RangeError", "is not a unit index"),
    # output folders held by a run, damaged shards, SAEs with NaN, steering past float32
    Case("output-held", "collect into a folder another tfx run is writing",
         ["collect", "python-docs", *TINY, "-s", "blocks.0.resid_out", "-o", "acts",
          "--force"], "OutputFileError", "is being written by another tfx run",
         files=(_held("acts"),)),
    Case("shard-nan", "train-sae on a collect folder whose shard holds NaN",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--batch-size",
          "32"], "InputTextError", "holds nan in blocks.0.resid_out",
         files=(_shard_poisoned(True),)),
    Case("shard-changed", "train-sae on a collect folder whose shard changed since collect",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--batch-size",
          "32"], "InputTextError", "sha256 differs", files=(_shard_poisoned(False),)),
    Case("sae-nan", "--sae whose W_enc holds a NaN",
         ["features", SENTENCE, *WORDY, "--sae", "sae"], "WeightsError",
         "holds nan in W_enc[3, 5]",
         files=(_sae_damaged("sae", "W_enc", (3, 5), float("nan")),)),
    Case("sae-inf-ablate", "--ablate features.K of an SAE whose W_dec holds inf",
         ["next", SENTENCE, *WORDY, "--sae", "sae", "--ablate", "features.3"], "WeightsError",
         "holds inf in W_dec[2, 1]",
         files=(_sae_damaged("sae", "W_dec", (2, 1), float("inf")),)),
    Case("steer-feature-scale", "--steer-feature with --scale 1e30 (the final norm overflows)",
         ["trace", SENTENCE, *WORDY, "--select", "ln_f.*", "--steer-feature", "sae:3",
          "--scale", "1e30"], "NonFiniteError", "use a smaller --scale",
         files=(_sae("sae", "blocks.0.hook_resid_post"),)),
    # hostile values for the corpus and SAE commands (found by tests/cli/test_fuzz_corpus.py)
    Case("train-sae-lr-inf", "train-sae --lr inf",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--lr", "inf",
          "--batch-size", "32"], "UsageError", "must be a finite number", files=(_collected,)),
    Case("train-sae-diverged", "train-sae with a learning rate that makes it diverge",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--lr", "1e30",
          "--batch-size", "32", "--steps", "3", "--latents", "64"], "NonFiniteError",
         "lower --lr", files=(_collected,)),
    Case("train-sae-steps-huge", "train-sae --steps 10**30",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--steps",
          str(10**30), "--batch-size", "32"], "RangeError", "give fewer steps",
         files=(_collected,)),
    Case("train-sae-latents-huge", "train-sae --expansion 1e30",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--expansion",
          "1e30", "--batch-size", "32"], "RangeError", "give a smaller one",
         files=(_collected,)),
    Case("top-k-huge", "top -k 10**30",
         ["top", "python-docs", *TINY, "--site", "blocks.0.ffn.act", "-k", str(10**30),
          "--max-docs", "2"], "UsageError", "examples per unit"),
    Case("top-around-huge", "top --around past the model's context",
         ["top", "python-docs", *TINY, "--site", "blocks.0.ffn.act", "--around", "100000",
          "--max-docs", "2"], "UsageError", "no window holds more"),
    Case("collect-shard-huge", "collect --shard-tokens 10**30",
         ["collect", "python-docs", *TINY, "-s", "blocks.0.resid_out", "-o", "acts",
          "--shard-tokens", str(10**30), "--max-docs", "2"], "UsageError", "between 1 and"),
    # output folders
    Case("train-sae-manifest-list", "train-sae of a folder whose manifest.json is a JSON list",
         ["train-sae", "plain", "--site", "blocks.0.resid_out", "-o", "sae"],
         "InputTextError", "not a tfx collect folder",
         files=(_folder("plain"), _text("plain/manifest.json", "[1, 2]\n"))),
    Case("collect-manifest-cut", "collect into a folder whose manifest.json is cut short",
         ["collect", "python-docs", *TINY, "-s", "blocks.0.resid_out", "-o", "acts"],
         "OutputFileError", "holds files tfx did not write (manifest.json)",
         files=(_folder("acts"), _text("acts/manifest.json", '{"schema": "tfx/1", "ki'),
                _text("acts/shard-00000.safetensors", "rows")),
         keep={"acts/shard-00000.safetensors": "rows",
               "acts/manifest.json": '{"schema": "tfx/1", "ki'}),
    # attribution graphs (tfx graph)
    Case("graph-transcoders-width", "graph --transcoders of another width",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "the model's d_model is 6", files=(_transcoders("tc", d_model=8),)),
    Case("graph-transcoders-layers", "graph --transcoders for another layer count",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "has 2 layers but the model has 1", files=(_transcoders("tc", layers=2),)),
    Case("graph-transcoders-missing", "graph --transcoders with a layer file missing",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "is missing", files=(_transcoders("tc", missing=True),)),
    Case("graph-transcoders-nan", "graph --transcoders with NaN weights",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "NaN or infinite", files=(_transcoders("tc", nan=True),)),
    Case("graph-transcoders-hook", "graph --transcoders reading an unmapped hook",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "does not map", files=(_transcoders("tc", hook="attn.hook_z"),)),
    Case("graph-transcoders-no-config", "graph --transcoders of a folder with no config.yaml",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "has no config.yaml", files=(_folder("tc"),)),
    Case("graph-node-threshold", "graph --node-threshold 1.5",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--node-threshold", "1.5"],
         "UsageError", "must be in (0, 1]", files=(_transcoders("tc"),)),
    Case("graph-edge-threshold", "graph --edge-threshold 0",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--edge-threshold", "0"],
         "UsageError", "must be in (0, 1]", files=(_transcoders("tc"),)),
    Case("graph-labels-not-top", "graph --labels naming a folder tfx top did not write",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--labels", "tc"], "UsageError",
         "no readable result.json", files=(_transcoders("tc"),)),
    Case("set-feature-no-transcoders", "next --set-feature without --transcoders",
         ["next", SENTENCE, *WORDY, "--set-feature", "0:1:2=0"], "UsageError",
         "needs --transcoders"),
    Case("set-feature-out-of-range", "next --set-feature naming a feature past the width",
         ["next", SENTENCE, *WORDY, "--transcoders", "tc", "--set-feature", "0:1:99=0"],
         "RangeError", "feature 99 is out of range", files=(_transcoders("tc"),)),
    Case("set-feature-malformed", "generate --set-feature that is not LAYER:POS:FEATURE=VALUE",
         ["generate", SENTENCE, *WORDY, "--transcoders", "tc", "--set-feature", "0:1=2"],
         "UsageError", "is not LAYER:POS:FEATURE=VALUE", files=(_transcoders("tc"),)),
    Case("constrained-layers-outside", "next --constrained-layers past the model's layers",
         ["next", SENTENCE, *WORDY, "--transcoders", "tc", "--set-feature", "0:1:2=0",
          "--constrained-layers", "0:5"], "UsageError", "not a range of this model's",
         files=(_transcoders("tc"),)),
    Case("graph-encoder-decoder", "graph on an encoder–decoder",
         ["graph", SENTENCE, *TOY, "--transcoders", "tc"], "UsageError",
         "is an encoder–decoder", files=(_transcoders("tc"),)),
    Case("graph-streamed", "graph on a model streamed from disk (--max-memory below it)",
         ["graph", "hi", "-w", "llama-zeros", "--max-memory", "300kB", "--transcoders", "tc"],
         "UsageError", "is streamed from disk",
         files=(_llama_zeros, _transcoders("tc", layers=2, d_model=64))),
    Case("set-feature-inactive", "next --set-feature at position 0, where no feature is active",
         ["next", SENTENCE, *WORDY, "--transcoders", "tc", "--set-feature", "0:0:2=1"],
         "UsageError", "position 0 holds no features", files=(_transcoders("tc"),)),
    Case("set-feature-huge", "next --set-feature with a value beyond float32",
         ["next", SENTENCE, *WORDY, "--transcoders", "tc", "--set-feature", "0:1:2=1e39"],
         "RangeError", "beyond what float32 holds", files=(_transcoders("tc"),)),
    Case("set-feature-twice", "next --set-feature naming one feature twice (each copy would "
         "add its change)", ["next", SENTENCE, *WORDY, "--transcoders", "tc", "--set-feature",
                             "0:1:2=0", "--set-feature", "0:1:2=0"], "UsageError",
         "--set-feature 0:1:2=0 sets feature 2 of layer 0 at position 1 again",
         files=(_transcoders("tc"),)),
    Case("set-feature-dropped", "next --set-feature on a layer --constrained-layers leaves out",
         ["next", SENTENCE, *WORDY[:3], "2", *WORDY[4:], "--transcoders", "tc",
          "--set-feature", "0:1:2=0", "--constrained-layers", "1:2"], "UsageError",
         "outside --constrained-layers 1:2, which drops it",
         files=(_transcoders("tc", layers=2),)),
    Case("graph-json-exists", "graph -o onto a file that exists, without --force",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "-o", "g.json"],
         "OutputFileError", "pass --force", files=(_transcoders("tc"), _text("g.json", "mine")),
         keep={"g.json": "mine"}),
    Case("graph-html-exists", "graph --html onto a file that exists, without --force",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--html", "g.html"],
         "OutputFileError", "pass --force", files=(_transcoders("tc"), _text("g.html", "mine")),
         keep={"g.html": "mine"}),
    # two outputs naming one file, --save onto a folder or into a missing one: refused
    # before the graph is made, so nothing is written
    Case("graph-outputs-one-file", "graph -o and --html naming one file",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "-o", "g.json", "--html",
          "g.json"], "OutputFileError", "both name g.json", files=(_transcoders("tc"),)),
    Case("graph-outputs-one-file-force", "graph -o and --html naming one existing file, "
         "with --force", ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "-o", "g.json",
                          "--html", "./g.json", "--force"], "OutputFileError",
         "both name g.json", files=(_transcoders("tc"), _text("g.json", "mine")),
         keep={"g.json": "mine"}),
    Case("graph-save-folder", "graph --save naming a folder, with --force",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--save", "adir", "--force"],
         "OutputFileError", "--save adir is a folder", files=(_transcoders("tc"),
                                                              _folder("adir"))),
    Case("graph-save-no-folder", "graph --save into a folder that does not exist",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--save", "no/g.safetensors"],
         "OutputFileError", "the folder no does not exist", files=(_transcoders("tc"),)),
    Case("graph-target-twice", "graph --target naming one token twice",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--target", " game", "--target",
          " game"], "UsageError", "twice; give each logit target once",
         files=(_transcoders("tc"),)),
    Case("graph-transcoders-overflow", "graph --transcoders whose finite W_dec overflows "
         "float32", ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "NonFiniteError",
         "(W_dec): check the set", files=(_transcoders("tc", huge=True),)),
    Case("graph-logit-prob-nan", "graph --logit-prob nan",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--logit-prob", "nan"],
         "UsageError", "must be a finite number", files=(_transcoders("tc"),)),
    # eval-sae and train-transcoder
    Case("eval-sae-no-sae", "eval-sae without --sae",
         ["eval-sae", "python-docs", *WORDY], "UsageError", "--sae is missing"),
    Case("eval-sae-masked-lm", "eval-sae on a masked language model",
         ["eval-sae", "python-docs", *MLM, "--sae", "sae", "--max-docs", "1"], "ConfigError",
         "not the token after the text", files=(_sae("sae", "blocks.0.hook_resid_post", 8),)),
    Case("train-transcoder-no-output", "train-transcoder on a collect folder without the "
         "MLP's output", ["train-transcoder", "acts", "--layer", "0", "-o", "tc"],
         "SelectError", "has no blocks.0.ffn.out", files=(_mlp_input_only,)),
    Case("train-transcoder-layer-range", "train-transcoder --layer past the model's layers",
         ["train-transcoder", "acts", "--layer", "5", "-o", "tc"], "RangeError",
         "has 2 layers", files=(_mlp_input_only,)),
    Case("train-transcoder-no-layer", "train-transcoder without --layer",
         ["train-transcoder", "acts", "-o", "tc"], "UsageError", "--layer is missing",
         files=(_mlp_input_only,)),
    Case("train-transcoder-layer-word", "train-transcoder --layer that is not a number",
         ["train-transcoder", "acts", "--layer", "last", "-o", "tc"], "UsageError",
         "not a layer number", files=(_mlp_input_only,)),
    Case("train-transcoder-input-site", "train-transcoder --input-site tfx does not train on",
         ["train-transcoder", "acts", "--layer", "0", "-o", "tc", "--input-site", "ffn.act"],
         "UsageError", "the MLP's input", files=(_mlp_input_only,)),
    # graph --open: a saved graph.json shown again
    Case("graph-open-missing", "graph --open naming a file that does not exist",
         ["graph", "--open", "g.json"], "InputTextError", "does not exist"),
    Case("graph-open-not-json", "graph --open of a file that is not JSON",
         ["graph", "--open", "g.json"], "InputTextError", "not JSON",
         files=(_text("g.json", "nodes: 3\n"),), keep={"g.json": "nodes: 3\n"}),
    Case("graph-open-not-graph", "graph --open of JSON that is not a graph (no nodes, links)",
         ["graph", "--open", "g.json"], "InputTextError", "not a graph",
         files=(_text("g.json", '{"nodes": 3}'),)),
    Case("graph-open-dangling-link", "graph --open of a graph whose link names a missing node",
         ["graph", "--open", "g.json"], "InputTextError", "is not one of the file's nodes",
         files=(_graph_file("g.json", [{"source": "E_5_0", "target": "3_7_1", "weight": 1},
                                       {"source": "0_3_1", "target": "3_7_1", "weight": 2}]),)),
    Case("graph-open-text", "graph --open with a TEXT too",
         ["graph", "hello", "--open", "g.json"], "UsageError", "takes no TEXT",
         files=(_graph_file("g.json", []),)),
    Case("graph-open-transcoders", "graph --open with --transcoders",
         ["graph", "--open", "g.json", "--transcoders", "tc"], "UsageError",
         "--transcoders does not apply", files=(_graph_file("g.json", []),)),
    Case("graph-open-threshold", "graph --open with a pruning threshold (the file is pruned)",
         ["graph", "--open", "g.json", "--node-threshold", "0.5"], "UsageError",
         "--node-threshold does not apply", files=(_graph_file("g.json", []),)),
    Case("graph-open-deep", "graph --open of JSON nested 100,000 deep",
         ["graph", "--open", "g.json"], "InputTextError", "nested deeper than any graph",
         files=(_text("g.json", "[" * 100_000 + "]" * 100_000),)),
    Case("graph-open-weight-digits", "graph --open of a link weight of 401 digits",
         ["graph", "--open", "g.json"], "InputTextError", "(401 characters), not a finite",
         files=(_graph_weight("g.json", "1" + "0" * 400),)),
    Case("graph-open-weight-float32", "graph --open of a link weight past float32 (1e39)",
         ["graph", "--open", "g.json"], "InputTextError", "within float32's range",
         files=(_graph_weight("g.json", "1e39"),)),
    Case("graph-open-not-saved-graph", "graph --open of a safetensors file that is no graph",
         ["graph", "--open", "tc/layer_0.safetensors"], "InputTextError",
         "not a graph (its header has no tfx_graph metadata)", files=(_transcoders("tc"),)),
    Case("graph-open-saved-cut", "graph --open of a --save file cut short",
         ["graph", "--open", "g.safetensors"], "InputTextError",
         "not a whole safetensors file", files=(_saved_graph("g.safetensors", cut=16),)),
    # eval-sae --transcoders (a whole transcoder set judged) and the trainers' CE-loss score
    Case("eval-sae-sae-and-transcoders", "eval-sae with both --sae and --transcoders",
         ["eval-sae", "python-docs", *WORDY, "--sae", "sae", "--transcoders", "tc"],
         "UsageError", "give one", files=(_transcoders("tc"),)),
    Case("eval-sae-transcoders-width", "eval-sae --transcoders with a set of another width",
         ["eval-sae", "python-docs", *WORDY, "--transcoders", "tc", "--max-docs", "1"],
         "TranscoderError", "the model's d_model is 6", files=(_transcoders("tc", d_model=8),)),
    Case("eval-sae-transcoders-layers", "eval-sae --transcoders with a set of another layer "
         "count", ["eval-sae", "python-docs", *WORDY, "--transcoders", "tc", "--max-docs", "1"],
         "TranscoderError", "has 2 layers but the model has 1",
         files=(_transcoders("tc", layers=2),)),
    Case("eval-sae-transcoders-sae-site", "eval-sae --transcoders with --sae-site",
         ["eval-sae", "python-docs", *WORDY, "--transcoders", "tc", "--sae-site",
          "blocks.0.resid_mid"], "UsageError", "drop --sae-site", files=(_transcoders("tc"),)),
    Case("eval-sae-transcoders-streamed", "eval-sae --transcoders on a model streamed from "
         "disk", ["eval-sae", "python-docs", "-w", "llama-zeros", "--max-memory", "300kB",
                  "--transcoders", "tc", "--max-docs", "1"], "UsageError",
         "is streamed from disk", files=(_llama_zeros, _transcoders("tc", layers=2, d_model=64))),
    Case("eval-sae-transcoders-encoder-decoder", "eval-sae --transcoders on an "
         "encoder–decoder", ["eval-sae", "python-docs", *TOY, "--transcoders", "tc",
                             "--max-docs", "1"], "UsageError", "is not a causal language model",
         files=(_transcoders("tc"),)),
    # transcoder sets: their files, their folder and what reads them (each refused by name)
    Case("graph-transcoders-truncated", "graph --transcoders with a layer file cut short",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "truncated or corrupted safetensors file",
         files=(_transcoders("tc"), _transcoder_file("tc", "layer_0.safetensors",
                                                     lambda b: b[:len(b) // 2]))),
    Case("graph-transcoders-empty-file", "graph --transcoders with an empty layer file",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "truncated or corrupted safetensors file",
         files=(_transcoders("tc"), _transcoder_file("tc", "layer_0.safetensors",
                                                     lambda b: b""))),
    Case("graph-transcoders-garbled-header", "graph --transcoders with a layer file whose "
         "header is garbled", ["graph", SENTENCE, *WORDY, "--transcoders", "tc"],
         "TranscoderError", "truncated or corrupted safetensors file",
         files=(_transcoders("tc"), _transcoder_file(
             "tc", "layer_0.safetensors", lambda b: b[:8] + b"{garbled" + b[16:]))),
    Case("graph-transcoders-threshold-shape", "graph --transcoders with a threshold of the "
         "wrong shape", ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "threshold is (3,), not (4,)",
         files=(_transcoders("tc"), _transcoder_file("tc", "layer_0.safetensors", {
             "activation_function.threshold": __import__("torch").zeros(3)}))),
    Case("graph-transcoders-scalar-w-enc", "graph --transcoders with a scalar W_enc",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc"], "TranscoderError",
         "shapes do not fit", files=(_transcoders("tc"), _transcoder_file(
             "tc", "layer_0.safetensors", {"W_enc": __import__("torch").tensor(1.0)}))),
    Case("graph-transcoders-config-line", "graph --transcoders whose config.yaml has a list "
         "item under a key that holds a value", ["graph", SENTENCE, *WORDY, "--transcoders",
                                                  "tc"], "TranscoderError",
         "ln2.hook_normalized - oops is a hook tfx does not map",
         files=(_transcoders("tc"), lambda d: (d / "tc" / "config.yaml").write_text(
             (d / "tc" / "config.yaml").read_text().replace(
                 "ln2.hook_normalized\n", "ln2.hook_normalized\n  - oops\n")))),
    Case("graph-transcoders-python-tag", "graph --transcoders whose config.yaml asks to run "
         "Python (never run)", ["graph", SENTENCE, *WORDY, "--transcoders", "tc"],
         "TranscoderError", "could not determine a constructor",
         files=(_transcoders("tc"), lambda d: (d / "tc" / "config.yaml").write_text(
             (d / "tc" / "config.yaml").read_text()
             + "scan: !!python/object/apply:os.system ['touch pwned.txt']\n"))),
    Case("graph-labels-site-units", "graph --labels of a tfx top folder of a site's own "
         "units (no --sae)", ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--labels",
                              "top"], "UsageError", "not of layer 0's transcoder features",
         files=(_transcoders("tc"), _top_folder("top"))),
    Case("graph-labels-other-sae", "graph --labels of the top features of another SAE",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--labels", "top"], "UsageError",
         "which is not layer 0's transcoder",
         files=(_transcoders("tc"), _top_folder("top", sae="other/layer_0.safetensors",
                                                sha="0" * 64))),
    Case("top-sae-stray-file", "top --sae naming a weights file that is no set's layer, in "
         "a folder that holds no SAE", ["top", "python-docs", *WORDY, "--sae",
                                       "tc/layer_0.safetensors", "--max-docs", "1"],
         "WeightsError", "--sae tc/layer_0.safetensors is a file that is no SAE",
         files=(_transcoders("tc"), lambda d: (d / "tc" / "config.yaml").unlink())),
    Case("eval-sae-transcoders-changed", "eval-sae -o DIR resumed after the set's files "
         "changed at the same path", ["eval-sae", "python-docs", *WORDY, "--transcoders", "tc",
                                      "--max-docs", "1", "--max-tokens", "20", "-o", "ev"],
         "OutputFileError", "holds another run (options: transcoders_sha256",
         files=(_transcoders("tc"), _eval_run("transcoders", "tc")),
         volatile=(r"[0-9a-f]{64}",)),
    Case("eval-sae-sae-changed", "eval-sae -o DIR resumed after the SAE's files changed at "
         "the same path", ["eval-sae", "python-docs", *WORDY, "--sae", "sae", "--max-docs", "1",
                           "--max-tokens", "20", "-o", "ev"],
         "OutputFileError", "holds another run (options: sae_sha256",
         files=(_sae("sae", "blocks.0.hook_resid_post", 6), _eval_run("sae", "sae")),
         volatile=(r"[0-9a-f]{64}",)),
    Case("train-transcoder-foreign-set", "train-transcoder into another tool's transcoder "
         "set (circuit-tracer's own files), without --force",
         ["train-transcoder", "acts", "--layer", "0", "-o", "tc", "--l1", "1e-3",
          "--batch-size", "16"], "OutputFileError",
         "holds files tfx train-transcoder did not write",
         files=(_pairs(), _transcoders("tc", layers=2, d_model=8))),
    Case("train-transcoder-held", "train-transcoder into a folder another run is writing",
         ["train-transcoder", "acts", "--layer", "1", "-o", "tc", "--l1", "1e-3",
          "--batch-size", "16"], "OutputFileError", "is being written by another tfx run",
         files=(_pairs(), _held("tc"))),
    Case("train-transcoder-other-run", "train-transcoder of one layer into a folder holding "
         "another layer's unfinished run with other options",
         ["train-transcoder", "acts", "--layer", "1", "-o", "tc", "--l1", "1e-3",
          "--latents", "32", "--batch-size", "16"], "UsageError",
         "holds layer 0's unfinished run",
         files=(_pairs(), _run_in_progress("tc", 0, 48))),
    Case("train-transcoder-other-width", "train-transcoder of one layer into a set whose "
         "other layer has another width (nothing is left behind)",
         ["train-transcoder", "acts", "--layer", "0", "-o", "tc", "--l1", "1e-3",
          "--latents", "32", "--batch-size", "16"], "UsageError",
         "another set than this run's",
         files=(_pairs(), _tfx_layer("tc", 1, 48))),
    Case("train-transcoder-diverged", "train-transcoder whose training diverges (a huge --lr)",
         ["train-transcoder", "acts", "--layer", "0", "-o", "tc", "--l1", "1e-3",
          "--latents", "16", "--batch-size", "16", "--steps", "40", "--lr", "1e9"],
         "RangeError", "train with a lower --lr (now 1e+09)", files=(_pairs(),)),
    Case("train-transcoder-tokens-damaged", "train-transcoder on a collect folder whose "
         "tokens.parquet changed since (found before training)",
         ["train-transcoder", "acts", "--layers", "all", "-o", "tc", "--l1", "1e-3",
          "--latents", "16", "--batch-size", "16", "--steps", "5"], "InputTextError",
         "tokens.parquet is not the file tfx collect wrote",
         files=(_collected_tokens_damaged,)),
    Case("train-sae-score-no-tokens", "train-sae --score-tokens on a collect folder without "
         "its tokens table", ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae",
                              "--score-tokens", "100"], "UsageError", "has no tokens.parquet",
         files=(_collected,)),
    Case("train-sae-score-negative", "train-sae --score-tokens below 0",
         ["train-sae", "acts", "--site", "blocks.0.resid_out", "-o", "sae", "--score-tokens",
          "-1"], "UsageError", "-1", files=(lambda d: hand_collected(d / "acts"),)),
    # next/generate --transcoders run the graph's ids: the model must be one tfx graph runs
    Case("next-transcoders-encoder-decoder", "next --transcoders (no --set-feature) on an "
         "encoder–decoder", ["next", SENTENCE, *TOY, "--transcoders", "tc"], "UsageError",
         "--transcoders needs a pre-norm decoder-only model", files=(_transcoders("tc"),)),
    Case("graph-token-first-past-context", "graph on a text that fills the context, with no "
         "room for the special token put first", ["graph", SENTENCE, *WORDY, "--context", "6",
                                                   "--transcoders", "tc"], "InputTextError",
         "7 with the", files=(_transcoders("tc"),)),
    # the trainers' score and warnings; graph and next options refused before any work
    Case("graph-max-links-negative", "graph --max-links below 0",
         ["graph", SENTENCE, *WORDY, "--transcoders", "tc", "--max-links", "-1"],
         "UsageError", "not in the range x>=0", files=(_transcoders("tc"),)),
    Case("allow-inactive-alone", "next --allow-inactive without --set-feature",
         ["next", SENTENCE, *WORDY, "--allow-inactive"], "UsageError",
         "go with --set-feature LAYER:POS:FEATURE=VALUE; add one, or drop them"),
    # a value within float32 that still overflows what the feature writes names the value
    Case("set-feature-overflow", "next --set-feature with a value whose decoder row overflows",
         ["next", SENTENCE, *WORDY, "--transcoders", "tc", "--allow-inactive",
          "--set-feature", "0:1:2=3e38"], "NonFiniteError",
         "set a smaller value with --set-feature (now 0:1:2=3e+38)", files=(_transcoders("tc"),)),
    Case("graph-text-past-context", "graph on a text longer than the context: --truncate "
         "keeps one token fewer, for the one put first",
         ["graph", SENTENCE + " again and again", *WORDY, "--context", "6", "--transcoders",
          "tc"], "InputTextError", "10 with the <start> put first, but the context length "
         "is 6; shorten it or pass --truncate to keep the last 5 tokens",
         files=(_transcoders("tc"),)),
]

# Rows that need a real process (a closed pipe, a signal): checked in test_pipes.py,
# by the test named here.
PROCESS_ROWS = {
    "stdout-closed": "test_closed_stdout_exits_quietly",
    "ctrl-c-generate": "test_ctrl_c_during_generate",
    "ctrl-c-report": "test_ctrl_c_during_report_leaves_no_file",
}


# -- running a case ---------------------------------------------------------------------
@contextmanager
def _in(folder: Path):
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.is_dir(), p.stat().st_size)
            for p in sorted(folder.rglob("*"))}


@contextmanager
def _hidden(names):
    """Make modules unimportable (None in sys.modules), touching no other entry: the
    run imports torch, which must stay imported afterwards."""
    saved = {name: sys.modules.get(name) for name in names}
    sys.modules.update({name: None for name in names})
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@dataclass
class Outcome:
    exit_code: int
    stdout: str
    stderr: str
    raised: str  # the class that reached cli._fail
    before: dict
    after: dict


def run_case(case: Case, folder: Path) -> Outcome:
    """Make the case's files in `folder`, run it there, and report what happened."""
    seen = []
    real_fail = cli._fail

    def spy(message, code):
        exc = sys.exc_info()[1]
        if isinstance(exc, errors.TfxError):
            seen.append(type(exc).__name__)
        elif isinstance(exc, CLICK_ERROR):
            seen.append("UsageError")
        else:
            seen.append(type(exc).__name__ if exc else "?")
        return real_fail(message, code)

    with _in(folder):
        for make in case.files:
            make(folder)
        before = _snapshot(folder)
        with mock.patch.object(cli, "_fail", spy), _hidden(case.hide):
            result = CliRunner().invoke(app, case.args, input=case.stdin,
                                        env={"TFX_QUIET": "1", "COLUMNS": "100"})
        after = _snapshot(folder)
    return Outcome(result.exit_code, result.stdout, result.stderr,
                   seen[0] if seen else "", before, after)


def normalise(message: str, case: Case) -> str:
    for rx in case.volatile:
        message = re.sub(rx, ELLIPSIS, message)
    return message


COMPUTED_REL = 1e-4  # %.6g prints 1e-5 of a value; another CPU's rounding moves less


def same_message(got: str, shown: str, case: Case) -> bool:
    """`got` (normalised) says what the table's `shown` says: the same text, and each number
    a forward pass computed (case.computed) within COMPUTED_REL of the table's, since its
    last printed digit may round the other way on another CPU."""
    if not case.computed:
        return got == shown
    pattern = "|".join(f"(?:{rx})" for rx in case.computed)
    got_numbers, shown_numbers = re.findall(pattern, got), re.findall(pattern, shown)
    if re.sub(pattern, ELLIPSIS, got) != re.sub(pattern, ELLIPSIS, shown) or \
            len(got_numbers) != len(shown_numbers) or not got_numbers:
        return False
    try:
        pairs = [(float(g), float(s)) for g, s in zip(got_numbers, shown_numbers)]
    except ValueError:
        return False
    return all(abs(g - s) <= COMPUTED_REL * abs(s) for g, s in pairs)


# -- the errors page's table---------------------------------------------------------------
def shown_command(case: Case) -> str:
    if case.shown:
        return case.shown
    words = []
    for arg in case.args:
        if arg == "" or re.search(r"[\s\"'$*|;&<>()]", arg):
            words.append('"' + arg + '"')
        else:
            words.append(arg)
    return "tfx " + " ".join(words)


def code_span(text: str) -> str:
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def uncode_span(cell: str) -> str:
    cell = cell.strip()
    if cell.startswith("`` ") and cell.endswith(" ``"):
        cell = cell[3:-3]
    elif cell.startswith("`") and cell.endswith("`"):
        cell = cell[1:-1]
    return cell.replace("\\|", "|")


def table_row(case: Case, message: str) -> str:
    return (f"| {case.id} | {case.what} | {code_span(shown_command(case))} | {case.exit} | "
            f"{case.error} | {code_span(message)} |")


def readme_rows() -> dict:
    """id -> (exit code, message) for every row of the errors page's bad-input table."""
    text = ERRORS_PAGE.read_text(encoding="utf-8")
    section = text.split("## What tfx does with bad input", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| id ") or line.startswith("|--"):
            continue
        cells = re.split(r"(?<!\\)\|", line)[1:-1]
        rows[cells[0].strip()] = (int(cells[3]), uncode_span(cells[5]))
    return rows


def generate_table(scratch: Path) -> str:
    """The errors page's table, from real runs (each case in its own sub-folder)."""
    lines = ["| id | input | command | exit | error | stderr |",
             "|---|---|---|---|---|---|"]
    for i, case in enumerate(CASES):
        folder = scratch / f"{i:02d}"
        folder.mkdir()
        out = run_case(case, folder)
        lines.append(table_row(case, normalise(out.stderr.strip(), case)))
    return "\n".join(lines)


# -- the tests --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def readme():
    return readme_rows()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, tmp_path, readme):
    out = run_case(case, tmp_path)
    assert out.exit_code == case.exit, (out.stdout, out.stderr)
    assert out.stdout == ""  # nothing on stdout, not even half a document
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error: "), out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    assert case.expect in lines[0]
    assert out.raised == case.error
    assert out.after == out.before  # no output file, no temporary file, no marker
    for name, content in case.keep.items():
        assert (tmp_path / name).read_text() == content  # never overwritten
    assert case.id in readme, f"docs/errors.md lacks row {case.id}; regenerate the table"
    assert readme[case.id][0] == case.exit
    assert same_message(normalise(lines[0], case), readme[case.id][1], case), \
        "docs/errors.md's message differs from a real run; regenerate the table"


def test_errors_page_table_matches_the_cases(readme):
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert set(readme) == set(ids) | set(PROCESS_ROWS)
    assert len(readme) >= 30


def test_where_a_run_diverges_is_checked_by_form(readme):
    """nan-train-lr's table row holds the fix and … for the step and the site: the
    messages two CPUs gave both match it; one that names no step, no site, or another
    fix does not."""
    case = next(c for c in CASES if c.id == "nan-train-lr")
    row = readme[case.id][1]
    assert row.count(ELLIPSIS) == 3 and "lower --lr (now 1e+06)" in row
    tail = (" in this float32 run, so every number after it would be meaningless; "
            "lower --lr (now 1e+06), e.g. --lr 0.01")
    for where in ("at step 3 of 60: encoder.embed.tok became NaN",
                  "at step 4 of 60: encoder.blocks.0.ln1.var became inf",
                  "at step 12 of 60: the loss became nan",
                  "at step 60 of 60: the weight encoder.blocks.0.ffn.w1 became not finite"):
        assert normalise(f"tfx: error: training diverged {where}{tail}", case) == row, where
    for where in ("at step 3 of 60: became NaN",  # no site
                  "at step 3 of 60: something became NaN",  # not a site's name
                  "of 60: encoder.embed.tok became NaN",  # no step
                  "at step 0 of 60: encoder.embed.tok became NaN",  # no such step
                  "at step 3 of 60: encoder.embed.tok became odd"):  # not what went wrong
        assert normalise(f"tfx: error: training diverged {where}{tail}", case) != row, where
    wrong_fix = tail.replace("lower --lr", "raise --lr")
    assert normalise("tfx: error: training diverged at step 3 of 60: encoder.embed.tok "
                     f"became NaN{wrong_fix}", case) != row


def test_computed_numbers_in_messages_compare_within_rounding():
    case = next(c for c in CASES if c.id == "patch-no-difference")
    shown = ("tfx: error: CLEAN and CORRUPT give the same logit difference (1.17596), so "
             "the effect is undefined")
    assert same_message(shown, shown, case)
    assert same_message(shown.replace("1.17596", "1.17597"), shown, case)  # last digit
    assert not same_message(shown.replace("1.17596", "1.1772"), shown, case)
    assert not same_message(shown.replace("1.17596", "nan"), shown, case)
    assert not same_message(shown.replace("(1.17596)", "()"), shown, case)
    assert not same_message(shown.replace("undefined", "fine"), shown, case)
    plain = next(c for c in CASES if c.id == "nan-steer-scale")
    assert not same_message(shown.replace("1.17596", "1.17597"), shown, plain)  # exact


def test_errors_page_lists_the_catalogue():
    """docs/errors.md "Errors" lists every class in errors.py with its exit code, and the example
    rows it points to raise that class."""
    text = ERRORS_PAGE.read_text(encoding="utf-8")
    section = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (int(cells[1]), cells[3])
    assert set(rows) == {cls.__name__ for cls in errors.ALL_ERRORS}
    by_id = {c.id: c for c in CASES}
    for cls in errors.ALL_ERRORS:
        code, examples = rows[cls.__name__]
        assert code == cls.exit_code, cls
        for example in filter(None, (e.strip() for e in examples.strip("—").split(","))):
            assert example in by_id or example in PROCESS_ROWS, example
            if example in by_id:
                assert by_id[example].error == cls.__name__, example
    codes = re.findall(r"^\| (\d+) \|", section, flags=re.M)
    assert [int(c) for c in codes] == sorted(errors.EXIT_CODES)


def test_process_rows_have_their_tests():
    source = (Path(__file__).parent / "test_pipes.py").read_text(encoding="utf-8")
    for name in PROCESS_ROWS.values():
        assert f"def {name}(" in source, name


def test_cases_cover_every_command_and_error_class():
    commands = {c.args[0] for c in CASES}
    from tfx_cli.registry import COMMANDS

    missing = {c.name for c in COMMANDS} - commands - {"configs"}
    assert not missing, missing  # configs takes no input beyond --json
    raised = {c.error for c in CASES}
    catalogue = {cls.__name__ for cls in errors.CATALOGUE}
    assert catalogue <= raised


WORDS = " ".join(f"w{i}" for i in range(100))  # 100 distinct tokens, context 64


@pytest.mark.parametrize("command", ["embed", "posenc", "attend", "layernorm", "ffn",
                                     "trace", "lens", "generate", "next"])
def test_truncate_keeps_the_last_tokens(command, tmp_path):
    """The fix the long-text messages offer: --truncate keeps the last 64 of 100 tokens
    (generate and next keep the whole prompt in the envelope and read its last 64)."""
    extra = ["-n", "1"] if command == "generate" else []
    corpus = tmp_path / "words.txt"
    corpus.write_text(WORDS)  # a vocabulary that knows every word
    # generate and next crop a decoder's prompt: a small GPT of context 64 reading words
    config = ["-c", "gpt124m", "--context", "64", "--layers", "1", "--d-model", "16",
              "--heads", "2", "-t", "word"] if command in ("generate", "next") else TOY
    result = CliRunner().invoke(app, [command, WORDS, *config, "--corpus", str(corpus),
                                      "--truncate", "--json", *extra],
                                env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    if command == "generate":
        assert doc["result"]["steps"][0]["context"] == 64
    elif command == "next":
        assert doc["result"]["context"] == 64 and doc["result"]["position"] == 100
    else:
        assert doc["input"]["tokens"] == [f"w{i}" for i in range(36, 100)]


@pytest.mark.parametrize("command", ["generate", "next"])
def test_truncate_crops_an_encoder_decoders_source(command, tmp_path):
    """toy reads its source through the encoder: --truncate keeps its last 64 tokens."""
    corpus = tmp_path / "words.txt"
    corpus.write_text(WORDS)
    extra = ["-n", "2"] if command == "generate" else []
    args = [command, WORDS, *TOY, "--corpus", str(corpus), "--json", *extra]
    refused = CliRunner().invoke(app, args, env={"TFX_QUIET": "1"})
    assert refused.exit_code == 2 and "--truncate" in refused.stderr
    result = CliRunner().invoke(app, args + ["--truncate"], env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    cropped = CliRunner().invoke(app, [command, " ".join(WORDS.split()[36:]), *TOY,
                                       "--corpus", str(corpus), "--json", *extra],
                                 env={"TFX_QUIET": "1"})
    key = "steps" if command == "generate" else "candidates"
    assert json.loads(result.stdout)["result"][key] == json.loads(cropped.stdout)["result"][key]


@pytest.mark.parametrize("args, stdin, made", [
    (["tokenize", "-", "--encoding", "latin-1", "--json"], b"caf\xe9", None),
    (["embed", "-", *TOY, "--encoding", "latin-1", "--json"], b"caf\xe9", None),
    (["report", "hi", *TOY, "-o", "old.html", "--force"], None, "old.html"),
    (["embed", "hi", *TOY, "--plot", "old.png", "--force"], None, "old.png"),
], ids=["tokenize-encoding", "embed-encoding", "report-force", "plot-force"])
def test_the_fix_a_message_names_works(args, stdin, made, tmp_path):
    """stdin-not-utf8 says --encoding, report-exists and plot-exists say --force."""
    (tmp_path / "old.html").write_text("mine")
    (tmp_path / "old.png").write_text("mine")
    with _in(tmp_path):
        result = CliRunner().invoke(app, args, input=stdin, env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    if made:
        assert (tmp_path / made).read_bytes() != b"mine"
    else:
        assert "café" in json.loads(result.stdout)["input"]["text"]


@pytest.mark.parametrize("command", ["report", "graph-save"])
def test_unwritable_folder(tmp_path, command):
    """Checked apart from the table: the folder is made read-only, which root ignores, so
    as root the command runs in a process without the capability to override file
    permissions (util-linux's setpriv drops it from the bounding set). graph's --save is
    refused before the graph is made (once an internal error after it)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if command == "report":
        args = ["report", "hi", *TOY, "-o", str(locked / "r.html")]
    else:
        _transcoders("tc")(tmp_path)
        args = ["graph", SENTENCE, *WORDY, "--transcoders", str(tmp_path / "tc"), "--save",
                str(locked / "g.safetensors")]
    try:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            import subprocess

            from needs import need_program

            setpriv = need_program(("setpriv",), "apt-get install util-linux")
            proc = subprocess.run(
                [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--",
                 sys.executable, "-m", "tfx_cli", *args], capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT), "TFX_QUIET": "1"}, timeout=300)
            code, stderr = proc.returncode, proc.stderr
        else:
            result = CliRunner().invoke(app, args)
            code, stderr = result.exit_code, result.stderr
    finally:
        locked.chmod(0o700)
    assert code == 2 and "not writable" in stderr, stderr
    assert len(stderr.splitlines()) == 1 and "internal error" not in stderr
    assert list(locked.iterdir()) == []


def write_readme_table(table: str) -> None:
    """Put the generated rows into docs/errors.md's table, keeping the rows of cases that need
    real processes (test_pipes.py's) after them, as they were."""
    header = "| id | input | command | exit | error | stderr |"
    lines = ERRORS_PAGE.read_text(encoding="utf-8").split("\n")
    start = lines.index(header)
    end = start + 2
    while end < len(lines) and lines[end].startswith("| "):
        end += 1
    ids = {case.id for case in CASES}
    kept = [row for row in lines[start + 2:end] if row.split("|")[1].strip() not in ids]
    lines[start:end] = table.split("\n") + kept
    ERRORS_PAGE.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":  # docs/errors.md's table from real runs: printed, or written with --write
    import tempfile

    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as scratch:
        table = generate_table(Path(scratch))
    if "--write" in sys.argv[1:]:
        write_readme_table(table)
    else:
        print(table)
