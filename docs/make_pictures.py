"""The site's pictures, drawn by tfx itself: `python docs/make_pictures.py DIR`.

Each picture is one `tfx` command line in PICTURES, run through the command-line app in
this process (as `tfx` would run it), on small random-weight models so the whole set takes
seconds. The site's build (docs/generate.py) calls `make` and puts the files under
img/generated/ with the page `page()` writes, which shows each picture beside the command
that drew it; tests/test_docs_generated.py runs `make` too. Nothing here is hand-pasted:
change a view and the pictures change with it.
"""
from __future__ import annotations

import contextlib
import io
import shlex
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# a two-layer GPT-2 with random weights (seed 123) reading whole words
SMALL = "--config gpt2 --layers 2 --d-model 32 --heads 4 --tokenizer word"
TEXT = '"When you play game of thrones"'


class Picture(NamedTuple):
    file: str  # written into the output folder
    title: str
    command: str  # the tfx command line that draws it ({out}: the file's path)
    caption: str


PICTURES = (
    Picture("attend.png", "Attention heat maps",
            f"tfx attend {TEXT} {SMALL} --layer 1 --plot {{out}}",
            "One heat map per head: rows are queries, columns keys, each row a softmax "
            "summing to 1; the causal mask leaves the upper triangle empty."),
    Picture("lens.png", "The logit lens",
            f"tfx lens {TEXT} {SMALL} --plot {{out}}",
            "What each layer would predict if the model stopped there: layers × "
            "positions."),
    Picture("patch.png", "Activation patching",
            f'tfx patch "When you play game of thrones" --corrupt "When you win game of '
            f'thrones" --answer " you" --wrong " die" {SMALL} --plot {{out}}',
            "How much of the clean run's answer comes back when one cell of the clean "
            "run is put into the corrupted one: layers × positions."),
    Picture("route.png", "A mixture of experts' router",
            f"tfx route {TEXT} --config tiny-moe --tokenizer word --plot {{out}}",
            "Each MoE layer's load over the text: how many tokens each expert receives."),
    Picture("scan.png", "Attention heads over a corpus",
            f"tfx scan {{samples}}/corpus.txt {SMALL} -o {{dir}}/scan-run --plot {{out}}",
            "Statistics of every head over the corpus's documents: layers × heads."),
    Picture("report.html", "The HTML report",
            f"tfx report {TEXT} {SMALL} -o {{out}}",
            "One self-contained page: tokens, a layers × heads grid of attention maps, a "
            "clickable head view with hover values, layer-norm statistics and the next "
            "token."),
)


def run_tfx(command: str) -> None:
    """Run one `tfx ...` command line in this process; its output is dropped, a failure
    raises with what it printed."""
    from tfx_cli.cli import app

    args = shlex.split(command)[1:]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            app(args, prog_name="tfx")
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    if code:
        raise RuntimeError(f"`{command}` exited {code}: {err.getvalue().strip()}")


def make(out: Path, pictures=PICTURES) -> list[Path]:
    """Draw every picture into `out`; the paths written, in PICTURES' order."""
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for picture in pictures:
        path = out / picture.file
        run_tfx(picture.command.format(out=shlex.quote(str(path)), dir=shlex.quote(str(out)),
                                       samples=shlex.quote(str(ROOT / "samples"))))
        made.append(path)
    return made


def shell_lines(command: str, width: int = 88) -> str:
    """`command` folded for a page: lines of at most `width` where the words allow, broken
    before an option (kept with its value) with a trailing backslash, so it still pastes
    into a shell."""
    chunks: list[str] = []
    for word in (w if w == "tfx" else shlex.quote(w) for w in shlex.split(command)):
        if word.startswith("-") or not chunks or not chunks[-1].startswith("-"):
            chunks.append(word)
        else:
            chunks[-1] += " " + word
    lines = [chunks[0]]
    for chunk in chunks[1:]:
        if chunk.startswith("-") and len(lines[-1]) + len(chunk) + 3 > width:
            lines.append("    " + chunk)
        else:
            lines[-1] += " " + chunk
    return " \\\n".join(lines)


def page(made: list[Path], base: str = "img/generated/") -> str:
    """The pictures page: each picture under its title, with the command that drew it."""
    lines = ["# Pictures", "",
             "Drawn by `docs/make_pictures.py` each time the site is built, with the "
             "commands shown (small models with random weights, so the patterns are "
             "arbitrary; `--weights smollm2` gives a trained model's). `--plot` needs "
             "matplotlib: `pip install 'tfx-cli[plot]'`.", ""]
    by_name = {path.name for path in made}
    for picture in PICTURES:
        if picture.file not in by_name:
            continue
        shown = picture.command.format(out=picture.file, dir=".", samples="samples")
        lines += [f"## {picture.title}", "", "```console", f"$ {shell_lines(shown)}", "```", "",
                  picture.caption, ""]
        if picture.file.endswith(".html"):
            lines.append(f"[Open the report]({base}{picture.file})")
        else:
            lines.append(f"![{picture.title}]({base}{picture.file})")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    for written in make(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img/generated")):
        print(written)
