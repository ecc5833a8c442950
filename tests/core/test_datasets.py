"""The corpus commands against the one-text commands they batch: scan against metrics
computed from `tfx trace --select '*attn.pattern'` per document, collect's rows against
`tfx trace --select SITE`, top against the collected column, patch --pairs against single
patch runs; collect, scan and top resume after kill -9 to the same bytes."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from needs import need_import
from tfx_cli import api

MODEL = dict(config="gpt124m", layers=2, d_model=64, heads=4, seed=3)
ARGS = ["-c", "gpt124m", "--layers", "2", "--d-model", "64", "--heads", "4", "--seed", "3"]
ROOT = Path(__file__).resolve().parents[2]
DOCS = ["When you play the game of thrones, you win or you die. There is no middle ground.",
        "the cat sat on the mat and the cat sat on the mat again",
        "A a a a b b b a b a b a b",
        "Hello, I am a language model, and I am a language model too.",
        "x"]


def _metrics(pattern: np.ndarray, ids: list[int]) -> dict:
    """The five metrics of one window, from its (H, T, T) pattern: (sum per head, count)."""
    H, T, _ = pattern.shape
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(pattern > 0, np.log(np.where(pattern > 0, pattern, 1)), 0)
    out["entropy"] = (-(pattern * logs).sum(-1).sum(-1), T)
    out["sink"] = (pattern[:, 1:, 0].sum(-1), T - 1)
    out["prev_token"] = (np.array([sum(pattern[h, q, q - 1] for q in range(1, T))
                                   for h in range(H)]), T - 1)
    dup, ind = np.zeros(H), np.zeros(H)
    n_dup = n_ind = 0
    for q in range(T):
        ks = [k for k in range(q) if ids[k] == ids[q]]
        if ks:
            n_dup += 1
            dup += pattern[:, q, ks].sum(-1)
        ks = [k for k in range(q - 1) if ids[k] == ids[q]]
        if ks:
            n_ind += 1
            ind += pattern[:, q, [k + 1 for k in ks]].sum(-1)
    out["duplicate_token"] = (dup, n_dup)
    out["induction"] = (ind, n_ind)
    return out


def _reference_scan(texts, ctx, **model):
    m = api.load(**model)
    L = m.config.n_layers
    sums, counts = {}, {}
    for text in texts:
        ids = m.tokenizer.encode(text)
        for start in range(0, len(ids), ctx):
            window = ids[start:start + ctx]
            # the window as `tfx trace` runs it: its text when it is the whole document
            tr = m.trace(text, select=["*attn.pattern"]) if len(window) == len(ids) else None
            for layer in range(L):
                name = f"blocks.{layer}.attn.pattern"
                if tr is not None:
                    pattern = tr.tensors[name]
                else:
                    pattern = _window_pattern(m, window, name)
                for metric, (s, n) in _metrics(pattern.astype(np.float64), window).items():
                    sums[metric, layer] = sums.get((metric, layer), 0) + s
                    counts[metric] = counts.get(metric, 0) + (n if layer == 0 else 0)
    return {metric: np.stack([sums[metric, layer] for layer in range(L)]) / counts[metric]
            for metric in ("entropy", "sink", "prev_token", "duplicate_token", "induction")}


def _window_pattern(m, window, name):
    from tfx_cli.core.analysis.common import run

    return run(m._loaded, window, [name]).array(name)


def test_scan_equals_metrics_from_trace(tmp_path):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(DOCS) + "\n\n")
    ctx = 12  # longer documents are cut into windows
    result = api.scan(str(corpus), ctx=ctx, batch_size=3, **MODEL)
    ref = _reference_scan(DOCS, ctx, **MODEL)
    for metric, expected in ref.items():
        got = result.tensors[f"scan.{metric}"]
        assert got.shape == (2, 4)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert result.documents == len(DOCS)
    m = api.load(**MODEL)
    n = [len(m.tokenizer.encode(d)) for d in DOCS]
    assert result.tokens == sum(n)
    assert result.windows == sum(-(-k // ctx) for k in n)
    assert result.to_dict() == json.loads(json.dumps(result.to_dict()))
    # batch size and engine do not change the answer beyond float rounding
    again = api.scan(str(corpus), ctx=ctx, batch_size=1, **MODEL)
    np.testing.assert_allclose(again.tensors["scan.induction"], result.tensors["scan.induction"],
                               atol=1e-6)


def test_collect_rows_equal_trace_and_top_is_the_true_top_k(tmp_path):
    pd = need_import("pandas", "pip install pandas")  # the tokens table, read without tfx
    duckdb = need_import("duckdb", "pip install duckdb")
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"body": d, "n": i}) + "\n" for i, d in enumerate(DOCS)))
    out = tmp_path / "acts"
    sites = ["blocks.1.ffn.act", "blocks.0.resid_out", "blocks.1.attn.context"]
    result = api.collect(str(corpus), select=sites, output=out, field="body",
                         shard_tokens=7, batch_size=2, **MODEL)
    assert result.tokens == sum(s.tokens for s in result.shards)
    acts = api.activations(out)
    m = api.load(**MODEL)
    first = 0
    for text in DOCS:
        tr = m.trace(text, select=sites)
        n = len(tr.input.tokens)
        for site in sites:
            rows = acts[site][first:first + n]
            want = tr.tensors[site]
            if site.endswith("context"):  # (H, T, D) -> rows of H * D, head-major
                want = want.transpose(1, 0, 2).reshape(n, -1)
            np.testing.assert_allclose(rows, want, atol=1e-5, rtol=0)
        first += n
    # the tokens table, read without tfx: pandas, DuckDB
    table = pd.read_parquet(out / "tokens.parquet")
    assert list(table.columns) == ["doc", "position", "token", "text", "shard", "row"]
    assert len(table) == result.tokens and table["doc"].max() == len(DOCS) - 1
    assert table["shard"].tolist() == [i // 7 for i in range(len(table))]
    count = duckdb.sql(f"select count(*) from '{out / 'tokens.parquet'}' where doc = 1").fetchall()[0]
    assert count[0] == len(m.tokenizer.encode(DOCS[1]))
    from safetensors.numpy import load_file

    shard = load_file(str(out / "shard-00000.safetensors"))
    assert shard["blocks.0.resid_out"].shape == (7, 64)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["schema"] == "tfx/1"
    assert "time" not in json.dumps(manifest)
    # top's values are the true top-K of the collected column, ties to the earlier token
    column = acts["blocks.1.ffn.act"][:, 5]
    top = api.top(str(corpus), field="body", site="blocks.1.ffn.act", units="5,9", k=4,
                  around=2, batch_size=2, **MODEL)
    examples = top.units[0].examples
    order = np.lexsort((np.arange(len(column)), -column.astype(np.float64)))[:4]
    assert [e.value for e in examples] == [float(column[i]) for i in order]
    pos = table.iloc[order]
    assert [(e.doc, e.position) for e in examples] == list(zip(pos["doc"], pos["position"]))
    e = examples[0]
    assert e.context.tokens[e.context.at] == e.token
    assert e.context.values[e.context.at] == e.value


def test_patch_pairs_is_the_mean_of_single_patches(tmp_path):
    pairs = ROOT / "samples" / "ioi_pairs.jsonl"
    rows = [json.loads(line) for line in pairs.read_text().splitlines()][:3]
    tmp = tmp_path / "pairs.jsonl"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for site in ("resid_pre", "heads"):
        averaged = api.patch(pairs=tmp, site=site, **MODEL)
        singles = [api.patch(r["clean"], corrupt=r["corrupt"], answer=r["answer"],
                             wrong=r["wrong"], site=site, **MODEL).tensors["patch.effect"]
                   for r in rows]
        np.testing.assert_allclose(averaged.tensors["patch.effect"], np.mean(singles, 0),
                                   atol=1e-5)
        np.testing.assert_allclose(averaged.tensors["patch.effect_std"],
                                   np.std(singles, 0), atol=1e-5)
        assert averaged.n_pairs == 3 and averaged.command == "patch"


def _collect_cmd(corpus, out):
    return [sys.executable, "-m", "tfx_cli", "collect", str(corpus), *ARGS, "-s",
            "blocks.*.resid_out,blocks.1.ffn.act", "-o", str(out), "--shard-tokens", "16",
            "--batch-size", "1", "--ctx", "8", "--json"]


def _kill_mid_run(cmd, env, ready, timeout=180.0):
    """Start `cmd`, SIGKILL it as soon as ready() is true (polled, bounded by `timeout`);
    fails when the run ended or the time ran out before it was killed part way."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            assert proc.poll() is None, f"the run ended before it was killed: " \
                                        f"{proc.stderr.read().decode()[-400:]}"
            assert time.monotonic() < deadline, "no partial progress within the time given"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def test_kill_and_resume_gives_the_same_bytes(tmp_path):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(DOCS * 12))
    env = {**os.environ, "TFX_QUIET": "1", "PYTHONPATH": str(ROOT)}
    whole = tmp_path / "whole"  # the uninterrupted run, in this process (no start-up)
    collect = dict(select=["blocks.*.resid_out", "blocks.1.ffn.act"], shard_tokens=16,
                   batch_size=1, ctx=8, **MODEL)
    api.collect(str(corpus), output=whole, **collect)
    killed = tmp_path / "killed"
    _kill_mid_run(_collect_cmd(corpus, killed), env,
                  lambda: (killed / "shard-00003.safetensors").exists())
    manifest = json.loads((killed / "manifest.json").read_text())
    assert not manifest["complete"]  # killed part way, the manifest still valid JSON
    done = subprocess.run(_collect_cmd(corpus, killed), env=env, check=True,
                          capture_output=True)
    assert json.loads(done.stdout)["result"]["resumed_shards"] >= 3
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in killed.iterdir())
    for name in names:
        assert (whole / name).read_bytes() == (killed / name).read_bytes(), name
    # scan -o DIR: the finished folder answers again with the same bytes
    before = (whole / "manifest.json").read_bytes()
    assert api.collect(str(corpus), output=whole, **collect).resumed_shards == len(
        json.loads(before)["shards"])
    assert (whole / "manifest.json").read_bytes() == before


class _CountingEngine:
    """The local engine, counting the tokens it runs (a resumed run runs only the rest)."""

    name = "local"

    def __init__(self):
        from tfx_cli.core.datasets.engines import LocalEngine

        self.inner, self.tokens = LocalEngine(), 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def map(self, spec, batches):
        for batch, partial in self.inner.map(spec, batches):
            self.tokens += batch.tokens
            yield batch, partial


REDUCED = {  # scan and top with -o DIR: the CLI options and the same run through the API
    "scan": ([], {}),
    "top": (["--site", "blocks.1.ffn.act", "--units", "0:6", "-k", "3", "--around", "2"],
            dict(site="blocks.1.ffn.act", units="0:6", k=3, around=2)),
}


def _saved(out: Path) -> dict | None:
    try:
        with np.load(out / "state.npz") as saved:
            return {"chunks": int(saved["chunks_done"]), "tokens": int(saved["tokens"])}
    except (OSError, ValueError, KeyError):  # not written yet
        return None


@pytest.mark.parametrize("command", sorted(REDUCED))
def test_scan_and_top_killed_mid_run_resume_to_the_same_bytes(tmp_path, command):
    """A real `tfx scan|top -o DIR` killed with SIGKILL after some chunks are saved; the
    same run resumed finishes with the files of an uninterrupted run, byte for byte,
    having run only what the killed run had not saved."""
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(DOCS * 40))
    cli, kw = REDUCED[command]
    run = dict(ctx=8, batch_size=1, **kw, **MODEL)
    whole = tmp_path / "whole"
    full = getattr(api, command)(str(corpus), output=whole, **run)
    total = _saved(whole)
    assert total["tokens"] == full.tokens and total["chunks"] > 8
    killed = tmp_path / "cut"
    cmd = [sys.executable, "-m", "tfx_cli", command, str(corpus), *ARGS, *cli, "--ctx", "8",
           "--batch-size", "1", "-o", str(killed), "--json"]
    env = {**os.environ, "TFX_QUIET": "1", "PYTHONPATH": str(ROOT)}
    _kill_mid_run(cmd, env, lambda: (_saved(killed) or {"chunks": 0})["chunks"] >= 2)
    at_kill = _saved(killed)
    assert 2 <= at_kill["chunks"] < total["chunks"]  # the kill came part way
    assert 0 < at_kill["tokens"] < total["tokens"]
    assert not json.loads((killed / "manifest.json").read_text())["complete"]
    assert not (killed / "result.json").exists()
    engine = _CountingEngine()
    resumed = getattr(api, command)(str(corpus), output=killed, engine=engine, **run)
    assert engine.tokens == total["tokens"] - at_kill["tokens"]  # only the rest ran
    assert json.dumps(resumed.to_dict()) == \
        json.dumps(full.to_dict()).replace(str(whole), str(killed))
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in killed.iterdir()) == \
        ["manifest.json", "result.json", "state.npz"]
    for name in names:
        want = (whole / name).read_bytes().replace(str(whole).encode(), str(killed).encode())
        assert (killed / name).read_bytes() == want, name


def test_repeated_tokens_and_readers(tmp_path):
    pa = need_import("pyarrow", "pip install pyarrow")  # the .parquet corpus
    r = api.scan("repeated-tokens", max_docs=3, **MODEL)
    assert r.documents == 3 and r.tokens == 3 * 96
    # every second-half query has an earlier copy of its token, the first halves none
    assert r.queries["induction"] >= 3 * 47
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": DOCS[:3], "other": [1, 2, 3]}), tmp_path / "d.parquet")
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, d in enumerate(DOCS[:3]):
        (folder / f"{i:02d}.txt").write_text(d + "\n")
    sums = [api.scan(str(p), **MODEL).tensors["scan.entropy"]
            for p in (tmp_path / "d.parquet", folder)]
    np.testing.assert_array_equal(sums[0], sums[1])
