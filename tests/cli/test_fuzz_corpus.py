"""Fuzzing the corpus, SAE, mixture-of-experts and config surfaces: scan, top, collect,
patch --pairs, features, train-sae, route and count-params --config, through CliRunner
and through tfx_cli.api, every option and keyword with values sane and hostile.

The properties (as in test_fuzz.py, plus one about folders):
- the CLI ends with exit 0, or with one line `tfx: error: ...` on stderr, nothing on
  stdout and exit 1 or 2, never "internal error" or a traceback;
- the API returns a result, or raises a tfx_cli.errors.TfxError with a one-line message:
  any other exception (TypeError, ZeroDivisionError, ...) fails;
- an exit-0 answer holds no NaN or infinity (JSON, text, or the API's to_dict());
- a refused run leaves no output folder (-o, --html, --plot) that was not there before.

Models stay tiny (a 1-layer 16-wide GPT on bytes, tiny-moe, an 8-wide Llama-like config,
the toy encoder–decoder); corpora of a few lines, a collect folder and an SAE made once.
TFX_FUZZ_SEED picks the draws (25), TFX_FUZZ_EXAMPLES their number (500: 300 CLI, 200
API); `pytest --hypothesis-show-statistics` shows them.
"""
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, seed, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.errors import TfxError

from test_fuzz import FUZZ, NAN_WORD, SEED, TOTAL, _no_constants, refused_in_one_line  # noqa: E402 (this folder is on sys.path)
from fuzz_corpus_places import CONFIG_EDITS, GPT_KW, SITE, config_text, make_places

API_SHARE = 0.4  # the run's count, seed, settings and NaN words are test_fuzz.py's

GPT = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2", "-t", "byte",
       "--context", "32"]


# Half the invocations are sane throughout (so that many run to the end and their answers
# are checked), the others draw a hostile value a third of the time.
SANE = [False]


@st.composite
def sane_or_not(draw):
    SANE[0] = draw(st.booleans())
    return SANE[0]


@st.composite
def mix(draw, sane, hostile):
    return draw(sane if SANE[0] or draw(st.integers(0, 2)) < 2 else hostile)


pick = st.sampled_from


HUGE = [str(2**63), str(10**30), "1e30"]
HOSTILE_INT = pick(["0", "-1", "x", "", "1.5", "nan", "inf", "٣", *HUGE])
HOSTILE_FLOAT = pick(["0", "-1", "-0", "nan", "inf", "-inf", "1e30", "1e-320", "x", ""])
CTX = mix(pick(["8", "16", "32"]), HOSTILE_INT | pick(["33", "100000", "1"]))
DATASET = [("--field", mix(pick(["text"]), pick(["body", "", "x", "text,body"]))),
           ("--max-docs", mix(pick(["1", "2", "3"]), HOSTILE_INT)),
           ("--max-tokens", mix(pick(["20", "60", "500"]), HOSTILE_INT)),
           ("--ctx", CTX), ("--batch-size", mix(pick(["1", "2", "8"]), HOSTILE_INT)),
           ("--verbose", None)]
RAY_ONLY = st.tuples(pick(["--workers", "--gpus-per-worker", "--ray-address"]),
                     pick(["1", "0", "-1", "nan", "x", "", "nohost:1"]))
# a Ray run is drawn only with a value its engine refuses before a runtime starts
RAY_REFUSED = pick([["--workers", "0"], ["--workers", "-1"], ["--gpus-per-worker", "-1"],
                    ["--ray-address", ""]])
SOURCES = mix(pick(["CORPUS", "JSONL", "CORPUS", "FOLDER"]),
              pick(["nothere.txt", "", "OUT", "BINARY", "EMPTY", "ODDJSONL", "BOMTXT",
                    "repeated-tokens", "ACTS", "x.parquet"]))
OUTPUTS = mix(pick(["FRESH"]), pick(["TAKEN", "AFILE", "OUT/missing/sub/x", "", "CORPUS"]))
SAES = mix(pick(["SAE"]), pick(["nothere", "", "AFILE", "OUT", "BADSAE", "ACTS"]))
SAE_SITES = mix(pick([SITE]), pick(["", "bogus", "blocks.9.resid_out", "blocks.0.hook_resid_post",
                                    "logits", "blocks.*.resid_out"]))
SITES = mix(pick(["blocks.0.ffn.act", SITE, "blocks.0.attn.context", "embed.out"]),
            pick(["", "bogus", "blocks.9.ffn.act", "logits", "blocks.*.ffn.act", ",",
                  "blocks.0.attn.pattern", "blocks.0.ln1.var"]))
UNITS = mix(pick(["0", "0,1", "0:4", "3"]),
            pick(["", "x", "-1", "0:0", "5:2", "1.5", "99999", "0:100000000", ",", "0,0"]))
SEVEN = ",".join(f"blocks.2.moe.expert:e={e}" for e in range(7))  # of tiny-moe's 8
ABLATE = mix(pick(["blocks.0.attn.out", "blocks.0.ffn.out:p=0", "blocks.1.moe.expert:e=0",
                   "blocks.0.moe.expert:e=3", SEVEN, SEVEN + ",blocks.2.moe.expert:e=7"]),
             pick(["", "bogus", "blocks.0.moe.expert:e=99", "blocks.0.moe.expert:e=-1",
                   "blocks.0.moe.expert", "blocks.0.moe.expert:e=x", "features.3"]))
TEXTS = mix(pick(["hello", "you win or you die", "a b c"]),
            pick(["", " ", "\x00", "💥" * 30, "word " * 200, "\ufeffbom", "-"]))
PRECISION = [("--precision", mix(pick(["0", "3"]), pick(["-1", "13", "x"])))]


def rare(draw, n: int) -> bool:
    """True about once in n draws (on the draw Hypothesis reaches for last)."""
    return draw(st.integers(0, n - 1)) == n - 1


def text_arg(value: str) -> list:
    return ["--", value] if value.startswith("-") and value != "-" else [value]


@st.composite
def model(draw, moe: bool = False):
    kind = draw(pick(["gpt", "gpt", "moe", "llama", "toy", "hostile"] if not moe else
                     ["moe", "moe", "moe", "gpt", "hostile"]))
    if SANE[0]:
        kind = "moe" if moe else ("gpt" if kind in ("toy", "hostile", "moe") else kind)
    if kind == "gpt":
        args = list(GPT)
    elif kind == "moe":
        args = ["-c", "tiny-moe"]
    elif kind == "llama":
        args = ["-c", "LLAMA_CONFIG"]
    elif kind == "toy":
        args = ["-c", "toy"]
    else:
        args = ["-c", draw(pick(["gpt124m", "tiny-moe", "BADJSON", "nope", ""])),
                "--layers", "1", "-t", "byte"]
        for option in ("--d-model", "--heads", "--context"):
            args += [option, draw(pick(["0", "-1", "3", "16", "x", str(2**63)]))]
    if rare(draw, 7) and not SANE[0]:
        args += [draw(pick(["--seed", "--dtype", "--device", "--max-memory"])),
                 draw(pick(["0", "-1", "bfloat16", "float16", "cuda", "1kB", "x", ""]))]
    return args


def options(draw, pool, most: int = 3) -> list:
    out = []
    for name, values in draw(st.lists(pick(pool), max_size=most, unique_by=lambda p: p[0])):
        out += [name] if values is None else [name, draw(values)]
    return out


def engine(draw) -> list:
    choice = draw(st.integers(0, 9)) if not SANE[0] else 0
    if choice == 9:
        return ["--engine", "ray", *draw(RAY_REFUSED)]
    if choice == 8:
        return ["--engine", draw(pick(["", "x", "Ray", "local "]))]
    if choice == 7:  # an option of the ray engine given to the local one
        return list(draw(RAY_ONLY))
    return ["--engine", "local"] if choice == 6 else []


def output(draw, option="-o", p=2) -> list:
    return [option, draw(OUTPUTS)] if rare(draw, p) else []


@st.composite
def corpus_command(draw):
    command = draw(pick(["scan", "top", "top", "collect"]))
    args = [command, *text_arg(draw(SOURCES)), *draw(model())]
    args += options(draw, DATASET) + engine(draw) + (["--force"] if draw(st.booleans()) else [])
    if command == "scan":
        args += output(draw) + options(draw, PRECISION + [("--full", None)], 2)
        if rare(draw, 3):
            args += ["--plot", draw(mix(pick(["OUT/FRESH.png", "OUT/FRESH.svg"]),
                                        pick(["OUT/FRESH.txt", "OUT/missing/p.png"])))]
    elif command == "top":
        if rare(draw, 4):
            args += ["--sae", draw(SAES)] + (["--sae-site", draw(SAE_SITES)]
                                             if rare(draw, 4) else [])
        if not rare(draw, 8):
            args += ["--site", draw(SITES)]
        args += options(draw, [("--units", UNITS), ("-k", mix(pick(["1", "3"]), HOSTILE_INT)),
                               ("--around", mix(pick(["0", "2", "8"]), HOSTILE_INT)),
                               ("--full", None)] + PRECISION)
        args += output(draw, p=3)
        if rare(draw, 5):
            args += ["--html", draw(mix(pick(["OUT/FRESH.html"]),
                                        pick(["OUT/FRESH.txt", "OUT/missing/x.html", "AFILE",
                                              ""])))]
    else:
        args += ["-s", draw(mix(pick([SITE, "blocks.*.resid_out", "embed.out,blocks.0.ffn.act"]),
                                pick(["", "bogus", "*", ",", "logits", "blocks.0.attn.pattern"])))]
        args += output(draw, p=8) if rare(draw, 10) else ["-o", draw(OUTPUTS)]
        args += options(draw, [("--shard-tokens", mix(pick(["4", "16"]), HOSTILE_INT))], 1)
    return args + (["--json"] if draw(st.booleans()) else [])


@st.composite
def model_command(draw):
    command = draw(pick(["patch", "features", "features", "route", "route"]))
    if command == "patch":
        args = ["patch", "--pairs", draw(mix(pick(["PAIRS"]), pick(
            ["BADPAIRS", "nothere.jsonl", "CORPUS", "EMPTY", "", "BINARY", "OUT"])))]
        args += draw(model()) + engine(draw)
        args += options(draw, [("--site", mix(pick(["resid_pre", "heads", "ffn_out"]), pick(
            ["features", "attn_out", "x", ""]))), ("--batch", mix(pick(["1", "4"]), HOSTILE_INT)),
            ("--truncate", None), ("--ablate", ABLATE), ("--sae", SAES)] + PRECISION)
    elif command == "features":
        args = ["features", *draw(model()), *options(draw, [
            ("--sae", SAES), ("--sae-site", SAE_SITES),
            ("--per-token", mix(pick(["1", "5"]), HOSTILE_INT)), ("--truncate", None),
            ("--full", None)] + PRECISION, 4)]
        args += [] if "--sae" in args or rare(draw, 10) else ["--sae", "SAE"]
        args += text_arg(draw(TEXTS))
    else:
        args = ["route", *draw(model(moe=True))]
        for _ in range(draw(st.integers(0, 3))):
            args += ["--ablate", draw(ABLATE)]
        args += options(draw, [("--ablate-mode", pick(["zero", "mean", "x", ""])),
                               ("--truncate", None), ("--full", None)] + PRECISION)
        if rare(draw, 10):
            args += ["--plot", draw(pick(["OUT/FRESH.png", "OUT/FRESH.txt"]))]
        args += text_arg(draw(TEXTS))
    return args[:1] + (["--json"] if draw(st.booleans()) else []) + args[1:]


TRAIN_SAE = [("--k", mix(pick(["1", "4"]), HOSTILE_INT)),
             ("--latents", mix(pick(["8", "32"]), HOSTILE_INT)),
             ("--expansion", mix(pick(["0.5", "2"]), HOSTILE_FLOAT)),
             ("--l1", mix(pick(["0.01", "1"]), HOSTILE_FLOAT)),
             ("--lr", mix(pick(["0.001", "0.01"]), HOSTILE_FLOAT)),
             ("--epochs", mix(pick(["0.5", "1"]), HOSTILE_FLOAT)),
             ("--seed", mix(pick(["0", "7"]), HOSTILE_INT | pick([str(2**64 - 1)]))),
             ("--holdout", mix(pick(["0.1", "0.5"]), HOSTILE_FLOAT | pick(["1", "0.999"]))),
             ("--skip-first", mix(pick(["0", "1"]), HOSTILE_INT | pick(["32", "31"]))),
             ("--b-dec-init", pick(["median", "mean", "zeros", "x", ""])),
             ("--dead-after", mix(pick(["1", "100"]), HOSTILE_INT)),
             ("--aux-k", mix(pick(["0", "2"]), HOSTILE_INT)),
             ("--aux-coef", mix(pick(["0.03", "0"]), HOSTILE_FLOAT)),
             ("--force", None)] + PRECISION


@st.composite
def train_sae_command(draw):
    args = ["train-sae", draw(mix(pick(["ACTS"]), pick(["nothere", "", "CORPUS", "OUT",
                                                         "SAE", "FOLDER"])))]
    args += ["--site", draw(mix(pick([SITE]), pick(["", "bogus", "blocks.0.ffn.act"])))]
    args += ["-o", draw(OUTPUTS)] if not rare(draw, 10) else []
    args += ["--steps", draw(mix(pick(["1", "3"]), HOSTILE_INT))] if not rare(draw, 5) else []
    args += ["--batch-size", draw(mix(pick(["4", "16"]), HOSTILE_INT | pick(["100000"])))]
    args += options(draw, TRAIN_SAE, 4)
    if "--latents" not in args and "--expansion" not in args:
        args += ["--latents", "32"]  # the default 4096 is slow on a CPU shared by many
    if "--steps" not in args and "--epochs" not in args:
        args += ["--steps", "2"]
    return args + (["--json"] if draw(st.booleans()) else [])


@st.composite
def count_params_command(draw):
    edit = draw(CONFIG_EDITS)
    args = ["count-params", "-c", "CONFIGFILE"]
    args += options(draw, [("--tie", None), ("--no-tie", None), ("--verify", None),
                           ("--seq-len", mix(pick(["16", "128"]), HOSTILE_INT | pick(["129"]))),
                           ("--vocab-size", mix(pick(["100"]), HOSTILE_INT)),
                           ("--heads", mix(pick(["2", "4"]), HOSTILE_INT)),
                           ("--layers", mix(pick(["1"]), HOSTILE_INT)),
                           ("--d-model", mix(pick(["32"]), HOSTILE_INT | pick(["30"]))),
                           ("--context", mix(pick(["64"]), HOSTILE_INT))])
    return args + (["--json"] if draw(st.booleans()) else []), edit


@st.composite
def cli_invocations(draw):
    """(argv, the config edit for count-params or None)."""
    draw(sane_or_not())
    which = draw(st.integers(0, 9))
    if which < 4:
        return draw(corpus_command()), None
    if which < 7:
        return draw(model_command()), None
    if which < 9:
        return draw(train_sae_command()), None
    return draw(count_params_command())


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    return {k: str(v) for k, v in make_places(tmp_path_factory.mktemp("fuzzc")).items()}


FRESH = itertools.count()


def substitute(args: list, places: dict) -> list:
    out = []
    for arg in args:
        if "FRESH" in arg:
            arg = arg.replace("FRESH", places["OUT"] + f"/fresh-{next(FRESH)}"
                              if arg == "FRESH" else f"fresh-{next(FRESH)}")
        for key in sorted(places, key=len, reverse=True):
            if arg.startswith(key):
                arg = places[key] + arg[len(key):]
                break
        out.append(arg)
    return out


def written(args: list) -> list:
    """The files and folders a run was told to write."""
    return [args[i + 1] for i, a in enumerate(args[:-1])
            if a in ("-o", "--output", "--html", "--plot") and args[i + 1]]


def new_paths(paths: list) -> dict:
    """Each path -> its parents and itself that do not exist yet."""
    return {p: [q for q in (Path(p), *Path(p).parents) if not q.exists()] for p in paths}


def left_behind(before: dict) -> list:  # of what new_paths found missing
    return [str(q) for qs in before.values() for q in qs if q.exists()]


# -- the CLI ------------------------------------------------------------------------------
def check_cli(args: list, result, before: dict) -> None:
    err = result.stderr
    if refused_in_one_line(args, result):
        assert not left_behind(before), (args, err, left_behind(before))
        return
    assert len(err.splitlines()) <= 3, (args, err)
    if "--json" in args:
        doc = json.loads(result.stdout, parse_constant=_no_constants)
        assert _finite(doc), args
        if args[0] == "route":
            assert_removed_unused([a for i, a in enumerate(args) if args[i - 1] == "--ablate"],
                                  doc["result"])
    elif not NAN_WORD.search(" ".join(args)):
        assert not NAN_WORD.search(result.stdout), (args, result.stdout[-2000:])


@seed(SEED)
@settings(max_examples=TOTAL - int(TOTAL * API_SHARE), **FUZZ)
@given(cli_invocations())
def test_fuzz_cli_corpus_sae_moe_config(places, tmp_path_factory, drawn):
    args, edit = drawn
    args = substitute(args, places)
    if edit is not None:
        config = tmp_path_factory.mktemp("cfg") / "config.json"
        config.write_text(config_text(edit), encoding="utf-8")
        args = [str(config) if a == "CONFIGFILE" else a for a in args]
    before = new_paths(written(args))
    result = CliRunner().invoke(app, args, env={"TFX_QUIET": "1", "COLUMNS": "100",
                                                "NO_COLOR": "1"})
    event(f"{args[0]} exit {result.exit_code}")
    check_cli(args, result, before)


# -- the Python API: every keyword, values of every type ---------------------------------
class Odd:
    """Something no keyword takes."""

    def __repr__(self):
        return "Odd()"


ANYTHING = pick([None, 0, 1, -1, 2.5, float("nan"), float("inf"), float("-inf"), 1e30,
                 10**30, True, "", "x", b"\xff", b"2", [], [None], [1.5], {}, {"a": 1},
                 Odd(), (1, 2), np.int64(3), np.float32("nan"), np.bool_(True),
                 np.float64(0.5), Path("nothere"), object])
NUMPY = pick(["int64", "int8", "float32", "float64"]).flatmap(
    lambda kind: pick([0, 1, 2, -1]).map(lambda v: getattr(np, kind)(v)))


def api_mix(*sane):
    return mix(pick(list(sane)), st.one_of(ANYTHING, NUMPY))


PATHS = pick(["CORPUS", "JSONL", "FOLDER", "nothere.txt", "AFILE", "BINARY", "OUT", "EMPTY",
              "ODDJSONL", "ACTS", "SAE", "BADSAE", "TAKEN", "repeated-tokens"])
OUT_PATHS = pick(["FRESH", "FRESH", "TAKEN", "AFILE", "OUT/missing/sub/x", "CORPUS"])
# a keyword -> its values: sane ones, placeholders (PATH:..., OUTPUT:...), anything at all
API_VALUES = {
    "field": api_mix("text", "body"), "max_docs": api_mix(1, 2, "2"),
    "max_tokens": api_mix(20, 60), "ctx": api_mix(8, 16, 32), "batch_size": api_mix(1, 4, 8),
    "verbose": api_mix(False, True), "ray_address": api_mix(None, ""),
    "site": api_mix("blocks.0.ffn.act", SITE, "blocks.0.attn.context", "bogus"),
    "units": api_mix("0,1", "0:4", [0, 1], (2,), [1.5], [1.9, 1], {"a": 1}, range(3)),
    "k": api_mix(1, 3), "around": api_mix(0, 2), "unit_map": api_mix(None),
    "sae_site": api_mix(SITE, "blocks.0.hook_resid_post"),
    "select": api_mix(SITE, [SITE], "blocks.*.resid_out", ["embed.out", SITE]),
    "shard_tokens": api_mix(4, 16), "per_token": api_mix(1, 5), "truncate": api_mix(False),
    "ablate": api_mix("blocks.0.attn.out", ["blocks.1.moe.expert:e=0"],
                      ["blocks.0.moe.expert:e=0", "blocks.0.moe.expert:e=1"]),
    "ablate_mode": api_mix("zero", "mean"), "batch": api_mix(1, 4),
    "latents": api_mix(8, 16), "expansion": api_mix(0.5, 2.0), "l1": api_mix(0.01),
    "lr": api_mix(1e-3, 0.01), "steps": api_mix(1, 2), "epochs": api_mix(0.5, 1),
    "seed": api_mix(0, 7, 2**64 - 1), "holdout": api_mix(0.1, 0.5), "skip_first": api_mix(0, 1),
    "b_dec_init": api_mix("median", "mean", "zeros"), "dead_after": api_mix(1, 100),
    "aux_k": api_mix(0, 2), "aux_coef": api_mix(0.03, 0.0), "force": api_mix(False, True),
    "checkpoint_every": api_mix(1, 500, 0), "progress": api_mix(None),
    "tie": api_mix(True, False), "seq_len": api_mix(16, 128), "verify": api_mix(False, True),
    "vocab_size": api_mix(100), "heads": api_mix(2, 4), "layers": api_mix(1),
    "d_model": api_mix(32), "context": api_mix(64), "workers": api_mix(1),
    "gpus_per_worker": api_mix(0.0), "engine": api_mix("local", "", "x"),
    "output": mix(st.just("OUTPUT:FRESH"), st.one_of(OUT_PATHS.map("OUTPUT:".__add__),
                                                     ANYTHING)),
    "html": mix(st.just("OUTPUT:OUT/FRESH.html"),
                st.one_of(st.just("OUTPUT:OUT/FRESH.txt"), ANYTHING)),
    "sae": mix(st.just("PATH:SAE"), st.one_of(pick(["PATH:BADSAE", "PATH:ACTS", "PATH:AFILE",
                                                    "PATH:nothere"]), ANYTHING)),
    "pairs": mix(st.just("PATH:PAIRS"), st.one_of(pick(["PATH:BADPAIRS", "PATH:CORPUS",
                                                        "PATH:EMPTY", "PATH:nothere"]),
                                                  ANYTHING)),
    "config": mix(st.just("CONFIGFILE"), st.one_of(pick(["PATH:BADJSON", "PATH:LLAMA_CONFIG"]),
                                                   ANYTHING)),
}
DATASET_KW = ["field", "max_docs", "max_tokens", "ctx", "batch_size", "engine", "ray_address",
              "workers", "gpus_per_worker", "verbose"]
API_FUNCTIONS = {
    "scan": DATASET_KW + ["output"],
    "top": DATASET_KW + ["site", "units", "k", "around", "output", "html", "unit_map", "sae",
                         "sae_site"],
    "collect": DATASET_KW + ["select", "output", "shard_tokens"],
    "patch": ["pairs", "site", "batch", "truncate", "ablate", "ablate_mode", "engine",
              "workers", "verbose", "sae", "sae_site"],
    "features": ["sae", "sae_site", "per_token", "truncate"],
    "train_sae": ["site", "output", "k", "latents", "expansion", "l1", "lr", "batch_size",
                  "steps", "epochs", "seed", "holdout", "skip_first", "b_dec_init",
                  "dead_after", "aux_k", "aux_coef", "force", "progress", "checkpoint_every"],
    "route": ["truncate", "ablate", "ablate_mode"],
    "count_params": ["config", "heads", "layers", "d_model", "context", "tie", "seq_len",
                     "verify", "vocab_size"],
    "activations": [],
}


@st.composite
def api_calls(draw):
    """(function, positional argument, keywords, config edit or None)."""
    draw(sane_or_not())
    name = draw(pick(sorted(API_FUNCTIONS)))
    first = draw(mix(pick(["PATH:CORPUS", "PATH:JSONL", "PATH:FOLDER"]),
                     st.one_of(PATHS.map("PATH:".__add__), ANYTHING)))
    kwargs: dict = {}
    if name in ("scan", "top", "collect", "patch", "features"):
        kwargs.update(draw(pick([GPT_KW, GPT_KW, GPT_KW, {"config": "tiny-moe"},
                                 {"config": "PATH:LLAMA_CONFIG"}])))
    if name in ("features", "route"):
        first = draw(mix(TEXTS, ANYTHING))
    if name == "route":
        kwargs["config"] = draw(pick(["tiny-moe", "tiny-moe", "gpt124m"]))
    elif name == "top":
        kwargs["site"] = "blocks.0.ffn.act"
    elif name == "collect":
        kwargs.update(select=SITE, output="OUTPUT:FRESH")
    elif name == "patch":
        first, kwargs["pairs"] = None, "PATH:PAIRS"
    elif name == "features":
        kwargs["sae"] = "PATH:SAE"
    elif name == "train_sae":
        first = draw(pick(["PATH:ACTS"] * 3 + ["PATH:CORPUS"])) if draw(
            st.integers(0, 4)) < 4 else first
        kwargs.update(site=SITE, output="OUTPUT:FRESH", latents=32, steps=2, batch_size=8)
    elif name == "count_params":
        first = None
        kwargs["config"] = "CONFIGFILE"
    for key in draw(st.lists(pick(API_FUNCTIONS[name]), max_size=4, unique=True)
                    if API_FUNCTIONS[name] else st.just([])):
        kwargs[key] = draw(API_VALUES[key])
    if name == "train_sae":  # one width, one length: the drawn one wins over the default
        kwargs.pop("latents") if "expansion" in kwargs and "latents" in kwargs else None
        kwargs.pop("steps") if "epochs" in kwargs and "steps" in kwargs else None
    kwargs.update(workers=0) if kwargs.get("engine") == "ray" else None  # no Ray starts
    edit = draw(CONFIG_EDITS) if name == "count_params" else None
    return name, first, kwargs, edit


def resolve(value, places: dict, config: Path | None):
    if value == "CONFIGFILE":
        return str(config)
    if isinstance(value, str) and value.startswith(("PATH:", "OUTPUT:")):
        return substitute([value.split(":", 1)[1]], places)[0]
    return value


NONFINITE = ("nan", "inf", "-inf")  # how JSON writes them in a tensor's data


def _finite(value, in_data: bool = False) -> bool:
    """No NaN or infinity anywhere: floats, arrays, and the "nan"/"inf" strings a
    tensor's data would hold (a masked -inf is null, by design)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, np.ndarray):
        return not np.issubdtype(value.dtype, np.floating) or bool(np.isfinite(value).all())
    if isinstance(value, str):
        return not (in_data and value in NONFINITE)
    if isinstance(value, dict):
        return all(_finite(v, in_data or k == "data") for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_finite(v, in_data) for v in value)
    return True


def assert_removed_unused(ablate, routed: dict) -> None:
    """An expert removed with --ablate blocks.L.moe.expert:e=E is never chosen in L."""
    sites = [ablate] if isinstance(ablate, str) else list(ablate or [])
    for part in (p.strip() for site in sites if isinstance(site, str) for p in site.split(",")):
        found = re.fullmatch(r"blocks\.(\d+)\.moe\.expert:e=(\d+)", part)
        for layer in routed["routing"] if found else []:
            if layer["layer"] == int(found[1]):
                assert layer["load"][int(found[2])] == 0, (part, layer)


def check_api_result(name: str, result, kwargs: dict) -> None:
    if name == "activations":  # a Mapping of sites to arrays
        sites = list(result)
        assert dict(result).keys() == set(sites) and all(s in result for s in sites)
        assert all(np.isfinite(result[s]).all() for s in sites)
        return
    doc = result.to_dict()
    assert _finite(doc), doc
    if name == "route":
        assert_removed_unused(kwargs.get("ablate"), doc["result"])
    json.dumps(doc, allow_nan=False)
    if name in ("route", "patch", "features"):
        try:
            html = result._repr_html_()
        except Exception as exc:
            raise AssertionError(f"_repr_html_: {type(exc).__name__}: {exc}") from exc
        assert html is None or isinstance(html, str)


@seed(SEED)
@settings(max_examples=int(TOTAL * API_SHARE), **FUZZ)
@given(api_calls())
def test_fuzz_api_corpus_sae_moe_config(places, tmp_path_factory, drawn):
    name, first, kwargs, edit = drawn
    config = None
    if edit is not None:
        config = tmp_path_factory.mktemp("cfg") / "config.json"
        config.write_text(config_text(edit), encoding="utf-8")
    first = resolve(first, places, config)
    kwargs = {k: resolve(v, places, config) for k, v in kwargs.items()}
    before = new_paths([str(kwargs[k]) for k in ("output", "html")
                        if isinstance(kwargs.get(k), str) and kwargs[k].strip()])
    args = () if first is None and name in ("patch", "count_params") else (first,)
    try:
        result = getattr(api, name)(*args, **kwargs)
    except TfxError as exc:
        event(f"api.{name} {type(exc).__name__}")
        assert exc.exit_code in (1, 2) and exc.message and "\n" not in exc.message, exc
        assert not left_behind(before), (name, exc, left_behind(before))
        return
    except Exception as exc:  # anything but a TfxError is a bug
        raise AssertionError(f"{type(exc).__name__}: {exc}") from exc
    event(f"api.{name} ok")
    try:
        check_api_result(name, result, kwargs)
    except AssertionError:
        raise
    except Exception as exc:
        raise AssertionError(f"{type(exc).__name__}: {exc}") from exc
