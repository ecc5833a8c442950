"""Interventions on encoder–decoders: steer, patch and attribute on the toy preset and on
tiny random Marian, BART and T5 checkpoints (transformers builds them; see
test_parity_seq2seq.py and checkpoint_makers.t5_folder).

- attribute: the decoder's answer logit at the target's last position splits into the
  decoder's embedding and every decoder layer's self-attention, cross-attention and FFN
  outputs (per head with per_head) plus a remainder; the parts sum to the model's own
  logit difference, which is transformers'.
- patch: CLEAN and CORRUPT are sources read against one target; the sweep covers both
  stacks. A source position where the two differ, patched at the encoder's input,
  restores CLEAN's answer exactly (effect 1) and the others change nothing; the decoder's
  input is the same in both runs (effect 0); a cell's m is the one a whole forward with
  that one edit gives; batched cells equal cells run alone.
- steer: an encoder site's vector is activation(toward) - activation(away) as the
  encoder reads the two texts, a decoder site's as the decoder writes them as targets of
  the command's source; the steered run holds exactly activation + K × vector there.
"""
import json

import numpy as np
import pytest
import torch
from checkpoint_makers import t5_folder
from test_parity_seq2seq import make_folder

from tfx_cli import api

pytestmark = pytest.mark.slow
SRC = "When you play game of thrones"
SWORDS = "When you play game of swords"  # one word apart: 'swords' is no toy word (<unk>)
TOY = dict(config="toy")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq2seq-interventions")
    out = {}
    for family in ("marian", "bart"):
        out[family] = (root / family, make_folder(root / family, family))
    out["t5"] = (root / "t5", t5_folder(root / "t5", "t5"))
    return out


def _model_options(name, folders):
    return TOY if name == "toy" else dict(weights=str(folders[name][0]))


# byte-tokenized checkpoints: one-byte answers; the toy preset reads words
CASES = {"toy": (SRC, SWORDS, "you win or you", "die", "win"),
         "marian": ("Hello there", "Hello thare", "Hi", "x", "y"),
         "bart": ("Hello there", "Hello thare", "Hi", "x", "y"),
         "t5": ("Hello there", "Hello thare", "Hi", "x", "y")}


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_attribution_parts_sum_to_the_decoders_logit_difference(name, per_head, folders):
    clean, _, target, answer, wrong = CASES[name]
    opts = _model_options(name, folders)
    r = api.attribute(clean, target=target, answer=answer, wrong=wrong, per_head=per_head,
                      **opts)
    assert abs(r.unexplained) <= 1e-5 * max(1.0, abs(r.logit_diff)), name
    names = [p.name for p in r.parts]
    n_dec = r.model.cfg.n_decoder_layers
    cross = [n for n in names if ".cross." in n]
    assert len(cross) == n_dec * (r.model.cfg.n_heads if per_head else 1)
    assert all(n.startswith("decoder.") for n in names[:-1]) and names[-1] == "remainder"
    assert r.through_cross == pytest.approx(sum(p.value for p in r.parts if p.name in cross))
    assert r.position == len(r.input.target.ids) - 1
    if name == "toy":
        return
    hf = folders[name][1]  # the logit difference is transformers' own
    with torch.inference_mode():
        logits = hf(input_ids=torch.tensor([r.input.ids]),
                    decoder_input_ids=torch.tensor([r.input.target.ids])).logits[0, -1]
    assert r.logit_diff == pytest.approx(float(logits[r.answer.id] - logits[r.wrong.id]),
                                         abs=1e-4)


@pytest.mark.parametrize("name", ["toy", "t5"])
def test_patch_sweeps_both_stacks(name, folders):
    clean, corrupt, target, answer, wrong = CASES[name]
    opts = _model_options(name, folders)
    r = api.patch(clean, corrupt=corrupt, target=target, answer=answer, wrong=wrong, **opts)
    cfg = r.model.cfg
    S, T = len(r.input.ids), len(r.input.target.ids)
    # m per cell: batched rows round differently from one run alone (about 1e-7 here),
    # which the effect divides by m_clean - m_corrupt
    enc = np.asarray(r.tensors["patch.encoder.metric"])
    dec = np.asarray(r.tensors["patch.decoder.metric"])
    assert enc.shape == (cfg.n_layers, S) and dec.shape == (cfg.n_decoder_layers, T)
    differ = r.differing_positions
    assert len(differ) == 1
    # the encoder's input at the differing position is CLEAN's whole difference
    assert enc[0, differ[0]] == pytest.approx(r.m_clean, abs=1e-5)
    assert np.asarray(r.tensors["patch.encoder.effect"])[0, differ[0]] == \
        pytest.approx(1.0, abs=1e-3)
    same = [i for i in range(S) if i not in differ]
    assert np.abs(enc[0, same] - r.m_corrupt).max() <= 1e-5
    # the decoder's input is the target's in both runs
    assert np.abs(dec[0] - r.m_corrupt).max() <= 1e-5
    assert [t.part for t in r.tables] == ["encoder", "decoder"]
    # m_clean and m_corrupt are the plain runs' logit differences
    for text, m in ((clean, r.m_clean), (corrupt, r.m_corrupt)):
        nxt = api.next(text, target=target, candidates=cfg.vocab_size, **opts)
        logit = {c.id: c.logit for c in nxt.candidates}
        assert m == pytest.approx(logit[r.answer.id] - logit[r.wrong.id], abs=1e-5)


@pytest.mark.parametrize("site", ["attn_out", "heads"])
def test_a_patched_cell_is_that_edit_in_a_whole_forward(site, folders):
    """Cells of every table (encoder, decoder, cross-attention) against the forward
    pass run with only that cell of CLEAN's activation put in; and batched cells equal
    cells run one at a time."""
    from tfx_cli.core.analysis.patching import SEQ2SEQ_PATCHED
    from tfx_cli.core.analysis.sites import editing

    clean, corrupt, target, answer, wrong = CASES["t5"]
    opts = _model_options("t5", folders)
    batched = api.patch(clean, corrupt=corrupt, target=target, answer=answer, wrong=wrong,
                        site=site, **opts)
    alone = api.patch(clean, corrupt=corrupt, target=target, answer=answer, wrong=wrong,
                      site=site, batch=1, **opts)
    m = api.load(**opts)
    model = m.module
    src_c, src_x = (torch.tensor([r]) for r in (batched.input.ids, batched.corrupt.ids))
    tgt = torch.tensor([batched.input.target.ids])
    for part, template in SEQ2SEQ_PATCHED[site]:
        name = f"patch.{part}.metric"
        got = np.asarray(batched.tensors[name])
        assert np.abs(got - np.asarray(alone.tensors[name])).max() <= 1e-5
        layer, cell = got.shape[0] - 1, got.shape[1] - 1  # the last layer's last cell
        tap = template.format(i=layer)
        with torch.inference_mode():
            with model.record([tap]) as tr:
                model(src_c, target=tgt)
            value = tr.raw(tap).clone()

            def put(x, value=value, cell=cell):
                out = x.clone()
                out[0, cell] = value[cell]  # a position's row, or a head's context
                return out

            with editing(model, [(tap, put)]):
                logits = model(src_x, target=tgt)[0, -1]
        want = float(logits[batched.answer.id] - logits[batched.wrong.id])
        assert got[layer, cell] == pytest.approx(want, abs=1e-5), (part, tap)


@pytest.mark.parametrize("name", ["toy", "bart", "t5"])
def test_steering_either_stack_adds_the_vector(name, folders):
    clean, _, target, _, _ = CASES[name]
    toward, away = ("you die", "you win") if name == "toy" else ("ab", "cd")
    opts = _model_options(name, folders)
    for site in ("encoder.blocks.0.resid_out", "decoder.blocks.0.cross.out"):
        stack = site.split(".")[0]
        if stack == "encoder":  # the encoder reads the two texts as sources
            acts = [np.asarray(api.trace(t, select=[site], **opts).tensors[site])
                    for t in (toward, away)]
        else:  # the decoder writes them as targets of the command's source
            acts = [np.asarray(api.trace(clean, target=t, select=[site], **opts).tensors[site])
                    for t in (toward, away)]
        vector = acts[0] - acts[1]
        plain = api.trace(clean, target=target, select=[site], **opts)
        steered = api.trace(clean, target=target, select=[site], steer=site, toward=toward,
                            away=away, scale=3.0, **opts)
        n = vector.shape[0]
        base = np.asarray(plain.tensors[site])
        shifted = np.asarray(steered.tensors[site])
        assert np.abs(shifted[:n] - (base[:n] + 3.0 * vector)).max() <= 1e-4, (name, site)
        assert np.array_equal(shifted[n:], base[n:])
        (record,) = steered.interventions
        assert record.vector_norm == pytest.approx(float(np.linalg.norm(vector)), rel=1e-5)


def test_same_steering_texts_change_nothing_and_generate_steers():
    base = api.generate(SRC, max_new_tokens=4, config="toy")
    same = api.generate(SRC, max_new_tokens=4, config="toy", steer="decoder.blocks.0.resid_pre",
                        toward="you win", away="you win", scale=5.0)
    assert same.ids == base.ids
    nxt = api.next(SRC, target="you win or", config="toy")
    steered = api.next(SRC, target="you win or", config="toy",
                       steer="encoder.blocks.0.attn.out:p=5", toward=SRC, away=SWORDS,
                       scale=8.0)
    assert [c.logit for c in steered.candidates] != [c.logit for c in nxt.candidates]


def _cli(args):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    result = CliRunner().invoke(app, args, env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_api_equals_cli_json():
    args = dict(answer="die", wrong="win", target="you win or you")
    cli = _cli(["patch", SRC, "--corrupt", SWORDS, "--answer", "die", "--wrong", "win",
                "--target", "you win or you", "--site", "heads", "-c", "toy", "--json"])
    assert api.patch(SRC, corrupt=SWORDS, site="heads", config="toy", **args).to_dict() == cli
    cli = _cli(["attribute", SRC, "--answer", "die", "--wrong", "win", "--target",
                "you win or you", "--per-head", "-c", "toy", "--json"])
    assert api.attribute(SRC, per_head=True, config="toy", **args).to_dict() == cli
