"""bench/run.py --smoke runs end to end on a tiny model and writes its JSON.

Timings are not checked (they depend on the machine); only that every case ran and that
the table, the targets and the file came out.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a few child processes, each importing torch
def test_bench_smoke_writes_results(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--peers", "tfx",
         "--cases", "forward,record,generate,patch,seq2seq", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    cases = doc["cases"]
    assert {"forward T=16 tfx", "record T=16 tfx"} <= set(cases)
    for row in cases.values():
        assert not row["errors"], row
        assert row["median_s"] > 0 and row["maxrss_mb"] > 0
    patched = {row["peer"]: row for row in cases.values() if row["group"] == "patch"}
    assert set(patched) == {"tfx", "tfx1"}  # batched and one cell per forward
    assert patched["tfx"]["cells"] == 2 * 16 and patched["tfx"]["tok_per_s"] > 0
    generated = [row for row in cases.values() if row["group"] == "generate"]
    assert generated and len(generated[0]["tokens"]) == 4
    s2s = {row["group"]: row for row in cases.values() if row["group"].startswith("seq2seq")}
    assert len(s2s["seq2seq"]["tokens"]) == 4  # toy's 4 greedy tokens, timed in process
    assert s2s["seq2seq command"]["tok_per_s"] > 0  # the whole `tfx generate -c toy`
    recorded = cases["record T=16 tfx"]["n_recorded"]
    assert recorded >= 50  # every tap of a 2-layer model, not just the logits
    assert "target" in proc.stdout and any(t["target"].startswith("forward") for t in doc["targets"])
