"""Fuzzing the CLI: random commands, options and hostile values through CliRunner.

Whatever is typed, tfx must answer with exit 0 or a one-line `tfx: error: ...` (exit 2
for bad input; exit 1 only for real runtime failures, never an "internal error"), never
a traceback, nothing on stdout when it fails, and valid JSON (no NaN) with --json.

Models stay cheap (the toy encoder, an 8-wide GPT on bytes, a Llama-like 8-wide config)
and sizes are either small or far past a limit, so every example runs in milliseconds.
Hostile sizes that are legal but slow (a million new tokens, --plot's drawing) are left
to their own tests. `pytest --hypothesis-show-statistics` shows what was drawn.

Besides the commands' own options the draws cover the surfaces where a wrong answer
could still exit 0 (issue 25): --dtype (float16 and bfloat16 included), --device,
--max-memory, interventions (repeated --steer, scales past float32's range), `train`
(diverging --lr, bad outputs: a refused run writes no folder) and the Python API
(values of every type for every keyword). Two properties hold throughout: an exit-0
answer holds no NaN or infinity, and nothing ends in an internal error. 500 invocations
per run in all (CLI and API together; TFX_FUZZ_EXAMPLES sets the total).
"""
import json
import math
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.errors import TfxError

LLAMA_LIKE = {"vocab_size": 256, "context_length": 32, "d_model": 8, "n_heads": 2,
              "n_kv_heads": 1, "n_layers": 1, "d_ff": 12, "norm": "rmsnorm",
              "positional": "rope", "activation": "swiglu", "tokenizer": "byte"}


# -- values: mostly sane (so the commands run to the end), a third hostile ----------------
def mix(sane, hostile):
    return st.one_of(sane, sane, hostile)


HUGE = [2**31, 2**63, 2**64, 10**30]
INTS = mix(st.integers(0, 12).map(str),
           st.one_of(st.sampled_from([-1, 31, 32, 33, 63, 64, 65, -2**63, *HUGE]).map(str),
                     st.sampled_from(["", "x", "1.5", "٣", "0x10", "-0"])))
SMALL_INTS = mix(st.integers(0, 1).map(str),
                 st.integers(-2, 6).map(str) | st.sampled_from(["", "two", *map(str, HUGE)]))
SIZES = st.sampled_from(["0", "-1", "1", "2", "3", "4", "6", "8", "16", "10000000",
                         str(2**63), str(10**30), "", "eight"])
FLOATS = mix(st.sampled_from(["0", "0.7", "1", "1.3", "0.05"]),
             st.sampled_from(["-0", "-0.5", "1.5", "1e308", "1e-320", "nan", "inf", "-inf",
                              "", "warm"]))
CONTROL = "".join(map(chr, range(0, 32))) + "\x7f"
TEXTS = st.one_of(
    st.sampled_from(["hello", "When you play game", "Hello, I am", "a b c d e f"]),
    st.sampled_from(["", " ", "\n\t ", "-", "--", "--json", "hello", "When you play game",
                     "\x00", "\x1b[31mred\x1b[0m", "\u202eevil", "💥 " * 40, "é" * 500,
                     "word " * 300, "\udcff", "[bold]x[/]", "a\r\nb", "\ufeffbom"]),
    st.text(max_size=40),
    st.text(st.sampled_from(CONTROL + "ab ✓🙂"), max_size=30),
)
GLOBS = mix(st.sampled_from(["*", "logits", "blocks.0.attn.*", "blocks.*.ln1.*",
                              "embed.out", "tokens.ids,logits"]),
            st.sampled_from(["blocks.9.*", "", ",", "[", "**", "ln_f.*", "blocks.-1.*"]))
SITES = mix(st.sampled_from(["embed.out", "blocks.0.resid_pre", "blocks.0.attn.context:h=1",
                             "blocks.0.attn.pattern:p=0", "blocks.0.ffn.out", "ln_f.out",
                             "blocks.1.resid_pre:p=1", "embed.tok,blocks.0.attn.v"]),
            st.sampled_from(["", "bogus", "blocks.9.attn.out", "blocks.0.attn.out:h=0",
                             "embed.out:p=99", "blocks.0.attn.scores", "x:h=", ":",
                             "blocks.0.resid_pre:p=-1", "logits", "blocks.0.attn.k:h=0:h=0",
                             "blocks.0.ln1.var", "tokens.ids"]))
# finite on the command line, but past float32's range once multiplied in (issue 25 item 3)
SCALES = st.one_of(FLOATS, st.sampled_from(["1e30", "-1e30", "3.4e38", "1e20", "4", "-2"]))
DTYPES = mix(st.sampled_from(["float32", "bfloat16", "float16"]),
             st.sampled_from(["float64", "half", "int8", "", "FLOAT32"]))
MODEL_EXTRAS = [("--dtype", DTYPES),
                ("--device", st.sampled_from(["cpu", "cpu", "cuda", "cuda:7", "mps", "", "x"])),
                ("--max-memory", st.sampled_from(["1GB", "64MB", "1kB", "0", "x", "", "-1MB"]))]
TOKENS = mix(st.sampled_from(["win", "you", " a", "e", "die"]),
             st.sampled_from(["", " ", "you win", "\x00", "💥", "zzzzzzzz"]))
SHOW = mix(st.sampled_from(["pattern", "q,k,v", "scores,scaled,masked", "out,concat,context"]),
           st.sampled_from(["q_rot", "bogus", "", ","]))


# every option tfx has, with what it takes (None: a flag)
ANY_OPTIONS = [
    ("--config", st.sampled_from(["toy", "gpt124m", "", "nope"])),
    ("--weights", st.sampled_from(["minilm", "", "nothere"])), ("--seed", INTS),
    ("--heads", SIZES), ("--layers", SIZES), ("--d-model", SIZES), ("--context", SIZES),
    ("--tokenizer", st.sampled_from(["byte", "word", "char", "gpt2", "minilm", ""])),
    ("--corpus", st.sampled_from(["CORPUS", "nothere", ""])),
    ("--encoding", st.sampled_from(["utf-8", "latin-1", ""])), ("--no-cache-weights", None),
    ("--force", None), ("--truncate", None), ("--full", None), ("--precision", INTS),
    ("--layer", SMALL_INTS), ("--head", SMALL_INTS), ("--mask", st.sampled_from(["none", "x"])),
    ("--kv", TEXTS), ("--valid-lens", INTS), ("--show", SHOW), ("--explain", None),
    ("--query-pos", SMALL_INTS), ("--inputs", st.sampled_from(["INPUTS", "nothere"])),
    ("--which", st.sampled_from(["ln1", "ln_f", "x"])), ("--select", GLOBS),
    ("--values", None), ("--length", INTS), ("--temperature", FLOATS), ("--top-k", INTS),
    ("--top-p", FLOATS), ("--candidates", INTS), ("--max-new-tokens", INTS),
    ("--stop", TEXTS), ("--no-cache", None), ("--no-stream", None), ("--ignore-eos", None),
    ("--seq-len", SIZES), ("--tie", None), ("--verify", None),
    ("--show-layers", st.sampled_from(["all", "0", "x"])),
    ("--ablate", SITES), ("--ablate-mode", st.sampled_from(["zero", "mean", "half", ""])),
    ("--steer", SITES), ("--toward", TEXTS), ("--away", TEXTS), ("--scale", FLOATS),
    ("--corrupt", TEXTS), ("--answer", TOKENS), ("--wrong", TOKENS),
    ("--site", st.sampled_from(["resid_pre", "heads", "ffn_out", "neurons", ""])),
    ("--batch", INTS), ("--per-head", None),
    ("--output", st.sampled_from(["OUT/stray.html", "OUT/x.txt"])),
    ("--plot", st.sampled_from(["OUT/stray.txt", "OUT/missing/x.png"])),
]


def text_arg(value: str) -> list:
    # a text that starts with '-' would parse as an option; `--` marks it as the argument
    return ["--", value] if value.startswith("-") and value != "-" else [value]


@st.composite
def model_args(draw, encoder_ok: bool = True):
    base = draw(st.sampled_from(["toy", "toy", "gpt", "llama", "hostile"] if encoder_ok else
                                ["gpt", "gpt", "llama", "hostile"]))
    if base == "toy":
        args = ["-c", "toy"]
    elif base == "gpt":
        args = ["--d-model", "8", "--heads", "2", "--layers", "2", "-t", "byte",
                "--context", "32"]
    elif base == "llama":
        args = ["-c", "LLAMA_CONFIG"]
    else:  # hostile sizes on a small base: fail fast or stay small
        args = ["-t", draw(st.sampled_from(["byte", "char", "word", "gpt2", "nope", ""]))]
        for option in ("--d-model", "--heads", "--layers", "--context"):
            args += [option, draw(SIZES)] if draw(st.booleans()) else []
        if "--d-model" not in args:
            args += ["--d-model", "8", "--heads", "2", "--layers", "1"]
        args += ["-c", draw(st.sampled_from(["toy", "gpt124m", "nope", "", "BADJSON"]))]
    if draw(st.integers(0, 4)) == 0:
        args += ["--seed", draw(INTS)]
    if draw(st.integers(0, 12)) == 0:
        args += ["--force"]
    if draw(st.integers(0, 6)) == 0:
        args += ["--encoding", draw(st.sampled_from(["utf-8", "latin-1", "utf-16", "klingon",
                                                     ""]))]
    if draw(st.integers(0, 8)) == 0:
        args += ["--weights", draw(st.sampled_from(["nothere", "", "minilm", "BADJSON"]))]
    for option, values in MODEL_EXTRAS:
        args += maybe(draw, option, values, 4 if option == "--dtype" else 10)
    return args


def maybe(draw, option: str, values, p: int = 3) -> list:
    """[option, value] about once in p draws."""
    return [option, draw(values)] if draw(st.integers(1, p)) == 1 else []


def flag(draw, name: str, p: int = 3) -> list:
    return [name] if draw(st.integers(1, p)) == 1 else []


@st.composite
def train_args(draw):
    """tfx train on tiny models and a few examples: a handful of steps, learning rates
    that train or diverge, outputs that are fine, taken, nested in nothing or empty. Half
    the runs are sane throughout (so some train to the end), the others have one hostile
    value or more."""
    sane = draw(st.booleans())

    def pick(good, bad):
        return draw(good if sane else mix(good, bad))

    base = draw(st.sampled_from(["toy", "toy", "gpt", "llama"]))
    args = ["train"]
    if base == "toy":
        args += ["-c", "toy"]
        args += pick(st.just(["--pairs", "PAIRS"]), st.sampled_from(
            [["--text", "CORPUS"], ["--pairs", "nothere"], ["--pairs", "CORPUS"], []]))
    else:
        args += (["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2",
                  "--context", "16"] if base == "gpt" else ["-c", "LLAMA_CONFIG"])
        args += pick(st.just(["--text", "CORPUS"]), st.sampled_from(
            [["--pairs", "PAIRS"], ["--text", "nothere"], ["--text", "OUT"], []]))
    args += ["-o", pick(st.sampled_from([f"OUT/trained-{i}" for i in range(60)]),
                        st.sampled_from(["", "OUT", "OUT/missing/sub/t", "PAIRS"]))]
    args += ["--steps", pick(st.sampled_from(["1", "2", "3"]),
                             st.sampled_from(["0", "-1", "x", "", "1.5", "100001"]))]
    if draw(st.booleans()):
        args += ["--lr", pick(st.sampled_from(["0.01", "0.1", "1"]),
                              st.sampled_from(["1e6", "1e30", "0", "-1", "nan", "x"]))]
    if draw(st.integers(0, 3)) == 0:
        args += ["--tokenizer", pick(st.sampled_from(["word", "char"]),
                                     st.sampled_from(["byte", "gpt2", ""]))]
    args += maybe(draw, "--seed", INTS, 6) if not sane else []
    args += flag(draw, "--force", 6)
    return args + (["--json"] if draw(st.booleans()) else [])


@st.composite
def invocations(draw):
    """(argv, stdin bytes or None, whether --json was asked for)."""
    command = draw(st.sampled_from(["tokenize", "embed", "posenc", "attend", "layernorm",
                                    "ffn", "trace", "generate", "next", "lens", "report",
                                    "patch", "attribute", "configs", "count-params",
                                    "train", "train", "bogus"]))
    text = draw(TEXTS)
    wants_json = draw(st.booleans()) and command not in ("report", "bogus")
    if command == "train":
        args = draw(train_args())
        return args, None, "--json" in args

    json_flag = ["--json"] if wants_json else []
    if command != "bogus" and draw(st.integers(0, 3)) == 0:
        # any option of any command, with a value of the right kind or not: it applies
        # (exit 0) or is refused (exit 2), never silently misread
        stray = draw(st.lists(st.sampled_from(ANY_OPTIONS), min_size=1, max_size=2))
        extra = []
        for name, values in stray:
            extra += [name] if values is None else [name, draw(values)]
        return ([command, *extra, *json_flag, *text_arg(draw(TEXTS))], None,
                wants_json and command not in ("report",))
    if command == "configs":
        return [command, *json_flag, *flag(draw, "--verbose", 8)], None, wants_json
    if command == "count-params":
        opts = maybe(draw, "-c", st.sampled_from(["toy", "gpt2-xl", "nope", "", "BADJSON"]))
        for option in ("--heads", "--layers", "--d-model", "--context", "--seq-len"):
            opts += maybe(draw, option, SIZES)
        opts += flag(draw, "--tie") + flag(draw, "--verify", 6)
        return [command, *opts, *json_flag], None, wants_json
    if command == "bogus":
        return [command, *text_arg(text)], None, False
    stdin = None
    if draw(st.integers(0, 5)) == 0:  # the text from standard input, maybe not UTF-8
        text, stdin = "-", draw(st.binary(max_size=40) | TEXTS.map(
            lambda t: t.encode("utf-8", "surrogatepass")))
    # options first: after `--` (for a text starting with '-') everything is the text
    text_args = text_arg(text) if command != "posenc" or draw(st.booleans()) else []
    if command == "tokenize":
        opts = maybe(draw, "-t", st.sampled_from(["byte", "char", "word", "gpt2", "", "x"]))
        opts += maybe(draw, "-c", st.sampled_from(["toy", "gpt124m", "", "nope"]), 4)
        opts += maybe(draw, "-w", st.sampled_from(["minilm", "nothere", "", "BADJSON"]), 4)
        opts += maybe(draw, "--corpus", st.sampled_from(["CORPUS", "nothere", ""]), 5)
        opts += flag(draw, "--full", 6)
        return [command, *opts, *json_flag, *text_args], stdin, wants_json
    opts = draw(model_args(encoder_ok=command not in ("generate", "next", "lens", "patch",
                                                      "attribute")))
    opts += flag(draw, "--truncate", 4)
    if command in ("attend", "trace", "generate", "next", "lens", "report", "patch"):
        opts += maybe(draw, "--ablate", SITES, 4)
        opts += maybe(draw, "--ablate-mode", st.sampled_from(["zero", "mean", "x"]), 8)
    if command in ("trace", "generate", "next") and draw(st.integers(0, 2)) == 0:
        for _ in range(draw(st.integers(1, 3))):  # --steer may repeat, each with its pair
            opts += ["--steer", draw(SITES)] + maybe(draw, "--toward", TEXTS, 2)
            opts += maybe(draw, "--away", TEXTS, 2) + maybe(draw, "--scale", SCALES, 2)
    if command == "patch":
        opts += maybe(draw, "--corrupt", TEXTS, 1) + maybe(draw, "--answer", TOKENS, 1)
        opts += maybe(draw, "--wrong", TOKENS, 1)
        opts += maybe(draw, "--site", st.sampled_from(["resid_pre", "attn_out", "ffn_out",
                                                       "heads", "x"]), 2)
        opts += maybe(draw, "--batch", INTS, 4)
    if command == "attribute":
        opts += maybe(draw, "--answer", TOKENS, 1) + maybe(draw, "--wrong", TOKENS, 2)
        opts += flag(draw, "--per-head", 2)
    if command == "posenc":
        opts += maybe(draw, "--length", INTS, 2)
    elif command == "attend":
        opts += maybe(draw, "--layer", SMALL_INTS) + maybe(draw, "--head", SMALL_INTS)
        opts += maybe(draw, "--mask", st.sampled_from(["causal", "none", "both", ""]), 4)
        opts += maybe(draw, "--kv", TEXTS, 5) + maybe(draw, "--valid-lens", INTS, 5)
        opts += maybe(draw, "--show", SHOW, 3) + flag(draw, "--explain")
        opts += maybe(draw, "--query-pos", SMALL_INTS, 4)
    elif command in ("layernorm", "ffn"):
        opts += maybe(draw, "--layer", SMALL_INTS)
        if command == "layernorm":
            opts += maybe(draw, "--which", st.sampled_from(["ln1", "ln2", "ln_f", "embed",
                                                            "ln3"]))
    elif command == "trace":
        opts += maybe(draw, "--select", GLOBS, 2) + flag(draw, "--values")
    elif command in ("generate", "next"):
        opts += maybe(draw, "--temperature", FLOATS) + maybe(draw, "--top-k", INTS, 4)
        opts += maybe(draw, "--top-p", FLOATS, 4) + maybe(draw, "--candidates", INTS, 4)
        if command == "generate":
            opts += ["-n", draw(mix(st.sampled_from(["1", "3"]),
                                    st.sampled_from(["-1", "0", "x", ""])))]
            opts += maybe(draw, "--stop", TEXTS, 4) + maybe(draw, "--select", GLOBS, 5)
            opts += flag(draw, "--no-cache", 4)
    elif command == "report":
        opts += ["-o", draw(mix(st.just("OUT/page.html"),
                                st.sampled_from(["OUT/page.txt", "OUT", "OUT/missing/p.html",
                                                 ""])))]
        opts += maybe(draw, "--show-layers", st.sampled_from(["all", "0", "0-1", "1-0", "9",
                                                              "", "x", "-1", "0,0"]), 2)
        opts += maybe(draw, "--candidates", INTS, 4) + flag(draw, "--force", 2)
        opts += flag(draw, "--json", 3)
    if command != "report":
        opts += maybe(draw, "--precision", INTS, 5) + json_flag
        opts += flag(draw, "--full", 8) if command != "next" else []
    return [command, *opts, *text_args], stdin, wants_json


# -- the test ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def places(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "llama.json").write_text(json.dumps(LLAMA_CONFIG_DATA), encoding="utf-8")
    (root / "bad.json").write_text('{"d_model": 8,', encoding="utf-8")
    (root / "out").mkdir()
    (root / "corpus.txt").write_text("you win or you die", encoding="utf-8")
    (root / "pairs.tsv").write_text("you play\tyou win\nyou lose\tyou die\n", encoding="utf-8")
    (root / "inputs.json").write_text('{"x": [[1, 0], [0, 1]], "w_q": [[1], [0]], '
                                      '"w_k": [[1], [0]], "w_v": [[1], [0]]}', encoding="utf-8")
    return {"LLAMA_CONFIG": str(root / "llama.json"), "BADJSON": str(root / "bad.json"),
            "OUT": str(root / "out"), "CORPUS": str(root / "corpus.txt"),
            "INPUTS": str(root / "inputs.json"), "PAIRS": str(root / "pairs.tsv")}


LLAMA_CONFIG_DATA = LLAMA_LIKE


def refused_in_one_line(args: list, result) -> bool:
    """Whether a CliRunner result is a refusal (exit 1 or 2), checked to be one
    `tfx: error:` line on stderr and nothing on stdout; an exit 0 returns False. Any other
    exit, a traceback, an internal error or an exception that escaped fails."""
    err = result.stderr
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, err)
    assert "Traceback" not in err and "internal error" not in err, (args, err)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError((args, repr(result.exception)))
    if result.exit_code == 0:
        return False
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error: "), (args, err)
    assert result.stdout == "", (args, result.stdout[:200])
    return True


def _no_constants(name):
    raise ValueError(f"{name} in JSON output")


def substitute(args: list, places: dict) -> list:
    out = []
    for arg in args:
        for key, value in places.items():
            arg = arg.replace(key, value) if arg.startswith(key) else arg
        out.append(arg)
    return out


# The 500 invocations of a run: most through the CLI, the rest through the API.
TOTAL = int(os.environ.get("TFX_FUZZ_EXAMPLES", "500"))
# the same draws on every run (a failure reproduces); TFX_FUZZ_SEED=N for other ones
SEED = int(os.environ.get("TFX_FUZZ_SEED", "25"))
API_SHARE = 0.2
FUZZ = dict(deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
# NaN, or +inf, written in a view ("-inf" is a masked score, by design)
NAN_WORD = re.compile(r"(?<![\w-])(nan|inf)(?![\w-])")


def _trained_folder(args: list):
    """The folder a train run was told to write, or None."""
    if args[0] != "train" or "-o" not in args:
        return None
    return args[args.index("-o") + 1] or None


@seed(SEED)
@settings(max_examples=TOTAL - int(TOTAL * API_SHARE), **FUZZ)
@given(invocations())
def test_fuzz_cli(places, drawn):
    args, stdin, wants_json = drawn
    args = substitute(args, places)
    folder = _trained_folder(args)
    existed = folder is not None and os.path.exists(folder)
    result = CliRunner().invoke(app, args, input=stdin,
                                env={"TFX_QUIET": "1", "COLUMNS": "100", "NO_COLOR": "1"})
    event(f"{args[0]} exit {result.exit_code}")
    err = result.stderr
    if refused_in_one_line(args, result):
        if folder is not None and not existed:  # a refused or diverged train writes nothing
            assert not os.path.exists(folder), (args, err)
        return
    assert len(err.splitlines()) <= 3, (args, err)  # a warning or two at most
    # a checkpoint brings its tokenizer: no run may read its weights with another one
    names = set(args)
    assert not ({"-w", "--weights"} & names and {"-t", "--tokenizer"} & names), args
    if wants_json:
        json.loads(result.stdout, parse_constant=_no_constants)
    elif not NAN_WORD.search(" ".join(args)):  # no 'nan' the user typed, shown back
        assert not NAN_WORD.search(result.stdout), (args, result.stdout)


# -- the Python API: every keyword, values of every type ---------------------------------
class Odd:
    """Something no option takes."""

    def __repr__(self):
        return "Odd()"


ANYTHING = st.sampled_from([None, 0, 1, -1, 2.5, float("nan"), float("inf"), True, "", "x",
                            b"\xff", [], [None], {}, {"a": 1}, Odd(), (1, 2), 10**30])
NUMPY = st.sampled_from(["int64", "float32", "bool_"]).flatmap(
    lambda kind: st.sampled_from([0, 1, 4]).map(lambda v: getattr(np, kind)(v)))
API_TEXTS = st.one_of(st.sampled_from(["hello", "When you play game", "you win"]),
                      st.sampled_from(["", b"hello", b"caf\xe9", "💥", " ", "-"]), ANYTHING)
API_SITES = st.one_of(SITES, st.lists(SITES, max_size=3), ANYTHING)
API_VALUES = {
    "ablate": API_SITES, "ablate_mode": st.sampled_from(["zero", "mean", "x", None, 3]),
    "steer": API_SITES, "toward": st.one_of(TOKENS, st.lists(TOKENS, max_size=3), ANYTHING),
    "away": st.one_of(TOKENS, st.lists(TOKENS, max_size=3), ANYTHING),
    "scale": st.one_of(SCALES, st.lists(SCALES, max_size=3), NUMPY, ANYTHING),
    "select": st.one_of(GLOBS, st.lists(GLOBS, max_size=2), ANYTHING),
    "truncate": st.one_of(st.booleans(), NUMPY, ANYTHING),
    "temperature": st.one_of(FLOATS, NUMPY, ANYTHING), "top_k": st.one_of(INTS, ANYTHING),
    "candidates": st.one_of(INTS, NUMPY, ANYTHING), "max_new_tokens": st.one_of(
        st.sampled_from([1, 2, "2", 0, -1]), NUMPY, ANYTHING),
    "layer": st.one_of(SMALL_INTS, NUMPY, ANYTHING), "head": st.one_of(SMALL_INTS, ANYTHING),
    "dtype": st.one_of(DTYPES, ANYTHING), "device": st.sampled_from(["cpu", None, "cuda", 0,
                                                                    "x"]),
    "seed": st.one_of(INTS, NUMPY, ANYTHING), "max_memory": st.sampled_from(
        ["1GB", "1kB", None, 0, 10**12, "x"]),
    "corrupt": API_TEXTS, "answer": st.one_of(TOKENS, ANYTHING),
    "wrong": st.one_of(TOKENS, ANYTHING),
    "site": st.sampled_from(["resid_pre", "heads", "ffn_out", "x", None, 1]),
    "batch": st.one_of(st.sampled_from([1, 4, "2"]), ANYTHING),
    "per_head": st.one_of(st.booleans(), ANYTHING),
}
API_FUNCTIONS = {
    "next": ["ablate", "ablate_mode", "steer", "toward", "away", "scale", "truncate",
             "temperature", "top_k", "candidates"],
    "trace": ["select", "ablate", "steer", "toward", "away", "scale", "truncate"],
    "generate": ["max_new_tokens", "temperature", "steer", "toward", "away", "scale",
                 "ablate"],
    "lens": ["ablate", "truncate"],
    "attend": ["layer", "head", "ablate", "truncate"],
    "layernorm": ["layer", "truncate"], "ffn": ["layer", "truncate"],
    "patch": ["corrupt", "answer", "wrong", "site", "batch", "ablate"],
    "attribute": ["answer", "wrong", "per_head"],
}
API_MODEL = dict(config="gpt124m", layers=2, d_model=16, heads=2, tokenizer="byte",
                 context=32)


@st.composite
def api_calls(draw):
    """(function name, text, keywords): the model's keywords always, a few of the
    function's own, and now and then a model keyword with an odd value."""
    name = draw(st.sampled_from(sorted(API_FUNCTIONS)))
    kwargs = dict(API_MODEL)
    if name == "patch":
        kwargs.update(corrupt="jello", answer="o", wrong="x")
    elif name == "attribute":
        kwargs.update(answer="o")
    for key in draw(st.lists(st.sampled_from(API_FUNCTIONS[name]), max_size=4, unique=True)):
        kwargs[key] = draw(API_VALUES[key])
    for key in ("dtype", "device", "seed", "max_memory"):
        if draw(st.integers(0, 7)) == 0:
            kwargs[key] = draw(API_VALUES[key])
    return name, draw(API_TEXTS), kwargs


def _finite_numbers(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite_numbers(v) for v in value)
    return True


@seed(SEED)
@settings(max_examples=int(TOTAL * API_SHARE), **FUZZ)
@given(api_calls())
def test_fuzz_api(drawn):
    """A result whose document holds only finite numbers, or a tfx_cli.errors error the
    CLI would print (exit 2, or 1 for a runtime failure): never a TypeError,
    AttributeError or any other exception."""
    name, text, kwargs = drawn
    call = getattr(api, name)
    try:
        result = call(text, **kwargs)
    except TfxError as exc:
        event(f"api.{name} {type(exc).__name__}")
        assert exc.exit_code in (1, 2) and exc.message and "\n" not in exc.message, exc
        return
    event(f"api.{name} ok")
    doc = result.to_dict()
    assert _finite_numbers(doc), (name, text, kwargs)
    json.dumps(doc, allow_nan=False)
