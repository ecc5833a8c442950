"""Terminal views of `tfx generate`, `tfx next` and `tfx lens`, and the stderr text stream.

Tokens are shown with whitespace made visible (space ·, newline ↵) and always as Text,
never markup, so a token such as "[/b]" prints literally.
"""
from __future__ import annotations

from typing import TextIO

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.results import GenerateResult, GenerateSettings, LensResult, NextResult
from ...core.tokenizers.base import visible
from ...words import counted
from ..common import display_tokens, terminal_text
from ..matrix import HeatScale, TensorView, format_number, head_tail, label_text, needs_sci
from . import ViewOptions, header, kv_table, register, shapes_table

PROBS = HeatScale(0.0, 1.0)  # one fixed scale: a shade means the same probability everywhere
CUT = "…"
CELL = 10  # width of a token cell
MAX_STEP_TENSORS = 3  # tensors recorded per step drawn before "--full shows all"


class TextStream:
    """Echo the text while it is produced: the prompt once, then each new piece.

    Progress shown while the text streams (a streamed model reads its parts from disk for
    every token) must never overwrite it: `progress` is the factory to hand the model.
    Before the text starts it is render.emit.progress; once text is on a terminal, a bar
    runs in a Rich Live region holding the line being written and the bar below it
    (finished lines are printed above the region, so they stay put), and the line is
    left on the screen when the region closes. Off a terminal, progress during the
    stream prints nothing: it would break the text's line."""

    def __init__(self, file: TextIO, prompt: str, *, spaced: bool = False,
                 console: Console | None = None, before=None):
        """spaced: put a space between the prompt and a first piece that starts without
        one (an encoder–decoder's target prefix, whose new words decode on their own).
        console: the terminal the live region draws on (default: one on `file`).
        before: the progress factory for work before the text starts (the command passes
        render.emit.progress; views do not import emit, which imports them)."""
        self.file, self.prompt, self.started, self.spaced = file, prompt, False, spaced
        self.console = console
        self.before = before
        self.line = ""  # the text written since the last newline
        self.live = None  # (Live, Progress) while a bar runs below the text

    @property
    def terminal(self) -> bool:
        return self._console().is_terminal

    def _console(self) -> Console:
        if self.console is None:
            self.console = Console(file=self.file, highlight=False, emoji=False)
        return self.console

    def write(self, chunk: str) -> None:
        # model output must not drive the terminal: control characters are written out
        text = ""
        if not self.started:
            text = terminal_text(self.prompt)
            if self.spaced and self.prompt and chunk and not chunk[0].isspace():
                text += " "
            self.started = True
        text += terminal_text(chunk)
        if self.live is None:
            self.file.write(text)
            self.file.flush()
            self.line = (self.line + text).rsplit("\n", 1)[-1]
            return
        live, bar = self.live
        *done, self.line = (self.line + text).split("\n")
        for line in done:  # finished lines go above the region and stay
            live.console.print(Text(line), soft_wrap=True)
        live.update(self._region(bar), refresh=True)

    def _region(self, bar=None):
        from rich.console import Group

        text = Text(self.line)
        return Group(text, bar) if bar is not None else text

    def progress(self, description: str):
        """A progress factory like render.emit.progress that leaves the text intact."""
        from contextlib import contextmanager

        @contextmanager
        def bar():
            if not self.started:
                if self.before is None:
                    yield lambda fraction=None, text=None: None
                    return
                with self.before(description) as update:
                    yield update
                return
            if not self.terminal:
                yield lambda fraction=None, text=None: None
                return
            if self.live is None:
                self._open_live()
            live, bars = self.live
            task = bars.add_task(description, total=1.0)
            live.update(self._region(bars), refresh=True)

            def update(fraction=None, text=None):
                bars.update(task, completed=fraction, description=text or description)

            try:
                yield update
            finally:
                bars.remove_task(task)
                live.update(self._region(bars if bars.tasks else None), refresh=True)

        return bar()

    def _open_live(self) -> None:
        """Take the line being written into a live region: erase it from the screen (it
        may wrap over several rows) and draw it again inside the region."""
        from rich.cells import cell_len
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = self._console()
        self.file.flush()
        rows = max(1, -(-cell_len(self.line) // max(console.width, 1)))
        self.file.write(("\x1b[1A" * (rows - 1)) + "\r\x1b[J")
        bars = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                        console=console)
        live = Live(self._region(), console=console, auto_refresh=False,
                    vertical_overflow="visible")
        live.start()
        self.live = (live, bars)

    def close(self) -> None:
        if self.live is not None:
            live, _ = self.live
            live.update(self._region(), refresh=True)
            live.stop()  # leaves the line on the screen, and ends it
            self.live = None
            return
        if self.started:
            self.file.write("\n")
            self.file.flush()


def token_text(piece: str, style: str = "") -> Text:
    return Text(visible(piece), style=style, no_wrap=True)


def prob_text(p: float, precision: int, sci: bool = False) -> Text:
    return Text(format_number(p, precision, sci), style=PROBS.style(p) or "")


def _candidate_cell(token: str, prob: float, chosen: bool, precision: int, sci: bool) -> Text:
    """Token over probability, shaded by the probability; the chosen one underlined."""
    text = label_text(visible(token), CELL)
    if chosen:
        text.stylize("bold underline")
    text.append("\n" + format_number(prob, precision, sci))
    text.stylize(PROBS.style(prob) or "")
    return text


def _settings_line(settings: GenerateSettings) -> dict:
    shown = {"decoding": settings.decoding}
    if settings.decoding == "sample":
        shown.update(temperature=settings.temperature, seed=settings.seed)
    if settings.top_k is not None:
        shown["top-k"] = settings.top_k
    if settings.top_p is not None:
        shown["top-p"] = settings.top_p
    shown["kv cache"] = "on" if settings.cache else "off"
    return shown


# ---------------------------------------------------------------- generate

def _fitting_candidates(width: int, fixed: int, cell: int, k: int) -> int:
    return max(0, min(k, (width - fixed) // (cell + 3)))


def _step_axes(result: GenerateResult, i: int) -> dict[str, list[str]]:
    """Labels for step i's tensors: S every token read so far (the prompt and the
    tokens chosen before step i, cropped to the context), T the positions fed this step
    (one, the newest token, with a warm cache)."""
    step = result.steps[i]
    so_far = result.tokens + [s.token for s in result.steps[:i]]
    keys = display_tokens(so_far[-step.context:])
    return {"S": keys, "T": keys[-step.fed:]}


@register("generate")
def generate_view(result: GenerateResult, console: Console, opts: ViewOptions) -> None:
    steps = result.steps
    header(console, result)
    console.print()
    if result.stack == "decoder":  # an encoder–decoder: the target, what came before dim
        before = result.text[:len(result.text) - len(result.completion)] \
            if result.text.endswith(result.completion) else ""
        console.print(Text(terminal_text(before), style="dim") +
                      Text(terminal_text(result.text[len(before):]), style="bold"))
    else:
        console.print(Text(terminal_text(result.input.text), style="dim") +
                      Text(terminal_text(result.completion), style="bold"))
    console.print()
    sampled = result.settings.decoding == "sample"
    probs = [s.prob for s in steps] + [c.prob for s in steps for c in s.candidates]
    sci = needs_sci(np.array(probs, dtype=float), opts.precision)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, title_justify="left",
                  title=Text(counted(len(steps), "step"), style="bold"))
    table.add_column("step", justify="right", style="dim", no_wrap=True)
    table.add_column("pos", justify="right", style="dim", no_wrap=True)
    table.add_column("chosen", no_wrap=True, width=CELL)
    if sampled:
        table.add_column("sample p", justify="right", no_wrap=True)
    table.add_column("entropy", justify="right", no_wrap=True)
    pos_width = max(3, len(str(steps[-1].position))) if steps else 3
    fixed = 7 + pos_width + 3 + CELL + 3 + 10 + (11 if sampled else 0)  # columns above, padded
    k = max((len(s.candidates) for s in steps), default=0)
    shown = k if opts.full else _fitting_candidates(console.width, fixed, CELL, k)
    for rank in range(shown):
        table.add_column(f"#{rank + 1}", no_wrap=True, width=CELL)
    for n, step in enumerate(steps):
        chosen = _candidate_cell(step.token, step.prob, False, opts.precision, sci)
        chosen.stylize("bold", 0, len(chosen.plain.split("\n")[0]))
        row = [str(n), str(step.position), chosen]
        if sampled:
            row.append(prob_text(step.sample_prob, opts.precision))
        row.append(format_number(step.entropy, opts.precision))
        row += [_candidate_cell(c.token, c.prob, c.id == step.id, opts.precision, sci)
                for c in step.candidates[:shown]]
        table.add_row(*row)
    console.print(table)
    stopped = result.stopped
    if stopped == "eos" and steps:
        stopped = f"eos: the model ended its text ({visible(steps[-1].token)})"
    footer = {"stopped by": stopped, **_settings_line(result.settings)}
    if shown < k:
        footer["candidates"] = f"{shown} of {k} shown (--full or --json for all)"
    console.print(kv_table(footer, precision=opts.precision))
    if len(result.tensors):
        console.print()
        console.print(shapes_table(result.tensors, title="recorded per step"))
        names = result.tensors.names()
        drawn = names if opts.full else names[:MAX_STEP_TENSORS]
        for name in drawn:
            # step.{i}.<name>: label the axes with the tokens of that step
            i = int(name.split(".")[1])
            console.print(TensorView(name, result.tensors.array(name),
                                     result.tensors.dims(name), axes=_step_axes(result, i),
                                     precision=opts.precision, full=opts.full))
        if len(drawn) < len(names):
            console.print(Text(f"… {counted(len(names) - len(drawn), 'more tensor')} "
                               "recorded (--full shows all, --json holds all)", style="dim"))


# ---------------------------------------------------------------- next

@register("next")
def next_view(result: NextResult, console: Console, opts: ViewOptions) -> None:
    settings = result.settings
    header(console, result)
    plain = (settings.temperature == 1 and settings.top_k is None and settings.top_p is None)
    if result.masks:  # a masked LM: one table per mask token
        _masks_view(result, console, opts, plain)
        return
    title = f"next token after position {result.position - 1}"
    sci = needs_sci(np.array([c.prob for c in result.candidates]), opts.precision)
    console.print()
    console.print(_candidates_table(title, result.candidates, settings, plain, sci, opts))
    footer = _next_footer(result, settings, plain, sci, opts)
    if result.context < result.position:
        footer["context"] = f"the last {result.context} tokens (cropped to the context length)"
    console.print(kv_table(footer, precision=opts.precision))


def _candidates_table(title: str, candidates, settings, plain: bool, sci: bool,
                      opts: ViewOptions) -> Table:
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, title_justify="left",
                  title=Text(title, style="bold") if title else None)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("token", no_wrap=True, max_width=16)
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("logit", justify="right", no_wrap=True)
    table.add_column("prob", justify="right", no_wrap=True)
    temperature = format_number(settings.temperature, 2)
    if not plain:
        table.add_column(f"T={temperature}", justify="right", no_wrap=True)
        table.add_column("kept", justify="center", no_wrap=True)
        table.add_column("final p", justify="right", no_wrap=True)
    for cand in candidates:
        row = [str(cand.rank), token_text(cand.token), str(cand.id),
               format_number(cand.logit, opts.precision),
               prob_text(cand.prob, opts.precision, sci)]
        if not plain:
            row += [prob_text(cand.tempered_prob, opts.precision, sci),
                    Text("yes") if cand.kept else Text("cut", style="red"),
                    prob_text(cand.final_prob, opts.precision)]
        table.add_row(*row)
    return table


def _next_footer(pred, settings, plain: bool, sci: bool, opts: ViewOptions) -> dict:
    """Entropy, greedy and what the filters kept, of a NextResult or a MaskPrediction."""
    greedy = pred.greedy
    footer = {"entropy": f"{format_number(pred.entropy, opts.precision)} nats",
              "greedy": f"{visible(greedy.token)} (id {greedy.id}, "
                        f"p {format_number(greedy.prob, opts.precision, sci)})"}
    if not plain:
        footer["kept"] = (f"{pred.kept_tokens:,} tokens holding "
                          f"{format_number(pred.kept_mass, opts.precision)} of the mass at "
                          f"T={format_number(settings.temperature, 2)}; final p "
                          "renormalises them")
    return footer


def _masks_view(result: NextResult, console: Console, opts: ViewOptions, plain: bool) -> None:
    """Fill-mask: each mask's candidates, then the text with every mask filled."""
    settings = result.settings
    tokens = result.tokens
    for pred in result.masks:
        sci = needs_sci(np.array([c.prob for c in pred.candidates]), opts.precision)
        title = f"{result.mask_token} at position {pred.position}"
        around = _around(tokens, pred.position)
        console.print()
        console.print(Text(f"{title}: ", style="bold") + Text(around))
        console.print(_candidates_table(None, pred.candidates, settings, plain, sci, opts))
        footer = _next_footer(pred, settings, plain, sci, opts)
        console.print(kv_table(footer, precision=opts.precision))
    console.print(kv_table({"filled": visible(result.filled or "")},
                           precision=opts.precision))


def _around(tokens: list[str], position: int, width: int = 3) -> str:
    """The mask among its neighbours, for a table's title."""
    lo, hi = max(position - width, 0), min(position + width + 1, len(tokens))
    return " ".join(visible(t) for t in tokens[lo:hi])


# ---------------------------------------------------------------- lens

def _lens_columns(n: int, width: int, cell: int, label: int, full: bool):
    """Positions that fit, cut in the middle with an ellipsis column (--full: all)."""
    fit = max((width - label - 3) // (cell + 3), 2)
    if full:
        return list(range(n)), None
    return head_tail(n, fit if fit < n else n)


@register("lens")
def lens_view(result: LensResult, console: Console, opts: ViewOptions) -> None:
    tokens = display_tokens(result.tokens)
    header(console, result)
    cell = 8
    cols, cut = _lens_columns(len(tokens), console.width, cell, 7, opts.full)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, title_justify="left",
                  title=Text(("top token (masked LM: what belongs at the position)"
                              if result.mask_positions is not None else "top next token")
                             + " per layer (rows) and position (columns)", style="bold"))
    table.add_column("layer", justify="right", style="dim", no_wrap=True)
    order: list = []
    for n, j in enumerate(cols):
        if cut is not None and n == cut:
            table.add_column(CUT, no_wrap=True)
            order.append(None)
        table.add_column(label_text(tokens[j], cell), no_wrap=True, width=cell)
        order.append(j)
    for layer, toks, probs in zip(result.layers, result.top_tokens, result.top_probs):
        row = [layer]
        for j in order:
            if j is None:
                row.append(CUT)
                continue
            text = label_text(visible(toks[j]), cell)
            text.append("\n" + format_number(probs[j], opts.precision))
            text.stylize(PROBS.style(probs[j]) or "")
            row.append(text)
        table.add_row(*row)
    console.print()
    console.print(table)
    console.print(kv_table({
        "read through": result.norm + ", then lm_head and softmax",
        "rows": "embed = embed.out; i = blocks.i.resid_out; the last row is the model's output",
    }))
