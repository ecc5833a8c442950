"""What reading only the routed experts saves when a mixture of experts is streamed.

    python bench/moe_streaming.py               # a 1.4 GB Mixtral-shaped folder (written, then deleted)
    python bench/moe_streaming.py --layers 2    # a small rehearsal

It writes a random Mixtral-shaped folder (d_model 768, 6 layers, 8 experts of width 2688,
2 per token, vocabulary 32,000) twice: in the Hub's per-expert layout (each expert its own
streamed part, read only when a token is routed to it) and with transformers 5's stacked
expert tensors (read with their block: every expert, every time). Each command then runs in
a fresh process, with peak RSS from os.wait4 and the bytes the streamed parts took in
memory from the model's residency:

  tfx next TEXT -w DIR                       in memory
  tfx next TEXT -w DIR --max-memory 400MB    streamed (a 7-token text)
  tfx generate TEXT -w DIR -n 8 --max-memory 400MB   streamed decoding: one token per step

Results go to bench/moe_streaming_results.json and stdout.
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
TEXT = "The capital of France is"
SHAPE = {"hidden_size": 768, "intermediate_size": 2688, "num_attention_heads": 12,
         "num_key_value_heads": 4, "vocab_size": 32000, "num_local_experts": 8,
         "num_experts_per_tok": 2, "max_position_embeddings": 1024}

WRITE = r"""
import json, sys, torch, transformers
from safetensors.torch import save_file
from pathlib import Path
shape, layers, hub, stacked = json.loads(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
torch.manual_seed(0)
cfg = transformers.MixtralConfig(**shape, num_hidden_layers=layers)
model = transformers.MixtralForCausalLM(cfg).eval()
model.save_pretrained(hub)
stacked.mkdir()
(stacked / "config.json").write_text((hub / "config.json").read_text())
save_file({k: v.contiguous() for k, v in model.state_dict().items()},
          stacked / "model.safetensors", metadata={"format": "pt"})
"""

RUN = r"""
import json, sys, time
from tfx_cli import api
kind, path, budget = sys.argv[1], sys.argv[2], sys.argv[3] or None
t0 = time.perf_counter()
m = api.load(weights=path, max_memory=budget)
if kind == "next":
    r = m.next(sys.argv[4])
    out = {"token": r.greedy.token, "prob": r.greedy.prob}
else:
    r = m.generate(sys.argv[4], max_new_tokens=8, ignore_eos=True)
    out = {"ids": r.ids}
res = m.module.residency
out.update(seconds=time.perf_counter() - t0, streamed=res.streamed,
           bytes_read=getattr(res, "bytes_read", 0), parts_read=getattr(res, "reads", 0))
print(json.dumps(out))
"""


def run(args: list[str]) -> dict:
    env = {**os.environ, "TFX_QUIET": "1", "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.Popen([sys.executable, "-c", RUN, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    out, err = proc.stdout.read(), proc.stderr.read()
    if status:
        raise SystemExit(f"{args}: {err}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--budget", default="400MB")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    opts = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir=opts.dir, prefix="tfx-moe-bench-"))
    try:
        hub, stacked = root / "hub", root / "stacked"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", WRITE, json.dumps(SHAPE), str(opts.layers),
                        str(hub), str(stacked)], check=True)
        _tokenizer(hub)
        _tokenizer(stacked)
        size = (hub / "model.safetensors").stat().st_size
        print(f"wrote 2 × {size / 1e9:.2f} GB in {time.perf_counter() - t0:.0f} s")
        results = {"shape": SHAPE, "layers": opts.layers, "file_bytes": size,
                   "budget": opts.budget, "runs": {}}
        for name, path in (("hub", hub), ("stacked", stacked)):
            for kind, budget in (("next", ""), ("next", opts.budget),
                                 ("generate", opts.budget)):
                label = f"{name} {kind} {'streamed' if budget else 'in memory'}"
                results["runs"][label] = r = run([kind, str(path), budget, TEXT])
                print(f"{label:34s} {r['seconds']:6.1f} s  peak {r['peak_rss_mb']:6.0f} MB  "
                      f"read {r['bytes_read'] / 1e9:6.2f} GB in {r['parts_read']} parts  "
                      f"{r.get('token', '')!r}")
        (HERE / "moe_streaming_results.json").write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _tokenizer(folder: Path) -> None:
    """A byte-level tokenizer.json of the vocabulary's size (as the tests make them)."""
    sys.path.insert(0, str(HERE.parent / "tests" / "core"))
    from checkpoint_makers import byte_tokenizer_json

    byte_tokenizer_json(folder, SHAPE["vocab_size"])


if __name__ == "__main__":
    main()
