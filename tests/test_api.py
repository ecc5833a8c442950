"""The Python API is the CLI without Typer: for every command, `api.X(...).to_dict()` is
the document `tfx X ... --json` prints, and a loaded model gives the same results."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tfx_cli import api
from tfx_cli.cli import app
from tfx_cli.core.results import AttendResult, Result
from tfx_cli.errors import ConfigError, InputTextError, UsageError
from tfx_cli.registry import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "When you play game of thrones"
CAPITAL, OTHER = "The capital of France is", "The capital of Italy is"
SMALL = ["--layers", "2", "--d-model", "32", "--heads", "4"]
SMALL_KW = dict(layers=2, d_model=32, heads=4)
POST_LN = str(ROOT / "tests" / "post_ln_words.json")
# Folders the cases write or read, in this run's own temporary folder (the `folders`
# fixture): the names below stand for them in CASES until a test runs.
TRAINED = "<trained>"  # train writes a folder
COLLECTED = "<collected>"
SAE = "<sae>"  # a random SAE (written by the fixture)
SAE_ACTS = "<sae-acts>"  # train-sae reads it
TRAINED_SAE = "<trained-sae>"
TRANSCODERS = "<transcoders>"  # train-transcoder writes it (from SAE_ACTS' pairs)
FOLDERS = {"TRAINED": TRAINED, "COLLECTED": COLLECTED, "SAE": SAE, "SAE_ACTS": SAE_ACTS,
           "TRAINED_SAE": TRAINED_SAE, "TRANSCODERS": TRANSCODERS}


def _write_sae(folder) -> None:
    """A random TopK SAE of SMALL's block 1 input, in SAELens's format."""
    import torch
    from tfx_cli.core.features import write_saelens

    g = torch.Generator().manual_seed(0)
    write_saelens(folder, activation="topk", k=4, W_enc=torch.randn(32, 64, generator=g),
                  W_dec=torch.randn(64, 32, generator=g), b_enc=torch.zeros(64),
                  b_dec=torch.zeros(32), hook_name="blocks.1.hook_resid_pre", force=True)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """placeholder -> a folder of this run (the SAE written into its own)."""
    root = tmp_path_factory.mktemp("api")
    real = {mark: str(root / name.lower()) for name, mark in FOLDERS.items()}
    _write_sae(real[SAE])
    return real


@pytest.fixture
def in_folders(folders, monkeypatch):
    """The module's folder names point at this run's folders while a test runs (the
    cases' API calls read them when called); returns the argv resolver."""
    for name, mark in FOLDERS.items():
        monkeypatch.setitem(globals(), name, folders[mark])

    def resolve(args):
        out = []
        for arg in args:
            for mark, path in folders.items():
                arg = arg.replace(mark, path) if isinstance(arg, str) else arg
            out.append(arg)
        return out
    return resolve


def _sae_acts():
    """The small collect folder train-sae and train-transcoder read (made once)."""
    if not (Path(SAE_ACTS) / "tokens.parquet").exists():
        api.collect("python-docs", max_tokens=600, output=SAE_ACTS, force=True,
                    select=["blocks.1.resid_out", "blocks.*.ln2.out", "blocks.*.ffn.out"],
                    **SMALL_KW)


def _train_transcoder():
    _sae_acts()
    return api.train_transcoder(SAE_ACTS, layer="all", output=TRANSCODERS, l1=1e-3,
                                latents=64, batch_size=128, steps=5, force=True)


def _train_sae():
    """train-sae's case: a small collect folder first (made once), then the training."""
    _sae_acts()
    return api.train_sae(SAE_ACTS, site="blocks.1.resid_out", output=TRAINED_SAE, k=4,
                         latents=64, batch_size=128, steps=20, force=True)


# (CLI arguments, the same call through the API)
CT = Path(__file__).resolve().parent / "recordings" / "circuit_tracer" / "gpt2"
CASES = {
    "tokenize": (["tokenize", "Hello, I am"], lambda: api.tokenize("Hello, I am")),
    "tokenize-word": (["tokenize", SENTENCE, "-c", "toy"],
                      lambda: api.tokenize(SENTENCE, config="toy")),
    "configs": (["configs"], lambda: api.configs()),
    "count-params": (["count-params", "--config", "gpt2", "--seq-len", "64", "--verify"],
                     lambda: api.count_params(config="gpt2", seq_len=64, verify=True)),
    "embed": (["embed", SENTENCE, "-c", "toy"], lambda: api.embed(SENTENCE, config="toy")),
    "posenc": (["posenc", SENTENCE, "-c", "toy"], lambda: api.posenc(SENTENCE, config="toy")),
    "posenc-length": (["posenc", "--length", "5", "-c", "smollm2-135m"],
                      lambda: api.posenc(length=5, config="smollm2-135m")),
    "attend": (["attend", SENTENCE, *SMALL, "--layer", "1", "--head", "2", "--explain"],
               lambda: api.attend(SENTENCE, layer=1, head=2, explain=True, **SMALL_KW)),
    "attend-kv": (["attend", "you win", "--kv", SENTENCE, "-c", "toy", "--show", "q,pattern"],
                  lambda: api.attend("you win", kv=SENTENCE, config="toy",
                                     show=["q", "pattern"])),
    "attend-inputs": (["attend", "--inputs", str(ROOT / "samples" / "seed000.json"),
                       "--explain"],
                      lambda: api.attend(inputs=ROOT / "samples" / "seed000.json",
                                         explain=True)),
    "layernorm": (["layernorm", SENTENCE, "-c", "toy", "--which", "ln2"],
                  lambda: api.layernorm(SENTENCE, config="toy", which="ln2")),
    "ffn": (["ffn", SENTENCE, *SMALL, "--layer", "1"],
            lambda: api.ffn(SENTENCE, layer=1, **SMALL_KW)),
    "trace": (["trace", SENTENCE, *SMALL, "--select", "blocks.*.attn.pattern,logits"],
              lambda: api.trace(SENTENCE, select=["blocks.*.attn.pattern", "logits"],
                                **SMALL_KW)),
    "generate": (["generate", "Hello", *SMALL, "-n", "3", "--temperature", "0.8", "--seed",
                  "7", "--select", "blocks.0.attn.pattern"],
                 lambda: api.generate("Hello", max_new_tokens=3, temperature=0.8, seed=7,
                                      select=["blocks.0.attn.pattern"], **SMALL_KW)),
    "next": (["next", "Hello, I am", *SMALL, "--top-k", "3", "--candidates", "4"],
             lambda: api.next("Hello, I am", top_k=3, candidates=4, **SMALL_KW)),
    "lens": (["lens", "Hello, I am", *SMALL], lambda: api.lens("Hello, I am", **SMALL_KW)),
    "report": (["report", SENTENCE, *SMALL, "--show-layers", "1", "--candidates", "2"],
               lambda: api.report(SENTENCE, show_layers="1", candidates=2, **SMALL_KW)),
    "patch": (["patch", CAPITAL, "--corrupt", OTHER, "--answer", " Paris", "--wrong", " Rome",
               *SMALL],
              lambda: api.patch(CAPITAL, corrupt=OTHER, answer=" Paris", wrong=" Rome",
                                **SMALL_KW)),
    "patch-heads-ablated": (["patch", CAPITAL, "--corrupt", OTHER, "--answer", " Paris",
                             "--wrong", " Rome", "--site", "heads", "--batch", "3",
                             "--ablate", "blocks.0.ffn.out", "--ablate-mode", "mean", *SMALL],
                            lambda: api.patch(CAPITAL, corrupt=OTHER, answer=" Paris",
                                              wrong=" Rome", site="heads", batch=3,
                                              ablate=["blocks.0.ffn.out"], ablate_mode="mean",
                                              **SMALL_KW)),
    "attribute": (["attribute", CAPITAL, "--answer", " Paris", "--wrong", " Rome",
                   "--per-head", *SMALL],
                  lambda: api.attribute(CAPITAL, answer=" Paris", wrong=" Rome", per_head=True,
                                        **SMALL_KW)),
    "attribute-post-ln": (["attribute", "When you play game of", "--answer", "thrones",
                           "-c", POST_LN],
                          lambda: api.attribute("When you play game of", answer="thrones",
                                                config=POST_LN)),
    "next-steered": (["next", "Hello, I am", *SMALL, "--steer", "blocks.1.resid_pre:p=0",
                      "--toward", " love", "--away", " hate", "--scale", "4"],
                     lambda: api.next("Hello, I am", steer="blocks.1.resid_pre:p=0",
                                      toward=" love", away=" hate", scale=4, **SMALL_KW)),
    "attend-ablated": (["attend", SENTENCE, "-c", POST_LN, "--ablate",
                        "blocks.0.attn.pattern:h=1,blocks.0.attn.q:p=2"],
                       lambda: api.attend(SENTENCE, config=POST_LN,
                                          ablate=["blocks.0.attn.pattern:h=1",
                                                  "blocks.0.attn.q:p=2"])),
    "lens-ablated": (["lens", "Hello, I am", *SMALL, "--ablate", "blocks.0.resid_pre"],
                     lambda: api.lens("Hello, I am", ablate=["blocks.0.resid_pre"], **SMALL_KW)),
    "generate-steered": (["generate", "Hello", *SMALL, "-n", "2", "--steer",
                          "blocks.0.attn.context:h=1", "--toward", " love", "--away", " hate"],
                         lambda: api.generate("Hello", max_new_tokens=2,
                                              steer="blocks.0.attn.context:h=1",
                                              toward=" love", away=" hate", **SMALL_KW)),
    # an encoder–decoder's decoder: cross-attention, the next word, decoding to <end>
    "attend-cross": (["attend", SENTENCE, "-c", "toy", "--target", "you win", "--cross",
                      "--explain"],
                     lambda: api.attend(SENTENCE, config="toy", target="you win", cross=True,
                                        explain=True)),
    "next-target": (["next", SENTENCE, "-c", "toy", "--target", "you win or"],
                    lambda: api.next(SENTENCE, config="toy", target="you win or")),
    "generate-seq2seq": (["generate", SENTENCE, "-c", "toy", "-n", "3"],
                         lambda: api.generate(SENTENCE, config="toy", max_new_tokens=3)),
    "layernorm-ln3": (["layernorm", SENTENCE, "-c", "toy", "--target", "you", "--which", "ln3"],
                      lambda: api.layernorm(SENTENCE, config="toy", target="you", which="ln3")),
    "next-target-ablated-bf16": (
        ["next", SENTENCE, "-c", "toy", "--target", "you win", "--ablate",
         "decoder.blocks.0.cross.pattern:h=1", "--dtype", "bfloat16"],
        lambda: api.next(SENTENCE, config="toy", target="you win",
                         ablate=["decoder.blocks.0.cross.pattern:h=1"], dtype="bfloat16")),
    # mixtures of experts: the router, with an expert routed around; count-params' active
    "route-ablated": (["route", CAPITAL, "-c", "tiny-moe", "--ablate",
                       "blocks.1.moe.expert:e=3"],
                      lambda: api.route(CAPITAL, config="tiny-moe",
                                        ablate=["blocks.1.moe.expert:e=3"])),
    "count-params-moe": (["count-params", "-c", "qwen3-30b-a3b", "--seq-len", "4096"],
                         lambda: api.count_params(config="qwen3-30b-a3b", seq_len=4096)),
    # features of an SAE: the command, a feature ablated and steered, patch and attribute
    "features": (["features", CAPITAL, *SMALL, "--sae", SAE, "--per-token", "3"],
                 lambda: api.features(CAPITAL, sae=SAE, per_token=3, **SMALL_KW)),
    # attribution graphs, on circuit-tracer's recorded tiny GPT-2 and its transcoders
    "graph": (["graph", "The capital of France is", "-w", str(CT / "model"),
               "--transcoders", str(CT / "transcoders"), "--max-logits", "3"],
              lambda: api.graph("The capital of France is", weights=str(CT / "model"),
                                transcoders=str(CT / "transcoders"), max_logits=3)),
    # a graph read back from the graph.json circuit-tracer wrote for that model
    "graph-open": (["graph", "--open", str(CT / "graph_files" / "gpt2-prompt0.json")],
                   lambda: api.open_graph(CT / "graph_files" / "gpt2-prompt0.json")),
    "next-feature-ablated": (["next", CAPITAL, *SMALL, "--sae", SAE, "--ablate",
                              "features.7:p=4", "--ablate-mode", "mean"],
                             lambda: api.next(CAPITAL, sae=SAE, ablate=["features.7:p=4"],
                                              ablate_mode="mean", **SMALL_KW)),
    "trace-feature-steered": (["trace", CAPITAL, *SMALL, "-s", "logits", "--steer-feature",
                               f"{SAE}:3", "--scale", "5"],
                              lambda: api.trace(CAPITAL, select=["logits"],
                                                steer_feature=f"{SAE}:3", scale=5,
                                                **SMALL_KW)),
    "patch-features": (["patch", CAPITAL, "--corrupt", OTHER, "--answer", " Paris", "--wrong",
                        " Rome", "--site", "features", "--sae", SAE, *SMALL],
                       lambda: api.patch(CAPITAL, corrupt=OTHER, answer=" Paris",
                                         wrong=" Rome", site="features", sae=SAE,
                                         **SMALL_KW)),
    "attribute-sae": (["attribute", CAPITAL, "--answer", " Paris", "--sae", SAE, *SMALL],
                      lambda: api.attribute(CAPITAL, answer=" Paris", sae=SAE, **SMALL_KW)),
    "count-params-vocab": (["count-params", "-c", "vaswani", "--vocab-size", "37000"],
                           lambda: api.count_params(config="vaswani", vocab_size=37000)),
    # a corpus instead of one prompt
    "scan": (["scan", "repeated-tokens", "--max-docs", "3", *SMALL],
             lambda: api.scan("repeated-tokens", max_docs=3, **SMALL_KW)),
    "top": (["top", "python-docs", "--max-docs", "4", "--site", "blocks.1.ffn.act", "--units",
             "0,5", "-k", "3", "--ctx", "32", *SMALL],
            lambda: api.top("python-docs", max_docs=4, site="blocks.1.ffn.act", units=[0, 5],
                            k=3, ctx=32, **SMALL_KW)),
    "top-sae": (["top", "python-docs", "--max-docs", "4", "--sae", SAE, "--units", "3,7", "-k",
                 "3", "--ctx", "32", *SMALL],
                lambda: api.top("python-docs", max_docs=4, sae=SAE, units=[3, 7], k=3, ctx=32,
                                **SMALL_KW)),
    "train-sae": (["train-sae", SAE_ACTS, "--site", "blocks.1.resid_out", "-o", TRAINED_SAE,
                   "--k", "4", "--latents", "64", "--batch-size", "128", "--steps", "20",
                   "--force"], _train_sae),
    "train-transcoder": (["train-transcoder", SAE_ACTS, "--layers", "all", "-o", TRANSCODERS,
                          "--l1", "1e-3", "--latents", "64", "--batch-size", "128", "--steps",
                          "5", "--force"], _train_transcoder),
    "eval-sae": (["eval-sae", "python-docs", "--max-docs", "3", "--sae", SAE, "--ctx", "32",
                  *SMALL],
                 lambda: api.eval_sae("python-docs", max_docs=3, sae=SAE, ctx=32, **SMALL_KW)),
    "collect": (["collect", "python-docs", "--max-docs", "3", "--select",
                 "blocks.0.resid_out", "-o", COLLECTED, "--force", *SMALL],
                lambda: api.collect("python-docs", max_docs=3, select=["blocks.0.resid_out"],
                                    output=COLLECTED, force=True, **SMALL_KW)),
    "train": (["train", "-c", "toy", "--pairs", str(ROOT / "samples" / "seed001.tsv"),
               "--steps", "20", "-o", TRAINED, "--force"],
              lambda: api.train(config="toy", pairs=ROOT / "samples" / "seed001.tsv",
                                steps=20, output=TRAINED, force=True)),
}


def cli_json(args):
    result = CliRunner().invoke(app, [*args, "--json"], env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("case", CASES)
def test_api_result_is_the_cli_json(case, in_folders):
    args, call = CASES[case]
    args = in_folders(args)
    result = call()
    assert isinstance(result, Result) and result.command == args[0]
    # through JSON text, as the CLI writes it: floats and nulls compare as printed
    assert json.loads(json.dumps(result.to_dict())) == cli_json(args)


def test_every_command_has_a_case():
    assert {c.name for c in COMMANDS} <= {args[0] for args, _ in CASES.values()}


def test_tensors_are_numpy_and_fields_are_attributes():
    r = api.attend(SENTENCE, config="toy", explain=True)
    assert isinstance(r, AttendResult)
    pattern = r.tensors["encoder.blocks.0.attn.pattern"]
    assert isinstance(pattern, np.ndarray) and pattern.shape == (2, 6, 6)
    assert set(r.arrays()) == set(r.tensors.names())
    assert r.explain.query_pos == 5 and r.heads == [0, 1] and r.tokens[0] == "When"


def test_a_loaded_model_runs_every_stage_on_the_same_weights():
    m = api.load(config="gpt124m", seed=5, **SMALL_KW)
    assert m.config.n_layers == 2 and m.tokenizer.name == "gpt2" and "seed 5" in repr(m)
    for name, call in [("attend", lambda f: f("Hello there", layer=1)),
                       ("trace", lambda f: f("Hello there", select=["logits"])),
                       ("next", lambda f: f("Hello there")),
                       ("layernorm", lambda f: f("Hello there", which="ln_f"))]:
        once = call(getattr(m, name))
        fresh = call(lambda *a, **k: getattr(api, name)(*a, seed=5, **SMALL_KW, **k))
        assert once.to_dict() == fresh.to_dict(), name
    assert list(m.generate("Hello", max_new_tokens=2).new_ids) == \
        api.generate("Hello", max_new_tokens=2, seed=5, **SMALL_KW).new_ids


def test_api_errors_are_the_cli_errors():
    with pytest.raises(ConfigError, match="unknown config 'nope'"):
        api.embed("hi", config="nope")
    with pytest.raises(InputTextError, match="empty"):
        api.embed("   ", config="toy")
    with pytest.raises(UsageError, match="--weights is empty"):
        api.embed("hi", weights="")
    with pytest.raises(UsageError, match="--mask"):
        api.attend("hi", config="toy", mask="diagonal")
    with pytest.raises(TypeError, match="unknown model option"):
        api.embed("hi", confg="toy")


def test_importing_the_api_does_not_import_torch():
    code = ("import sys, tfx_cli.api as api; api.tokenize('Hello'); api.configs(); "
            "api.count_params(config='gpt2'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_the_api_leaves_autograd_as_it_found_it():
    """A notebook that runs tfx and then trains a model of its own keeps its gradients:
    loading and running a model never turns autograd off for the process."""
    import torch

    assert torch.is_grad_enabled()
    api.next("Hello, I am", **SMALL_KW)
    model = api.load(**SMALL_KW)
    model.lens("Hello, I am")
    assert torch.is_grad_enabled()
    assert not any(p.requires_grad for p in model.module.parameters())  # no graph recorded
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]
