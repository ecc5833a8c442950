"""Fuzzing the CLI: random commands, options and hostile values through CliRunner.

Whatever is typed, tfx must answer with exit 0 or a one-line `tfx: error: ...` (exit 2
for bad input; exit 1 only for real runtime failures, never an "internal error"), never
a traceback, nothing on stdout when it fails, and valid JSON (no NaN) with --json.

Models stay cheap (the toy encoder, an 8-wide GPT on bytes, a Llama-like 8-wide config)
and sizes are either small or far past a limit, so every example runs in milliseconds.
Hostile sizes that are legal but slow (a million new tokens, --plot's drawing) are left
to their own tests. `pytest --hypothesis-show-statistics` shows what was drawn.
"""
import json
import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tfx_cli.cli import app

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
    return args


def maybe(draw, option: str, values, p: int = 3) -> list:
    """[option, value] about once in p draws."""
    return [option, draw(values)] if draw(st.integers(1, p)) == 1 else []


def flag(draw, name: str, p: int = 3) -> list:
    return [name] if draw(st.integers(1, p)) == 1 else []


@st.composite
def invocations(draw):
    """(argv, stdin bytes or None, whether --json was asked for)."""
    command = draw(st.sampled_from(["tokenize", "embed", "posenc", "attend", "layernorm",
                                    "ffn", "trace", "generate", "next", "lens", "report",
                                    "patch", "attribute", "configs", "count-params",
                                    "bogus"]))
    text = draw(TEXTS)
    wants_json = draw(st.booleans()) and command not in ("report", "bogus")

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
    if command in ("trace", "generate", "next") and draw(st.integers(0, 4)) == 0:
        opts += ["--steer", draw(SITES)] + maybe(draw, "--toward", TEXTS, 2)
        opts += maybe(draw, "--away", TEXTS, 2) + maybe(draw, "--scale", FLOATS, 2)
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
    (root / "inputs.json").write_text('{"x": [[1, 0], [0, 1]], "w_q": [[1], [0]], '
                                      '"w_k": [[1], [0]], "w_v": [[1], [0]]}', encoding="utf-8")
    return {"LLAMA_CONFIG": str(root / "llama.json"), "BADJSON": str(root / "bad.json"),
            "OUT": str(root / "out"), "CORPUS": str(root / "corpus.txt"),
            "INPUTS": str(root / "inputs.json")}


LLAMA_CONFIG_DATA = LLAMA_LIKE


def _no_constants(name):
    raise ValueError(f"{name} in JSON output")


def substitute(args: list, places: dict) -> list:
    out = []
    for arg in args:
        for key, value in places.items():
            arg = arg.replace(key, value) if arg.startswith(key) else arg
        out.append(arg)
    return out


# 500 in CI (about 25 s here); TFX_FUZZ_EXAMPLES=20000 for a long hunt
@settings(max_examples=int(os.environ.get("TFX_FUZZ_EXAMPLES", "500")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(invocations())
def test_fuzz_cli(places, drawn):
    args, stdin, wants_json = drawn
    args = substitute(args, places)
    result = CliRunner().invoke(app, args, input=stdin,
                                env={"TFX_QUIET": "1", "COLUMNS": "100", "NO_COLOR": "1"})
    event(f"{args[0]} exit {result.exit_code}")
    err = result.stderr
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, err)
    assert "Traceback" not in err and "internal error" not in err, (args, err)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError((args, repr(result.exception)))
    if result.exit_code != 0:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("tfx: error: "), (args, err)
        assert result.stdout == "", args
        return
    assert len(err.splitlines()) <= 3, (args, err)  # a warning or two at most
    # a checkpoint brings its tokenizer: no run may read its weights with another one
    names = set(args)
    assert not ({"-w", "--weights"} & names and {"-t", "--tokenizer"} & names), args
    if wants_json:
        json.loads(result.stdout, parse_constant=_no_constants)
