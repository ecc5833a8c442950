"""Issue 25's items 5, 6 and 8-14, each with the test that would have caught it (items 1-4
are in tests/core/test_nonfinite.py, item 7 in tests/test_api_values.py)."""
import io
import json
import os
import re
import stat
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from tfx_cli import api, cli
from tfx_cli.cli import app
from tfx_cli.core import progress as progress_mod
from tfx_cli.errors import OutputFileError, TfxError

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ROOT / "samples" / "seed001.tsv"
SMALL = dict(config="gpt124m", layers=2, d_model=16, heads=2, tokenizer="byte", context=32)
SMALL_ARGS = ["-c", "gpt124m", "--layers", "2", "--d-model", "16", "--heads", "2",
              "-t", "byte", "--context", "32"]
TOY = ["-c", "toy"]
SENTENCE = "When you play game of thrones"


def run(*args, input=None):
    return CliRunner().invoke(app, list(args), input=input, env={"TFX_QUIET": "1"})


def ok_json(*args):
    out = run(*args, "--json")
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


def refused(*args, input=None) -> str:
    out = run(*args, input=input)
    assert out.exit_code == 2 and out.stdout == "", (out.exit_code, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error: "), out.stderr
    return lines[0]


# -- item 5: train --tokenizer char ----------------------------------------------------
def test_train_char_vocabulary_on_pairs_works_from_the_cli_and_the_api(tmp_path):
    doc = ok_json("train", "-c", "toy", "--pairs", str(PAIRS), "-o", str(tmp_path / "cli"),
                  "--tokenizer", "char", "--steps", "5")
    r = api.train(config="toy", pairs=PAIRS, output=tmp_path / "api", tokenizer="char", steps=5)
    assert r.to_dict()["result"]["losses"] == doc["result"]["losses"]
    vocab = json.loads((tmp_path / "cli" / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["kind"] == "char" and vocab["tokens"][:2] == ["<start>", "<end>"]
    out = ok_json("generate", SENTENCE, "-w", str(tmp_path / "cli"), "-n", "3")
    assert out["result"]["ids"][0] == 1  # <start>: id 1, after <unk>


# -- item 6: --debug after the subcommand --------------------------------------------
def test_debug_is_taken_after_the_subcommand_too():
    try:
        out = CliRunner().invoke(app, ["embed", "", *TOY, "--debug"])
        assert isinstance(out.exception, TfxError)  # the traceback, not the one line
        assert cli.DEBUG["on"]
    finally:
        cli.DEBUG["on"] = False
    out = CliRunner().invoke(app, ["tokenize", "--", "--debug"])  # text after `--`
    assert out.exit_code == 0 and not cli.DEBUG["on"]


# -- item 8: every --steer applies --------------------------------------------------------
def test_two_steers_both_apply_each_with_its_own_vector():
    """Steering embed.out (A) and blocks.1.resid_pre (B): at B's tap the stream is the
    A-only stream plus K_B times B's vector, B's vector computed on the unsteered model."""
    a = dict(steer="embed.out", toward="ab", away="cd", scale=2.0)
    both = api.trace("hello", select="blocks.0.resid_out", steer=["embed.out",
                     "blocks.1.resid_pre"], toward=["ab", "ef"], away=["cd", "gh"],
                     scale=[2.0, 3.0], **SMALL)
    only_a = api.trace("hello", select="blocks.0.resid_out", **a, **SMALL)
    plain = api.load(**SMALL)
    acts = [plain.trace(t, select="blocks.0.resid_out").tensors["blocks.0.resid_out"]
            for t in ("ef", "gh")]
    vector = acts[0] - acts[1]  # (2, C): added to the first two positions
    got = both.tensors["blocks.0.resid_out"] - only_a.tensors["blocks.0.resid_out"]
    assert abs(got[:2] - 3.0 * vector).max() < 1e-5
    assert abs(got[2:]).max() == 0
    assert [i.site for i in both.interventions] == ["embed.out", "blocks.1.resid_pre"]
    cli_doc = ok_json("trace", "hello", *SMALL_ARGS, "-s", "blocks.0.resid_out",
                      "--steer", "embed.out", "--steer", "blocks.1.resid_pre",
                      "--toward", "ab", "--toward", "ef", "--away", "cd", "--away", "gh",
                      "--scale", "2", "--scale", "3")
    assert cli_doc == both.to_dict()


def test_steer_counts_that_do_not_pair_are_refused():
    line = refused("next", "hi", *SMALL_ARGS, "--steer", "embed.out", "--steer",
                   "blocks.1.resid_pre", "--toward", "a", "--toward", "b", "--toward", "c",
                   "--away", "d")
    assert "--steer is given 2 times but --toward 3 times" in line


# -- item 9: runaway output refused before the work --------------------------------------
def test_report_past_200_mb_is_refused_before_the_work(tmp_path):
    """64 heads × 1,100² weights in one layer: about 209 MB of page."""
    text = "a" * 1100
    args = ["report", text, "-c", "gpt124m", "--layers", "1", "--d-model", "64",
            "--heads", "64", "--context", "2048", "-t", "byte", "-o", str(tmp_path / "r.html")]
    line = refused(*args)
    assert "the page would be about 209 MB" in line and "--show-layers" in line
    assert list(tmp_path.iterdir()) == []
    # the estimate is the page's size: 200 tokens written for real
    from tfx_cli.core.analysis.report import page_bytes

    m = api.load(config="gpt124m", layers=1, d_model=64, heads=64, context=2048,
                 tokenizer="byte")
    m.report("a" * 200, output=tmp_path / "small.html")
    real = (tmp_path / "small.html").stat().st_size
    assert abs(page_bytes(1, 64, 200, 200) / real - 1) < 0.05
    from tfx_cli.core.outputs import check_output_size

    check_output_size(3e8, what="x", narrow="y", force=True)  # --force writes it anyway
    with pytest.raises(OutputFileError):
        check_output_size(3e8, what="x", narrow="y")


# -- item 10: progress on long work ------------------------------------------------------
class Recorder:
    """A progress factory that remembers what it was told."""

    def __init__(self):
        self.opened, self.updates = [], []

    def __call__(self, description):
        from contextlib import contextmanager

        @contextmanager
        def bar():
            self.opened.append(description)
            yield lambda fraction=None, text=None: self.updates.append((fraction, text))
        return bar()


@pytest.mark.parametrize("command", ["patch", "lens", "report"])
def test_long_patch_lens_and_report_show_progress(command, monkeypatch, tmp_path):
    monkeypatch.setattr(progress_mod, "LONG_WORK", 0.0)  # every run counts as long here
    seen = Recorder()
    m = api.load(**SMALL, progress=seen)
    if command == "patch":
        m.patch("hello", corrupt="jello", answer="o", wrong="x")
        assert seen.opened == ["patching 10 cells"]
        assert seen.updates[-1][0] == 1.0 and "10 of 10 cells" in seen.updates[-1][1]
    elif command == "lens":
        m.lens("hello")
        assert seen.opened == ["logit lens"] and seen.updates[-1][0] == 1.0
        assert "block 2 of 2" in seen.updates[1][1]
    else:
        m.report("hello", output=tmp_path / "r.html")
        assert seen.opened == ["report"] and "block 2 of 2" in seen.updates[-1][1]


def test_quick_work_shows_no_progress():
    seen = Recorder()
    api.load(**SMALL, progress=seen).patch("hello", corrupt="jello", answer="o", wrong="x")
    assert seen.opened == []



def test_float16_on_the_cpu_says_it_is_slower_not_faster():
    """Item 10: float16 patch ran 3x slower than float32 on the CPU without a word."""
    out = CliRunner().invoke(app, ["next", "hi", *SMALL_ARGS, "--dtype", "float16", "--json"])
    assert out.exit_code == 0, out.stderr
    assert "float16 on the CPU saves memory, not time" in out.stderr
    json.loads(out.stdout)  # the note is on stderr only
    plain = CliRunner().invoke(app, ["next", "hi", *SMALL_ARGS, "--json"])
    assert "float16" not in plain.stderr

# -- item 11: streamed generation's progress never overwrites the text ------------------
def screen(data: str, width: int) -> list[str]:
    """What a terminal shows after `data`: printable text, \\r, \\n, and the cursor-up,
    erase-line and erase-below sequences Rich and the stream use (others ignored)."""
    rows, r, c, i = [[]], 0, 0, 0
    while i < len(data):
        m = re.match(r"\x1b\[\??([0-9;]*)([A-Za-z])", data[i:])
        if m:
            n = int(m.group(1)) if m.group(1).isdigit() else 1
            if m.group(2) == "A":
                r = max(0, r - n)
            elif m.group(2) == "J":
                rows[r] = rows[r][:c]
                del rows[r + 1:]
            elif m.group(2) == "K":
                rows[r] = [] if m.group(1) == "2" else rows[r][:c]
            i += len(m.group(0))
            continue
        ch = data[i]
        if ch == "\r":
            c = 0
        elif ch == "\n" or c >= width:
            r, c = r + 1, 0
            while len(rows) <= r:
                rows.append([])
            if ch != "\n":
                continue
        else:
            row = rows[r]
            row.extend(" " * (c - len(row)))
            row[c:c + 1] = [ch]
            c += 1
        i += 1
    return ["".join(row).rstrip() for row in rows]


def test_a_bar_while_text_streams_keeps_the_text(tmp_path):
    """A streamed model reads its parts for every token, under a bar; the text written so
    far must still be on the screen, whole, after every bar."""
    from tfx_cli.render.views.generate import TextStream

    text = tmp_path / "t.txt"
    text.write_text("hello there, I am a small model reading bytes. " * 3, encoding="utf-8")
    api.train(config="gpt124m", layers=2, d_model=16, heads=2, context=32, text=text,
              output=tmp_path / "dec", steps=2, tokenizer="char")
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=40, color_system=None)
    prompt = "hello there, I am a small model"  # wraps: the bar must not eat its rows
    stream = TextStream(buf, prompt, console=console)
    # --force: stream at 20kB, and let the run hold more than that
    m = api.load(weights=str(tmp_path / "dec"), max_memory="20kB", force=True,
                 progress=stream.progress)
    assert m.module.residency.streamed  # one part at a time, under a bar for each token
    result = m.generate(prompt, max_new_tokens=12, on_text=stream.write)
    stream.close()
    shown = "".join(screen(buf.getvalue(), 40))
    assert shown.replace(" ", "") == (prompt + result.completion).replace("\n", "").replace(
        " ", "")  # every character written, in order, and nothing else left on screen
    assert "streaming" in buf.getvalue()  # the bars were drawn (and then taken away)


# -- item 12: damaged trained folders ---------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained") / "toy"
    api.train(config="toy", pairs=PAIRS, output=out, steps=5)
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_a_vocab_shorter_than_the_table_is_refused(trained, tmp_path):
    folder = _copy(trained, tmp_path / "short")
    (folder / "vocab.json").write_text('{"format": "tfx-vocab/1", "kind": "word", '
                                       '"tokens": []}', encoding="utf-8")
    line = refused("generate", "you win", "-w", str(folder), "-n", "2")
    assert "holds 4 tokens but" in line and "the folder is damaged" in line



@pytest.mark.parametrize("content", ["", "{}", '{"format": "tfx-vocab/1"}'])
def test_an_empty_vocab_is_refused_not_read_as_unused_tokens(trained, tmp_path, content):
    """Beside the short list above (the issue's empty vocabulary): an empty file or one
    without tokens stays refused as well."""
    folder = _copy(trained, tmp_path / "empty")
    (folder / "vocab.json").write_text(content, encoding="utf-8")
    line = refused("generate", "you win", "-w", str(folder), "-n", "2")
    assert "vocab.json is not a tfx vocabulary" in line and "<unused" not in line

def test_a_missing_vocab_names_the_file_the_folder_lost(trained, tmp_path):
    folder = _copy(trained, tmp_path / "novocab")
    (folder / "vocab.json").unlink()
    line = refused("next", "you win", "-w", str(folder))
    assert "has no vocab.json" in line and "tokenizer.json" not in line


def test_train_output_is_checked_before_training(tmp_path):
    seen = Recorder()
    with pytest.raises(TfxError) as caught:
        api.train(config="toy", pairs=PAIRS, output=tmp_path / "no" / "sub" / "out",
                  progress=seen)
    assert "does not exist" in caught.value.message and seen.opened == []
    assert "--output is empty" in refused("train", "-c", "toy", "--pairs", str(PAIRS),
                                          "-o", "")


def test_a_trained_folder_has_one_mode_for_every_file(trained):
    modes = {stat.S_IMODE(p.stat().st_mode) for p in trained.iterdir()}
    umask = os.umask(0)
    os.umask(umask)
    assert modes == {0o666 & ~umask}
    assert stat.S_IMODE(trained.stat().st_mode) == 0o777 & ~umask


# -- item 13: the docs say what tfx does -------------------------------------------------
def readme() -> str:
    """The documentation's text: README.md and every page of docs/."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n\n".join(p.read_text(encoding="utf-8") for p in pages)


def test_readme_attribution_on_post_ln_names_what_works():
    text = readme()
    paragraph = text[text.index("Post-LN models ("):][:400]
    assert "toy, vaswani)" not in paragraph
    config = re.search(r"`(tests/[\w.]+\.json)`", paragraph).group(1)
    doc = ok_json("attribute", SENTENCE, "-c", str(ROOT / config), "--answer", "win")
    assert abs(doc["result"]["unexplained"]) < 1e-5
    # the encoder–decoders it names run too (the decoder's parts, post-LN as well)
    seq2seq = ok_json("attribute", SENTENCE, *TOY, "--answer", "win")
    assert abs(seq2seq["result"]["unexplained"]) < 1e-5


def test_readme_says_which_stacks_run_without_target():
    text = readme()
    sentence = text[text.index("`logits`. Without `--target`"):].split("\n\n")[0]
    encoder_only, decoder = sentence.split("run the encoder only;")
    for command in re.findall(r"`(\w+)`", encoder_only.split("Without")[1]):
        if command == "logits":
            continue
        extra = ["--answer", "win"] if command == "attribute" else []
        args = [command, SENTENCE, *TOY, *extra]
        if command == "report":
            doc = ok_json(*args)
            assert doc["result"]["stack"] == "encoder" and not doc["result"]["next_tokens"]
        else:
            doc = ok_json(*args)
            names = list(doc.get("tensors") or {})
            assert not any(n.startswith("decoder.") for n in names), command
    for command in re.findall(r"`(\w+)`", decoder.split("predict")[0]):
        extra = ["-n", "1"] if command == "generate" else []
        doc = ok_json(command, SENTENCE, *TOY, *extra)
        assert doc["result"]["stack"] == "decoder", command
        assert doc["input"]["target"]["tokens"] == ["<start>"]


def test_the_header_writes_control_characters_as_the_views_do():
    out = run("tokenize", "a\x1b[31mb")
    assert out.exit_code == 0
    header = out.stdout.splitlines()[1]
    assert "<0x1B>" in header and "\\x1b" not in header


@pytest.mark.slow
def test_readme_bfloat16_probability_is_this_cpus():
    capability = torch.backends.cpu.get_cpu_capability()
    doc = ok_json("next", "The capital of France is", "-w", "smollm2", "--dtype", "bfloat16")
    p = doc["result"]["greedy"]["prob"]
    if capability == "AVX2":
        assert f"{p:.4f} on an AVX2 CPU" in " ".join(readme().split())
    assert abs(p - 0.7725) < 0.06  # the bound the docs' table gives


# -- item 14: smaller ones ----------------------------------------------------------------
def test_an_emoji_answer_suggests_nothing_that_splits():
    gpt2 = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2"]
    line = refused("attribute", "hello", *gpt2, "--answer", "💥")
    assert "e.g. --answer" not in line and "no single token of this tokenizer spells it" in line
    split = refused("attribute", "hello", *gpt2, "--answer", " Paris is")
    assert "e.g. --answer ' Paris'" in split


def test_a_decoder_position_counts_the_target():
    line = refused("next", SENTENCE, *TOY, "--target", "you win",
                   "--ablate", "decoder.blocks.0.cross.pattern:p=5")
    assert "the target (with its start token) has 3 tokens" in line


def test_steer_tokens_ids_points_to_an_embedding_site():
    line = refused("next", "hi", *SMALL_ARGS, "--steer", "tokens.ids", "--toward", "a",
                   "--away", "b")
    assert "ablate" not in line and "use embed.tok or embed.out" in line


def test_stdin_is_read_once():
    line = refused("patch", "-", "--corrupt", "-", "--answer", "a", "--wrong", "b",
                   *SMALL_ARGS, input=b"hello")
    assert "standard input can be read once" in line


def test_truncate_crops_a_long_target(tmp_path):
    corpus = tmp_path / "words.txt"
    corpus.write_text(" ".join(f"w{i}" for i in range(100)))
    target = " ".join(f"w{i}" for i in range(100))
    line = refused("next", "w1", *TOY, "--corpus", str(corpus), "--target", target)
    assert "pass --truncate" in line
    doc = ok_json("next", "w1", *TOY, "--corpus", str(corpus), "--target", target,
                  "--truncate")
    tokens = doc["input"]["target"]["tokens"]
    assert len(tokens) == 64 and tokens[0] == "<start>" and tokens[-1] == "w99"


def test_a_glob_as_a_site_says_sites_are_names():
    line = refused("next", "hi", *SMALL_ARGS, "--ablate", "blocks.*.attn.out")
    assert "is a glob" in line and "blocks.0.attn.out,blocks.1.attn.out" in line


def test_select_takes_resid_pre_as_steer_does():
    doc = ok_json("trace", "hello", *SMALL_ARGS, "-s", "blocks.1.resid_pre")
    plain = ok_json("trace", "hello", *SMALL_ARGS, "-s", "blocks.0.resid_out")
    assert list(doc["tensors"]) == ["blocks.1.resid_pre"]
    assert doc["tensors"]["blocks.1.resid_pre"]["data"] == \
        plain["tensors"]["blocks.0.resid_out"]["data"]


def test_tokenize_with_weights_titles_itself_by_them():
    out = run("tokenize", "hi", "-w", "minilm")
    assert out.exit_code == 0
    assert out.stdout.splitlines()[0].startswith("tfx tokenize · minilm")
