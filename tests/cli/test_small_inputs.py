"""Small inputs a new user tried: a byte-order mark at the start of a corpus, lower-case
residues for AntiBERTy, a folder corpus, a GGUF cut short, a masked LM without its own
tokenizer. The refusals among them are rows of test_bad_inputs.py; here, what is read."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core.datasets.corpus import open_corpus

TINY = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2"]
BOM = b"\xef\xbb\xbf"


def _run(args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], env={"TFX_QUIET": "1", **(env or {})})


def _write_corpora(folder: Path, mark: bytes) -> dict:
    (folder / "docs").mkdir()
    (folder / "docs" / "a.txt").write_bytes(mark + b"hello world\nsecond line\n")
    (folder / "docs.txt").write_bytes(mark + b"hello world\nsecond line\n")
    (folder / "docs.jsonl").write_bytes(mark + b'{"text": "hello world"}\n'
                                               b'{"text": "second line"}\n')
    return {kind: folder / name for kind, name in
            (("txt", "docs.txt"), ("jsonl", "docs.jsonl"), ("folder", "docs"))}


@pytest.mark.parametrize("kind", ["txt", "jsonl", "folder"])
def test_a_byte_order_mark_is_dropped_in_every_kind_of_corpus(kind, tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "marked").mkdir()
    plain = _write_corpora(tmp_path / "plain", b"")[kind]
    marked = _write_corpora(tmp_path / "marked", BOM)[kind]
    read = open_corpus(marked).survey()
    assert next(read.documents()).text.startswith("hello world")
    assert read.sha256 == open_corpus(plain).survey().sha256  # the same corpus, byte for byte


def test_a_byte_order_mark_gives_the_tokens_of_the_text(tmp_path):
    """Through scan: a marked .txt has as many tokens as the plain one, and a marked
    .jsonl is read, not refused."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "marked").mkdir()
    plain = _write_corpora(tmp_path / "plain", b"")
    marked = _write_corpora(tmp_path / "marked", BOM)
    tokens = {}
    for name, corpus in (("plain", plain["txt"]), ("txt", marked["txt"]),
                         ("jsonl", marked["jsonl"])):
        result = _run(["scan", corpus, *TINY, "--json"])
        assert result.exit_code == 0, result.stderr
        tokens[name] = json.loads(result.stdout)["result"]["tokens"]
    assert tokens["txt"] == tokens["plain"] == tokens["jsonl"]


def test_pairs_with_a_byte_order_mark_are_read(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(BOM + b'{"clean": "hi", "corrupt": "ho", "answer": " a", '
                            b'"wrong": " b"}\n')
    result = _run(["patch", "--pairs", pairs, *TINY, "--json"])
    assert result.exit_code == 0, result.stderr


def test_help_says_a_folder_is_one_document_per_file():
    result = _run(["scan", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "one document per file" in " ".join(result.stdout.split())


def test_a_gguf_message_says_what_is_wrong_once(tmp_path):
    (tmp_path / "junk.gguf").write_bytes(bytes(range(256)) * 4)
    result = _run(["trace", "hi", "-w", tmp_path / "junk.gguf"])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert line.count("junk.gguf") == 1 and "not a GGUF file" in line, line
    assert line.count("truncated") + line.count("corrupted") == 0, line


def test_antiberty_reads_lower_case_residues_as_upper_case():
    upper = "EVQLVESGGGLVQPGGSLRLSCAAS[MASK]FTFSSYAMS"
    lower = upper.lower().replace("[mask]", "[MASK]")
    runs = {}
    for text in (upper, lower):
        runs[text] = _run(["next", text, "-w", "antiberty", "--json"], env={"TFX_QUIET": ""})
        assert runs[text].exit_code == 0, runs[text].stderr
    read = json.loads(runs[lower].stdout)
    assert "[UNK]" not in read["input"]["tokens"]
    assert read["result"]["candidates"] == json.loads(runs[upper].stdout)["result"]["candidates"]
    assert "upper-case" in runs[lower].stderr and "upper-case" not in runs[upper].stderr


def test_the_tokenizer_the_modernbert_message_names_works():
    """mlm-tokenizer-missing says --tokenizer minilm: with it the masks are filled."""
    result = _run(["next", "Paris is the [MASK] of France.", "-c", "modernbert-base",
                   "--layers", "1", "--tokenizer", "minilm", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["result"]["mask_token"] == "[MASK]"


def test_a_gguf_that_shrinks_after_its_header_was_read_says_so_once(tmp_path, monkeypatch):
    """A tensor past the end found while reading it (the file was cut after its table was
    read): the reader's message, which names the file and the tensor, said once."""
    from types import SimpleNamespace

    import gguf
    import numpy as np

    from tfx_cli.core.checkpoints import gguf_file
    from tfx_cli.core.checkpoints.gguf import gguf_source
    from tfx_cli.errors import WeightsError

    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reader = gguf_file.read_gguf(tmp_path / "m.gguf")

    def cut(self, info):
        raise gguf_file.GGUFFormatError(f"tensor {info.name} runs past the end of "
                                        f"{self.path}; the file is truncated")
    monkeypatch.setattr(gguf_file.GGUFFile, "array", cut)
    tensors, _ = gguf_source(SimpleNamespace(path=tmp_path / "m.gguf"), reader)
    with pytest.raises(WeightsError) as caught:
        tensors.read(["token_embd.weight"])
    line = caught.value.message
    assert line.startswith("cannot read GGUF file: "), line
    assert line.count("token_embd.weight") == 1 and line.count("truncated") == 1, line
