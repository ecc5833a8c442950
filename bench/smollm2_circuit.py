"""SmolLM2-135M's circuit for " Paris", end to end (docs/circuit-example.md): transcoders
for all 30 layers trained here on python-docs, judged on held-out paragraphs, then the
attribution graph of "The capital of France is", the same graph opened again from its
graph.json, an intervention on its strongest feature, and a 73-token prompt's graph.json
size. Each step is a tfx command (the ones the page shows); the numbers land in
bench/results_smollm2_circuit.json.

    python bench/smollm2_circuit.py WORK_DIR        # about an hour on a 2-core CPU

The page's numbers were measured by running these commands one by one (the same
arguments); this script strings them together and has not yet been run end to end.

Every step is resumable: collect and train-transcoder continue a killed run in WORK_DIR,
and a step whose output exists is not run again (delete it to redo it).
"""
from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TFX = [sys.executable, "-m", "tfx_cli"]
PROMPT = "The capital of France is"
LONG = ("The Eiffel Tower stands in Paris, the capital of France. The Colosseum stands in "
        "Rome, the capital of Italy. The Brandenburg Gate stands in Berlin, the capital of "
        "Germany. The Prado Museum stands in Madrid, the capital of Spain. The Parthenon "
        "stands in Athens, the capital of Greece. The Tower of London stands in the city of")
COLLECT = ["collect", "python-docs", "-w", "smollm2", "--select", "blocks.*.ln2.out",
           "--select", "blocks.*.ffn.out", "-o", "acts", "--max-tokens", "50000"]
TRAIN = ["train-transcoder", "acts", "--layers", "all", "-o", "set", "--k", "32",
         "--latents", "2048", "--skip", "--skip-first", "1", "--batch-size", "1024",
         "--steps", "500", "--lr", "2e-3", "--json"]
MODEL = ["-w", "smollm2", "--transcoders", "set"]


def run(args: list[str], work: Path, out: str | None = None) -> tuple[str, float, float]:
    """(stdout, wall seconds, peak RSS in GB) of one tfx command, stdout kept in `out`."""
    started = time.perf_counter()
    timed = ["/usr/bin/time", "-v"] if shutil.which("time") or Path("/usr/bin/time").exists() else []
    done = subprocess.run([*timed, *TFX, *args], cwd=work, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                               "TFX_QUIET": "1"})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"tfx {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if out:
        (work / out).write_text(done.stdout, encoding="utf-8")
    return done.stdout, wall, int(peak.group(1)) / 1e6 if peak else float("nan")


def heldout(work: Path, first: int) -> Path:
    """python-docs' paragraphs after the `first` that collect read, one per line."""
    from tfx_cli.core.datasets.corpus import open_corpus

    path = work / "heldout.txt"
    docs = [d.text if hasattr(d, "text") else str(d)
            for d in open_corpus("python-docs").documents()]
    path.write_text("\n".join(docs[first:]) + "\n", encoding="utf-8")
    return path


def main(work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    record: dict = {"machine": f"{platform.machine()}, {platform.processor() or '?'}",
                    "steps": {}}
    if not (work / "acts" / "complete").exists() and not _complete(work / "acts"):
        _, wall, rss = run(COLLECT, work)
        record["steps"]["collect"] = {"seconds": wall, "peak_rss_gb": rss}
    manifest = json.loads((work / "acts" / "manifest.json").read_text())
    record["collect"] = {"tokens": manifest["tokens"], "documents": manifest["documents"]}
    if not (work / "train.json").exists():
        _, wall, rss = run(TRAIN, work, "train.json")
        record["steps"]["train"] = {"seconds": wall, "peak_rss_gb": rss}
    trained = json.loads((work / "train.json").read_text())["result"]
    record["layers"] = [{k: row[k] for k in ("layer", "fvu", "l0", "dead") if k in row}
                        for row in trained["layers"]]
    heldout(work, manifest["documents"])
    steps = [("eval", ["eval-sae", "heldout.txt", *MODEL, "--max-tokens", "1000", "--json"],
              "eval.json"),
             ("graph", ["graph", PROMPT, *MODEL, "-o", "paris.json", "--html", "paris.html",
                        "--json", "--force"], "graph.json"),
             ("opened", ["graph", "--open", "paris.json", "--json"], "opened.json"),
             ("long", ["graph", LONG, *MODEL, "-o", "long.json", "--json", "--force"],
              "long-graph.json")]
    for name, args, out in steps:
        if not (work / out).exists():
            _, wall, rss = run(args, work, out)
            record["steps"][name] = {"seconds": wall, "peak_rss_gb": rss}
    record["eval"] = json.loads((work / "eval.json").read_text())["result"]
    record["eval"].pop("layers", None)
    graph = json.loads((work / "graph.json").read_text())["result"]
    record["graph"] = _graph_summary(graph)
    long = json.loads((work / "long-graph.json").read_text())["result"]
    record["long"] = {**_graph_summary(long), "graph_json_bytes": (work / "long.json").stat().st_size,
                      "links": len(json.loads((work / "long.json").read_text())["links"])}
    record["intervention"] = _intervene(work, graph)
    return record


def _complete(folder: Path) -> bool:
    try:
        return bool(json.loads((folder / "manifest.json").read_text()).get("complete"))
    except (OSError, ValueError):
        return False


def _graph_summary(result: dict) -> dict:
    kinds: dict = {}
    for node in result["nodes"]:
        kinds[node["kind"]] = kinds.get(node["kind"], 0) + 1
    return {"replacement_score": result["replacement_score"],
            "completeness_score": result["completeness_score"], "nodes": kinds,
            "edges": result["n_edges"], "active_features": result["n_active_features"]}


def _intervene(work: Path, graph: dict) -> dict:
    """The feature of largest influence at the last position, set to zero and to twice
    its activation: the top next tokens before and after. Every run has --transcoders, so
    it runs the graph's ids (the token the graph puts first included) and the graph's
    positions are next's."""
    last = max(n["pos"] for n in graph["nodes"])
    features = [n for n in graph["nodes"] if n["kind"] == "feature" and n["pos"] == last]
    best = min(features, key=lambda n: n["influence"])  # cumulative: the smallest is the first
    where = f"{best['layer']}:{best['pos']}:{best['feature']}"
    out = {"feature": where, "activation": best["activation"], "label": best.get("label")}
    for name, value in (("plain", None), ("off", 0.0), ("doubled", 2 * best["activation"])):
        args = ["next", PROMPT, "-w", "smollm2", "--candidates", "3", "--json",
                "--transcoders", "set"]
        if value is not None:
            args += ["--set-feature", f"{where}={value:g}"]
        text, _, _ = run(args, work)
        cands = json.loads(text)["result"]["candidates"]
        out[name] = [(c["token"], round(c["prob"], 4)) for c in cands]
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    result = main(Path(sys.argv[1]).resolve())
    target = ROOT / "bench" / "results_smollm2_circuit.json"
    target.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
