"""Parity of the masked LMs and the newer encoders (BERT's heads, RoBERTa, ModernBERT),
OLMo 2 and BART's base model with transformers, on tiny random models.

For each, transformers builds a 3-layer model (d_model 64, 4 heads, 300 words) with its
own config and model class, every parameter jiggled so no tensor is trivially ones or
zeros, and saves it with `save_pretrained` and a byte-level tokenizer.json (with the
family's mask token) beside it; tfx loads the folder with `--weights DIR` and must give
transformers' eager forward: the logits (masked LMs, OLMo 2) or the last hidden state
(base models) within 1e-4, every layer's hidden state and attention pattern, and the
parameter count transformers gives. ModernBERT's local layers see 2 keys either side of
a 12-token text, so the window really hides keys.
"""
import json

import pytest
import torch
from checkpoint_makers import need
from parity import bound
from ranks import assert_ranked

pytestmark = pytest.mark.slow
IDS = [256, 5, 17, 99, 258, 250, 42, 7, 7, 123, 201, 257]  # [CLS] ... [MASK] ... [SEP]
TOL = bound(__file__)  # the logits bound, from tests/parity.py
SIZE = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
            vocab_size=300, max_position_embeddings=64)
MODERN = dict(pad_token_id=259, eos_token_id=257, bos_token_id=256, cls_token_id=256,
              sep_token_id=257, local_attention=4, global_rope_theta=1000.0,
              local_rope_theta=50.0)
BART = dict(vocab_size=300, d_model=64, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96,
            decoder_ffn_dim=96, max_position_embeddings=64)

# name -> (config class, model class, config overrides, what transformers' count covers)
FAMILIES = {
    "bert-mlm": ("BertConfig", "BertForMaskedLM", {}, None),
    "bert-pretraining": ("BertConfig", "BertForPreTraining", {}, "pooler+nsp"),
    "bert-classifier": ("BertConfig", "BertForSequenceClassification", {}, "bert"),
    "bert-qa": ("BertConfig", "BertForQuestionAnswering", {}, "bert"),
    # RoBERTa's positions start after its padding index (1): rows 2.. of 66
    "roberta-mlm": ("RobertaConfig", "RobertaForMaskedLM",
                    {"pad_token_id": 1, "max_position_embeddings": 66}, None),
    "roberta": ("RobertaConfig", "RobertaModel",
                {"pad_token_id": 1, "max_position_embeddings": 66}, None),
    "modernbert-mlm": ("ModernBertConfig", "ModernBertForMaskedLM", MODERN, None),
    "modernbert": ("ModernBertConfig", "ModernBertModel", MODERN, None),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM",
              {"num_key_value_heads": 2, "eos_token_id": 257, "pad_token_id": 259}, None),
    "bart-model": ("BartConfig", "BartModel", BART, None),
}
MASKS = {"roberta-mlm": "<mask>"}  # the others' tokenizers spell it [MASK]


def mask_tokenizer_json(folder, vocab_size: int, mask: str) -> None:
    """A byte-level tokenizer.json whose ids 256.. are the specials ([CLS], [SEP], the
    mask, [PAD]; RoBERTa's <s>, </s>, <mask>, <pad>), wrapping a text as BERT does."""
    need("tokenizers", "pip install tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    from tfx_cli.core.tokenizers.hf import _BYTE_OF

    roberta = mask == "<mask>"
    specials = ["<s>", "</s>", "<mask>", "<pad>"] if roberta else \
        ["[CLS]", "[SEP]", "[MASK]", "[PAD]"]
    vocab = dict(_BYTE_OF)
    for i, token in enumerate(specials):
        vocab[token] = 256 + i
    for i in range(len(vocab), vocab_size):
        vocab[f"<unused{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.add_special_tokens(specials)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{specials[0]} $A {specials[1]}",
        special_tokens=[(specials[0], 256), (specials[1], 257)])
    tok.save(str(folder / "tokenizer.json"))


def make_folder(path, name: str):
    need("transformers", "pip install transformers")
    import transformers

    config_name, model_name, overrides, _ = FAMILIES[name]
    size = {} if name.startswith("bart") else SIZE
    config = getattr(transformers, config_name)(**{**size, **overrides},
                                                attn_implementation="eager")
    torch.manual_seed(sum(map(ord, name)))
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # fresh norms are ones and biases zeros: jiggle everything
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(path)
    mask_tokenizer_json(path, 300, MASKS.get(name, "[MASK]"))
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}"
    return request.param, path, make_folder(path, request.param)


def _load(path):
    from tfx_cli.core.checkpoints import checkpoint_config
    from tfx_cli.core.load import load_weights

    cfg = checkpoint_config(str(path))
    return cfg, load_weights(str(path), cfg)


def _diff(a, b) -> float:
    return float((torch.as_tensor(a) - b).abs().max())


def _hidden_names(cfg, prefix: str = "", n: int | None = None) -> list[str]:
    """tfx's names of transformers' hidden states: the embedding, every block's output,
    the last one through the final norm where the stack has one."""
    n = n or cfg.n_layers
    last = f"{prefix}ln_f.out" if cfg.has_final_norm else f"{prefix}blocks.{n - 1}.resid_out"
    return [f"{prefix}embed.out"] + [f"{prefix}blocks.{i}.resid_out" for i in range(n - 1)] \
        + [last]


def test_config_reads_the_family(family):
    name, _, hf = family
    cfg, _ = _load(family[1])
    assert (cfg.d_model, cfg.vocab_size) == (64, 300)
    assert cfg.is_masked_lm == name.endswith("-mlm") or name == "bert-pretraining"
    assert cfg.lm_head == (cfg.is_masked_lm or name == "olmo2")
    if name.startswith("roberta"):  # position p reads row padding_idx + 1 + p
        assert (cfg.pos_offset, cfg.context_length) == (2, 64)
    if name.startswith("modernbert"):
        assert cfg.sliding_layers == (1, 2) and cfg.sliding_window == 3
        assert (cfg.rope_theta, cfg.rope_local_theta) == (1000.0, 50.0)
        assert not cfg.norm_bias and not cfg.first_block_norm
    if name == "olmo2":
        assert cfg.qk_norm_full and cfg.sandwich_norm and not cfg.pre_norms


def test_outputs_hidden_states_and_patterns_match(family):
    name, path, hf = family
    cfg, model = _load(path)
    if name == "bart-model":
        return _seq2seq_matches(cfg, model, hf)
    x = torch.tensor([IDS])
    with torch.inference_mode():
        ref = hf(x, output_hidden_states=True, output_attentions=True)
        with model.record(["embed.out", "blocks.*.resid_out", "ln_f.out",
                           "blocks.*.attn.pattern"]) as tr:
            out = model(x)[0]
        fused = model(x)[0]  # nothing recorded: the fused attention path
    want = getattr(ref, "logits", None)
    want = getattr(ref, "prediction_logits", want)  # BertForPreTraining's MLM logits
    if not cfg.lm_head:  # a base model, or a task head's model read as its base
        want = ref.hidden_states[-1]
    assert _diff(out, want[0]) <= TOL, name
    assert _diff(fused, want[0]) <= TOL, name
    names = _hidden_names(cfg)
    assert len(names) == len(ref.hidden_states)
    for ours, theirs in zip(names, ref.hidden_states):
        assert _diff(tr.array(ours), theirs[0]) <= TOL, (name, ours)
    for i in range(cfg.n_layers):
        assert _diff(tr.array(f"blocks.{i}.attn.pattern"), ref.attentions[i][0]) <= 1e-5, \
            (name, i)
    if name.startswith("modernbert"):  # the local layers hid the far keys
        pattern = torch.as_tensor(tr.array("blocks.1.attn.pattern"))
        assert pattern[:, 0, 3:].abs().max() == 0 and pattern[:, 0, :3].min() > 0


def _seq2seq_matches(cfg, model, hf):
    """BartModel: no head; the encoder's and the decoder's hidden states are the output."""
    src, tgt = torch.tensor([IDS[1:-1]]), torch.tensor([[cfg.start_id, 11, 12, 13]])
    with torch.inference_mode():
        ref = hf(input_ids=src, decoder_input_ids=tgt, output_hidden_states=True,
                 output_attentions=True)
        with model.record(["*"]) as tr:
            out = model(src, target=tgt)[0]
    assert not cfg.lm_head and "logits" not in tr.names()
    assert _diff(out, ref.last_hidden_state[0]) <= TOL
    assert _diff(tr.array("decoder.blocks.1.cross.pattern"), ref.cross_attentions[1][0]) <= 1e-5
    for stack, states in (("encoder", ref.encoder_hidden_states),
                          ("decoder", ref.decoder_hidden_states)):
        for ours, theirs in zip(_hidden_names(cfg, stack + ".", 2), states):
            assert _diff(tr.array(ours), theirs[0]) <= TOL, ours


def test_parameter_count_is_transformers(family):
    """count-params from the folder's config.json alone equals transformers' count of
    what tfx reads (a classifier's task head and a pretraining model's pooler and
    next-sentence head are set aside, and not counted)."""
    from tfx_cli import api

    name, path, hf = family
    counted = api.count_params(weights=str(path)).total
    covers = FAMILIES[name][3]
    if covers == "bert":
        want = hf.bert.num_parameters()
    elif covers == "pooler+nsp":
        want = hf.num_parameters() - sum(p.numel() for p in
                                         [*hf.cls.seq_relationship.parameters()])
    else:
        want = hf.num_parameters()
    assert counted == want, name


@pytest.mark.parametrize("name", ["bert-mlm", "roberta-mlm", "modernbert-mlm"])
def test_fill_mask_is_transformers_softmax_at_the_mask(name, tmp_path):
    """`tfx next` on a masked LM predicts at the mask token (BERT's [MASK], RoBERTa's
    <mask>), at every one of them, with transformers' probabilities."""
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    path = tmp_path / name
    hf = make_folder(path, name)
    mask = MASKS.get(name, "[MASK]")
    text = f"ab{mask}cd e{mask}"
    result = CliRunner().invoke(app, ["next", text, "-w", str(path), "--json",
                                      "--candidates", "3"], env={"TFX_QUIET": "1"})
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    ids = doc["input"]["ids"]
    assert ids == [256, 97, 98, 258, 99, 100, 32, 101, 258, 257]
    out = doc["result"]
    assert out["mask_token"] == mask and [m["position"] for m in out["masks"]] == [3, 8]
    with torch.inference_mode():
        probs = hf(torch.tensor([ids])).logits[0].double().softmax(-1)
    for m in out["masks"]:
        row = probs[m["position"]]
        assert_ranked([c["id"] for c in m["candidates"]], row, 1e-5)
        assert max(abs(c["prob"] - float(row[c["id"]])) for c in m["candidates"]) <= 1e-5
    assert out["position"] == 3 and out["candidates"] == out["masks"][0]["candidates"]
    lens = CliRunner().invoke(app, ["lens", text, "-w", str(path), "--json"],
                              env={"TFX_QUIET": "1"})
    assert lens.exit_code == 0, lens.stderr
    read = json.loads(lens.stdout)["result"]
    assert read["mask_positions"] == [3, 8] and "next_token_probs" not in read
    assert read["top_ids"][-1] == read["output_top_ids"]  # the last layer is the output
    assert read["token_probs"][-1][3] is None


@pytest.mark.parametrize("command", ["attend", "layernorm", "ffn", "trace", "lens",
                                     "report", "embed"])
def test_every_stage_runs_on_modernbert_and_olmo2(command, tmp_path):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    for name in ("modernbert-mlm", "olmo2"):
        path = tmp_path / name
        if not path.exists():
            make_folder(path, name)
        text = "Hello [MASK] there" if name.endswith("mlm") else "Hello there"
        # OLMo 2 has no norm before its sublayers: its final norm
        extra = {"report": ["-o", str(tmp_path / f"{name}.html")],
                 "trace": ["-s", "blocks.1.*"],
                 "layernorm": ["--layer", "1"] if name.endswith("mlm") else ["--which", "ln_f"]}
        result = CliRunner().invoke(app, [command, text, "-w", str(path), "--json",
                                          *extra.get(command, [])], env={"TFX_QUIET": "1"})
        assert result.exit_code == 0, (name, command, result.stderr)


def test_olmo2_decodes_as_transformers_generates(tmp_path):
    from tfx_cli.core.analysis.decode import decode

    hf = make_folder(tmp_path / "olmo2", "olmo2")
    _, model = _load(tmp_path / "olmo2")
    cached = decode(model, IDS[1:4], max_new_tokens=8, keep_logits=True)
    plain = decode(model, IDS[1:4], max_new_tokens=8, use_cache=False, keep_logits=True)
    assert cached.ids == plain.ids
    with torch.inference_mode():
        out = hf.generate(torch.tensor([IDS[1:4]]), max_new_tokens=8, do_sample=False,
                          attention_mask=torch.ones(1, 3, dtype=torch.long),
                          pad_token_id=0, eos_token_id=None)
    assert cached.ids == out[0].tolist()
