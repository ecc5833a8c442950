"""A checkpoint larger than this machine's memory, inspected with tfx, then deleted.

    python bench/huge.py                      # Llama-7B's shape in float32: about 27 GB
    python bench/huge.py --dir /big/disk      # where to write it (default: the temp dir)
    python bench/huge.py --layers 2           # a small rehearsal of the same steps

It writes a random HF Llama folder of Llama-7B's shape (d_model 4096, 32 layers of 32
heads, FFN 11008, vocabulary 32,000, untied head) in float32 safetensors, one shard per
block, each tensor drawn and written on its own (sources.SafetensorsWriter), so writing
it holds one tensor at a time, never the model. Then, each in a fresh process, with peak
RSS read by os.wait4:

  tfx attend TEXT --layer LAST --weights DIR      the last block's attention
  tfx attend TEXT --layer 40 --weights DIR        past the last block: the range error

tfx streams the folder without being told: its weights do not fit in the free memory.
The folder is removed at the end, whatever happened (it is never left on disk).

The checkpoint is written by a child process: this one never imports torch, so the
commands it starts (whose peak RSS counts from the forking parent's) are not inflated.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
TEXT = "The capital of France is Paris"
LLAMA_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
            "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "tie_word_embeddings": False}


def block_tensors(i: int, d: int, f: int) -> dict:
    layer = f"model.layers.{i}."
    shapes = {"self_attn.q_proj.weight": (d, d), "self_attn.k_proj.weight": (d, d),
              "self_attn.v_proj.weight": (d, d), "self_attn.o_proj.weight": (d, d),
              "mlp.gate_proj.weight": (f, d), "mlp.up_proj.weight": (f, d),
              "mlp.down_proj.weight": (d, f), "input_layernorm.weight": (d,),
              "post_attention_layernorm.weight": (d,)}
    return {layer + k: v for k, v in shapes.items()}


def write_checkpoint(folder: Path, config: dict, seed: int = 0) -> int:
    """The folder, one shard per block; returns its size in bytes."""
    import torch

    from tfx_cli.core.checkpoints.sources import SafetensorsWriter

    d, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    shards = {"model-embed.safetensors": {"model.embed_tokens.weight": (v, d)}}
    for i in range(config["num_hidden_layers"]):
        shards[f"model-block-{i:03d}.safetensors"] = block_tensors(i, d, f)
    shards["model-head.safetensors"] = {"model.norm.weight": (d,), "lm_head.weight": (v, d)}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **config}))
    write_tokenizer(folder, v)
    generator = torch.Generator().manual_seed(seed)
    weight_map = {}
    for n, (shard, shapes) in enumerate(shards.items()):
        writer = SafetensorsWriter(folder / shard, {k: (s, torch.float32)
                                                    for k, s in shapes.items()})
        for name, shape in shapes.items():
            if len(shape) == 1:  # a norm's scale: about one, as trained models have
                tensor = 1 + 0.1 * torch.randn(shape, generator=generator)
            else:
                tensor = torch.randn(shape, generator=generator) * 0.02
            writer.write(name, tensor)
            del tensor
        assert writer.close(), shard
        weight_map.update({k: shard for k in shapes})
        print(f"\rwritten {n + 1}/{len(shards)} shards", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """A byte-level tokenizer.json of the vocabulary's size (the 256 byte tokens, then
    unused entries): the random model needs some tokenizer of its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from tfx_cli.core.tokenizers.hf import _BYTE_OF

    vocab = dict(_BYTE_OF)
    for i in range(len(vocab), vocab_size):
        vocab[f"<unused{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(folder / "tokenizer.json"))


def timed(argv: list[str], env: dict) -> dict:
    """Wall time, peak RSS (os.wait4) and output of one command in its own process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return {"argv": argv[1:], "exit": os.waitstatus_to_exitcode(status),
                "wall_s": round(wall, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024),
                "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace")[-2000:]}


def meminfo() -> dict:
    with open("/proc/meminfo") as fh:
        rows = dict(line.split(":", 1) for line in fh)
    return {k: int(rows[k].split()[0]) * 1024 for k in ("MemTotal", "MemAvailable")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (deleted after)")
    ap.add_argument("--layers", type=int, default=32, help="blocks (32: Llama-7B)")
    ap.add_argument("--out", default=None, help="also write the report as JSON here")
    ap.add_argument("--write", default=None, help=argparse.SUPPRESS)  # the child's job
    args = ap.parse_args(argv)
    config = {**LLAMA_7B, "num_hidden_layers": args.layers}
    if args.write:
        t0 = time.perf_counter()
        size = write_checkpoint(Path(args.write), config)
        print(json.dumps({"checkpoint_bytes": size,
                          "write_s": round(time.perf_counter() - t0, 1)}))
        return 0
    base = Path(tempfile.mkdtemp(prefix="tfx-huge-", dir=args.dir))
    folder = base / "llama-7b-shape"
    tfx = str(Path(sys.executable).with_name("tfx"))
    env = {**os.environ, "TFX_QUIET": "1",
           "XDG_CACHE_HOME": str(base / "xdg")}  # nothing lands in the user's cache
    report: dict = {"memory": meminfo(), "config": config}
    try:
        writer = timed([sys.executable, __file__, "--write", str(folder), "--layers",
                        str(args.layers)], env)
        if writer["exit"] != 0:
            raise SystemExit(f"writing the checkpoint failed: {writer['stderr']}")
        report.update(json.loads(writer["stdout"]))
        report["write_peak_rss_mb"] = writer["peak_rss_mb"]
        print(f"checkpoint: {report['checkpoint_bytes'] / 1e9:.2f} GB in "
              f"{report['write_s']} s; machine memory {report['memory']['MemTotal'] / 2**30:.1f}"
              f" GiB, {report['memory']['MemAvailable'] / 2**30:.1f} GiB available",
              file=sys.stderr)
        last = args.layers - 1
        attend = [tfx, "attend", TEXT, "--layer", str(last), "--weights", str(folder), "--json"]
        runs = [attend, attend + ["--dtype", "bfloat16"],
                [tfx, "next", TEXT, "--weights", str(folder), "--json"],
                [tfx, "attend", TEXT, "--layer", "40", "--weights", str(folder)]]
        report["runs"] = []
        for run in runs:
            result = timed(run, env)
            if result["exit"] == 0 and run[1] == "attend":
                doc = json.loads(result["stdout"])
                pattern = doc["tensors"][f"blocks.{last}.attn.pattern"]
                result["stdout"] = {"streamed": doc["model"]["streamed"],
                                    "dtype": doc["model"]["dtype"],
                                    "pattern_shape": pattern["shape"],
                                    "last_row_head_0": pattern["data"][0][-1]}
            elif result["exit"] == 0 and run[1] == "next":
                doc = json.loads(result["stdout"])
                result["stdout"] = {"streamed": doc["model"]["streamed"],
                                    "top": doc["result"]["candidates"][0]}
            report["runs"].append(result)
            print(json.dumps({k: result[k] for k in ("argv", "exit", "wall_s", "peak_rss_mb")}),
                  file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        report["removed"] = not base.exists()
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if report["removed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
