"""AntiBERTy, a real masked LM that works offline: the antiberty 0.1.3 package ships its
weights (MIT), a BERT masked LM of antibody sequences (8 layers, d_model 512, 25 tokens:
the amino acids and BERT's specials).

tfx's amino-acid tokenizer gives the ids AntiBERTy's own BertTokenizer gives; the logits
equal transformers' BertForMaskedLM holding the same tensors; and `tfx next` fills a
masked residue of a heavy chain with the residue that was there.
"""
import json

import pytest
import torch
from checkpoint_makers import need
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core.packages import ANTIBERTY_INSTALL

pytestmark = pytest.mark.slow
# the start of a human heavy-chain variable domain (VH3), with its 26th residue, G, masked
CHAIN = "EVQLVESGGGLVQPGGSLRLSCAASGFTFSSYAMSWVRQAPGKGLEWVS"
MASKED = CHAIN[:25] + "[MASK]" + CHAIN[26:]


@pytest.fixture(scope="module")
def folder():
    need("antiberty", ANTIBERTY_INSTALL)
    need("transformers", "pip install transformers")
    from tfx_cli.core.checkpoints import resolve

    return resolve("antiberty").path


def test_tokenizer_is_antibertys_own(folder):
    from transformers import BertTokenizer

    from tfx_cli.core.tokenizers import get_tokenizer

    theirs = BertTokenizer(str(folder.parent / "vocab.txt"), do_lower_case=False)
    want = theirs(" ".join(CHAIN[:25]) + " [MASK] " + " ".join(CHAIN[26:]))["input_ids"]
    tok = get_tokenizer("antiberty")
    assert tok.encode(MASKED) == want and tok.mask_id == 4
    assert tok.decode(tok.encode(CHAIN)) == CHAIN


def test_logits_match_transformers(folder):
    from transformers import BertConfig, BertForMaskedLM

    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights
    from tfx_cli.core.tokenizers import get_tokenizer

    state = torch.load(folder / "pytorch_model.bin", weights_only=True, map_location="cpu")
    hf = BertForMaskedLM(BertConfig.from_pretrained(folder)).eval()
    hf.load_state_dict(state, strict=False)  # its pooler and three classifiers set aside
    model = load_weights("antiberty", checkpoint_config("antiberty"))
    ids = torch.tensor([get_tokenizer("antiberty").encode(MASKED)])
    with torch.inference_mode():
        assert (model(ids)[0] - hf(ids).logits[0]).abs().max() <= 1e-4


def test_fill_mask_restores_the_residue(folder):
    result = CliRunner().invoke(app, ["next", MASKED, "-w", "antiberty", "--json"],
                                env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["result"]
    assert out["position"] == 26 and out["mask_token"] == "[MASK]"
    assert out["greedy"]["token"] == "G" and out["greedy"]["prob"] > 0.9
    assert out["filled"] == CHAIN


def test_count_is_what_tfx_reads(folder):
    """The encoder, its pooler (counted, as BertForPreTraining does) and the MLM head;
    the species, chain and graft classifiers are set aside."""
    from tfx_cli import api

    state = torch.load(folder / "pytorch_model.bin", weights_only=True, map_location="cpu")
    read = sum(t.numel() for k, t in state.items()
               if not k.startswith(("cls.species", "cls.chain", "cls.graft"))
               and k not in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
                             "bert.embeddings.position_ids"))
    assert api.count_params(weights="antiberty").total == read
