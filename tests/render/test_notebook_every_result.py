"""Every result the API returns shows itself in a notebook and in a Rich console, and
its tensors cannot be changed by mistake: one case per API function (and per kind of
result a function can return), each drawn as `_repr_html_()` and `__rich__()`."""
import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tfx_cli import api

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TEXT = "When you play game of thrones"
GPT = dict(config="gpt2", layers=2, d_model=16, heads=2, tokenizer="word")
TINY = dict(config="gpt124m", layers=2, d_model=16, heads=2)
TOY = dict(config="toy")  # an encoder–decoder
MOE = dict(config="tiny-moe")
CORPUS = dict(max_docs=3, batch_size=4)
PAIRS = [{"clean": "When Mary and John went to the store, John gave a drink to",
          "corrupt": "When Mary and John went to the store, Mary gave a drink to",
          "answer": " Mary", "wrong": " John"},
         {"clean": "When Tom and Anna went to the park, Anna gave a ball to",
          "corrupt": "When Tom and Anna went to the park, Tom gave a ball to",
          "answer": " Tom", "wrong": " Anna"}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """What the corpus and SAE cases read: a pairs file, a collect folder, an SAE."""
    import torch

    from tfx_cli.core.features import write_saelens

    root = tmp_path_factory.mktemp("notebook")
    (root / "words.txt").write_text(TEXT)
    (root / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    api.collect("python-docs", select=["blocks.0.resid_out"], output=root / "acts",
                **CORPUS, **TINY)
    api.collect("python-docs", select=["blocks.*.ln2.out", "blocks.*.ffn.out"],
                output=root / "pairs-acts", **CORPUS, **TINY)
    g = torch.Generator().manual_seed(0)
    write_saelens(root / "sae", activation="relu", W_enc=torch.randn(16, 32, generator=g),
                  W_dec=torch.randn(32, 16, generator=g), b_enc=torch.zeros(32),
                  b_dec=torch.zeros(16), hook_name="blocks.1.hook_resid_pre")
    return root


CALLS = {
    "tokenize": lambda f: api.tokenize(TEXT),
    "configs": lambda f: api.configs(),
    "count-params": lambda f: api.count_params(config="gpt2"),
    "count-params-moe": lambda f: api.count_params(config="tiny-moe"),
    "embed": lambda f: api.embed(TEXT, **GPT),
    "embed-toy": lambda f: api.embed(TEXT, **TOY),
    "posenc": lambda f: api.posenc(TEXT, **TOY),
    "attend": lambda f: api.attend(TEXT, **GPT),
    "attend-inputs": lambda f: api.attend(inputs=SAMPLES / "seed003.json"),  # by hand
    "attend-cross": lambda f: api.attend(TEXT, target="a b", cross=True, **TOY),
    "layernorm": lambda f: api.layernorm(TEXT, **GPT),
    "ffn": lambda f: api.ffn(TEXT, **GPT),
    "trace": lambda f: api.trace(TEXT, select=["logits", "blocks.0.attn.pattern"], **GPT),
    "trace-moe": lambda f: api.trace("hello", **MOE),
    "generate": lambda f: api.generate("When you", max_new_tokens=2, **GPT),
    "next": lambda f: api.next(TEXT, **GPT),
    "next-moe": lambda f: api.next("hello", **MOE),
    "lens": lambda f: api.lens(TEXT, **GPT),
    "report": lambda f: api.report(TEXT, **GPT),
    "patch": lambda f: api.patch(TEXT, corrupt="When you play game of you", answer="win",
                                 wrong="die", **GPT),
    "patch-heads": lambda f: api.patch(TEXT, corrupt="When you play game of you",
                                       answer="win", wrong="die", site="heads", **GPT),
    "patch-toy": lambda f: api.patch(TEXT, corrupt="When you play game of you",
                                     answer="a", wrong="b", target="a b", **TOY),
    "patch-pairs": lambda f: api.patch(pairs=f / "pairs.jsonl", **TINY),
    "patch-pairs-heads": lambda f: api.patch(pairs=f / "pairs.jsonl", site="heads", **TINY),
    "attribute": lambda f: api.attribute(TEXT, answer="win", **GPT),
    "features": lambda f: api.features(TEXT, sae=str(f / "sae"), **GPT),
    "train": lambda f: api.train(output=f / "train", text=f / "words.txt", steps=2,
                                 force=True, **GPT),
    "route": lambda f: api.route("hello", **MOE),
    "route-ablated": lambda f: api.route("hello", ablate=["blocks.2.moe.expert:e=0"], **MOE),
    "scan": lambda f: api.scan("python-docs", **CORPUS, **TINY),
    "top": lambda f: api.top("python-docs", site="blocks.0.ffn.act", units="0:3", k=2,
                             **CORPUS, **TINY),
    "collect": lambda f: api.collect("python-docs", select=["blocks.1.resid_out"],
                                     output=f / "collect2", force=True, **CORPUS, **TINY),
    "train-sae": lambda f: api.train_sae(f / "acts", site="blocks.0.resid_out",
                                         output=f / "sae2", latents=32, k=4, batch_size=32,
                                         steps=2, force=True),
    "train-transcoder": lambda f: api.train_transcoder(
        f / "pairs-acts", layer="all", output=f / "tc", l1=1e-3, latents=32, batch_size=16,
        steps=2, force=True),
    "eval-sae": lambda f: api.eval_sae("python-docs", sae=str(f / "sae"), **CORPUS, **TINY),
}


@pytest.mark.parametrize("case", list(CALLS))
def test_every_result_shows_itself_and_keeps_its_numbers(case, files):
    result = CALLS[case](files)
    page = result._repr_html_()
    assert isinstance(page, str) and page.startswith('<div class="tfx-result">'), case
    assert f"tfx {result.command}" in page or result.command == "report"
    if result.command == "patch":  # every table: one per stack, the spread over pairs
        tables = [n for n in result.tensors if n.endswith(("effect", "effect_std"))]
        assert len(tables) >= 1 + case.startswith(("patch-toy", "patch-pairs"))
        for name in tables:
            assert f"<h4>{name} " in page, name
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(result)
    assert out.getvalue().strip()  # the terminal view, drawn at the console's width
    for name, array in result.tensors.items():
        assert not array.flags.writeable, name
        before = array.copy()
        with pytest.raises(ValueError, match="read-only"):
            array[(0,) * array.ndim] = 1
        np.testing.assert_array_equal(result.tensors[name], before)
