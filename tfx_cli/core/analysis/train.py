"""`tfx train`: fit a small model to a few examples, as seed 001 describes training.

The model sees the target, errs, is corrected (cross-entropy), its weights are updated
(Adam), and again, until it answers right. An encoder–decoder learns source -> target
pairs with teacher forcing: the decoder reads <start> and the target, and must predict
the target and then <end> at each position. A decoder-only model learns its text's next
tokens. The vocabulary is built from the training data itself (a word or character
tokenizer), so the checkpoint needs nothing but its own folder:

    DIR/tfx-model.json     the architecture (ModelConfig) and what was trained
    DIR/model.safetensors  the weights, in tfx's names (tied tensors once)
    DIR/vocab.json         the vocabulary: the tokenizer kind (word or char) and its tokens
                           in id order after the kind's special tokens

Deterministic: the same seed, data and options give byte-identical files (one CPU
thread for the arithmetic, no randomness but the seeded initialisation).
"""
from __future__ import annotations

import json
import math
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ...errors import ConfigError, InputTextError, NonFiniteError, UsageError
from ..config import ModelConfig
from ..model import build_model, finite
from ..outputs import atomic_folder, check_new_folder
from ..tokenizers import (END, START, VOCAB_FILE, VOCAB_FORMAT, CharTokenizer,
                         WordTokenizer)
from .fillmask import need_causal

FORMAT = "tfx-model/1"
MODEL_FILE, CONFIG_FILE = "model.safetensors", "tfx-model.json"


@dataclass
class TrainData:
    pairs: list[tuple[str, str]] | None = None  # encoder–decoder: (source, target)
    text: str | None = None  # decoder-only: one text, next-token prediction
    source: str = ""  # where it came from, for the record


def read_pairs(path: Path) -> TrainData:
    """A TSV of `source<TAB>target` lines; blank lines and lines starting with # skipped."""
    text = _read(path, "--pairs")
    pairs = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise InputTextError(f"{path} line {n} is not `source<TAB>target`; write one "
                                 "pair per line, the two texts separated by a tab")
        pairs.append((parts[0].strip(), parts[1].strip()))
    if not pairs:
        raise InputTextError(f"{path} holds no pairs; write `source<TAB>target` lines")
    return TrainData(pairs=pairs, source=str(path))


def read_text_file(path: Path) -> TrainData:
    text = _read(path, "--text")
    if not text.strip():
        raise InputTextError(f"{path} is empty; give the text to learn")
    return TrainData(text=text, source=str(path))


def _read(path: Path, option: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputTextError(f"{option} file {path} does not exist") from None
    except IsADirectoryError:
        raise InputTextError(f"{option} {path} is a folder; pass a UTF-8 text file") from None
    except UnicodeDecodeError as exc:
        raise InputTextError(f"{option} file {path} is not UTF-8 (byte {exc.start}); "
                             "convert it, e.g. with iconv -t utf-8") from None
    except OSError as exc:
        raise InputTextError(f"cannot read {option} file {path}: {exc.strerror or exc}") from None


def vocab_kind(cfg: ModelConfig, tokenizer: str | None) -> str:
    """word or char: the one asked for, else the config's when it is one of them, else
    word (a GPT config's BPE has no vocabulary to build)."""
    if tokenizer:
        return tokenizer
    return cfg.tokenizer if cfg.tokenizer in ("word", "char") else "word"


def vocabulary(kind: str, data: TrainData):
    """A word or char tokenizer whose vocabulary is the training data's tokens. Pairs
    need the decoder's <start> and <end>: the word vocabulary has them among its specials;
    the char one gets them as its first two items (no text splits into them, and
    vocab.json keeps them with the characters)."""
    corpus = "\n".join(f"{s}\n{t}" for s, t in data.pairs) if data.pairs else data.text
    if kind == "word":
        return WordTokenizer(corpus)
    if kind == "char":
        if data.pairs:
            return CharTokenizer.of_tokens([START, END] + CharTokenizer(corpus).vocab[1:])
        return CharTokenizer(corpus)
    raise ConfigError(f"tfx train builds its vocabulary from the data, with the word or char "
                      f"tokenizer; this config reads {kind!r}: pass --tokenizer word")


@dataclass
class Trained:
    cfg: ModelConfig
    model: torch.nn.Module
    tokenizer: object
    losses: list[float]
    steps: int


def examples(cfg: ModelConfig, tok, data: TrainData) -> list[tuple]:
    """Training examples as id tensors: (source, decoder input, labels) for pairs,
    (input, labels) windows of the context length for a text."""
    out = []
    if data.pairs:
        start, end = tok.stoi[START], tok.stoi[END]
        for src, tgt in data.pairs:
            s, t = tok.encode(src), tok.encode(tgt)
            if max(len(s), len(t) + 1) > cfg.context_length:
                raise InputTextError(f"the pair {src!r} -> {tgt!r} is longer than the "
                                     f"context length {cfg.context_length}; shorten it")
            out.append((torch.tensor([s]), torch.tensor([[start] + t]),
                        torch.tensor(t + [end])))
        return out
    ids = tok.encode(data.text)
    if len(ids) < 2:
        raise InputTextError("the text has fewer than two tokens: nothing to predict")
    C = cfg.context_length
    for i in range(0, len(ids) - 1, C):
        chunk = ids[i:i + C + 1]
        if len(chunk) >= 2:
            out.append((torch.tensor([chunk[:-1]]), torch.tensor(chunk[1:])))
    return out


def check_training(cfg: ModelConfig, data: TrainData, *, steps: int, lr: float,
                   tokenizer: str | None = None) -> None:
    """Refuse what cannot be trained, before any work."""
    if not math.isfinite(lr) or lr <= 0:
        raise UsageError(f"--lr {lr} must be a positive, finite number")
    if steps < 1:
        raise UsageError(f"--steps {steps} must be at least 1")
    if cfg.is_encoder_decoder and not data.pairs:
        raise UsageError(f"{cfg.name} is an encoder–decoder: it learns source -> target "
                         "pairs; pass --pairs FILE.tsv")
    if not cfg.is_encoder_decoder and data.pairs:
        raise UsageError(f"{cfg.name} has one stack: it learns a text's next tokens; pass "
                         "--text FILE, or an encoder–decoder config (toy, vaswani) for "
                         "--pairs")
    if not cfg.lm_head:
        raise ConfigError(f"{cfg.name} has no output head to train; choose a config with one")
    need_causal(cfg, "train")  # masking a text to learn from is not what train does
    vocabulary(vocab_kind(cfg, tokenizer), TrainData(text="x"))  # word or char only


def train(cfg: ModelConfig, data: TrainData, *, steps: int = 300, lr: float = 0.01,
          seed: int = 123, tokenizer: str | None = None,
          on_step: Callable[[int, float], None] | None = None) -> Trained:
    """Adam on the mean cross-entropy over every example, `steps` full-batch updates."""
    check_training(cfg, data, steps=steps, lr=lr)
    kind = vocab_kind(cfg, tokenizer)
    tok = vocabulary(kind, data)
    changes: dict = {"vocab_size": tok.vocab_size, "tokenizer": kind}

    if cfg.is_encoder_decoder:
        changes.update(decoder_start_id=tok.stoi[START], eos_ids=(tok.stoi[END],))
    else:
        changes.update(decoder_start_id=None, eos_ids=())
    cfg = replace(cfg, **changes)
    batch = examples(cfg, tok, data)
    stack = ExitStack()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same sums in the same order, every run
    step = 0
    try:
        with torch.enable_grad(), torch.inference_mode(False):
            model = build_model(cfg, seed)
            stack.enter_context(finite.hinting(model, lower_lr(lr)))
            model.train()
            params = [p for p in model.parameters() if p.requires_grad]
            optimiser = torch.optim.Adam(params, lr=lr)
            losses = []
            for step in range(steps):
                optimiser.zero_grad(set_to_none=True)
                total = 0.0
                loss_sum = None
                for example in batch:
                    if cfg.is_encoder_decoder:
                        src, dec_in, labels = example
                        logits = model(src, target=dec_in)[0]
                    else:
                        ids, labels = example
                        logits = model(ids)[0]
                    loss = F.cross_entropy(logits, labels)
                    loss_sum = loss if loss_sum is None else loss_sum + loss
                    total += float(loss.detach())
                if not math.isfinite(total):
                    raise finite.refuse(model, "the loss", "nan" if total != total else "inf")
                (loss_sum / len(batch)).backward()
                optimiser.step()
                losses.append(total / len(batch))
                if on_step is not None:
                    on_step(step, losses[-1])
            broken = [name for name, p in model.named_parameters() if not finite.is_finite(p)]
            if broken:  # the last update (no forward after it shows it)
                raise finite.refuse(model, f"the weight {broken[0]}", "not finite")
    except NonFiniteError as exc:  # say at which step, and write nothing
        raise NonFiniteError(f"training diverged at step {step + 1} of {steps}: "
                             f"{exc.message}") from None
    finally:
        stack.close()
        torch.set_num_threads(threads)
    model.eval().requires_grad_(False)
    return Trained(cfg, model, tok, losses, steps)


def lower_lr(lr: float) -> str:
    """The fix a diverging run suggests: a ten times lower learning rate, or the default
    (0.01) when that is lower still."""
    return f"lower --lr (now {lr:g}), e.g. --lr {min(lr / 10, 0.01):g}"


def check_output(out: Path, force: bool = False) -> Path:
    """Where the folder goes: refused before any training when it exists (without
    `force`) or its parent folder does not; returns the parent."""
    out = Path(out)
    if not str(out).strip() or out == Path("."):
        raise UsageError("--output is empty; give the folder to write, e.g. -o toy-trained")
    return check_new_folder(out, force, error=UsageError,
                            exists="{folder} exists; choose another --output, or pass "
                                   "--force to replace it",
                            no_parent="the folder {parent} does not exist; create it or "
                                      "choose another --output")


def save(trained: Trained, out: Path, *, record: dict, force: bool = False) -> Path:
    """Write the checkpoint folder whole under a temporary name, then move it into place;
    an existing folder is replaced only with `force`."""
    from safetensors.torch import save_file

    out = Path(out)
    check_output(out, force)  # its messages; atomic_folder checks again as it writes
    model = trained.model
    skip = set(model.tied())
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()
             if k not in skip}
    cfg, tok = trained.cfg, trained.tokenizer
    vocab = {"format": VOCAB_FORMAT, "kind": tok.kind, "tokens": tok.vocab[len(tok.specials):]}
    config = cfg.to_dict()
    config.pop("name", None)
    config["tokenizer"] = VOCAB_FILE  # read from the folder (weights.checkpoint_config)
    doc = {"format": FORMAT, "config": config, "trained": record}

    def write(tmp: Path) -> None:
        save_file(state, str(tmp / MODEL_FILE), metadata={"format": FORMAT})
        (tmp / CONFIG_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        (tmp / VOCAB_FILE).write_text(json.dumps(vocab, ensure_ascii=False) + "\n",
                                      encoding="utf-8")

    atomic_folder(out, write, force=force, prefix=".tfx-train-", readable=True)
    return out




def check(trained: Trained, data: TrainData, limit: int = 8) -> list:
    """Greedy answers of the trained model on (up to `limit`) training examples."""
    from ..results import TrainCheck
    from .decode import decode

    tok, model, cfg = trained.tokenizer, trained.model, trained.cfg
    out = []
    if data.pairs:
        end = tok.stoi[END]
        for src, tgt in data.pairs[:limit]:
            want = tok.encode(tgt)
            got = decode(model, tok.encode(src), max_new_tokens=len(want) + 1,
                         should_stop=lambda ids: "eos" if ids[-1] == end else None).ids[1:]
            said = tok.decode([i for i in got if i != end])
            out.append(TrainCheck(source=src, target=tok.decode(want), said=said,
                                  exact=got == want + [end]))
        return out
    ids = tok.encode(data.text)[:cfg.context_length + 1]
    got = decode(model, ids[:1], max_new_tokens=len(ids) - 1).ids
    out.append(TrainCheck(source=None, target=tok.decode(ids), said=tok.decode(got),
                          exact=got == ids))
    return out


def run(cfg: ModelConfig, data: TrainData, output: Path, *, steps: int, lr: float, seed: int,
        tokenizer: str | None = None, force: bool = False, progress=None):
    """Train, write the folder, check the examples: the TrainResult of `tfx train`."""
    from ..params import total_params
    from ..results import ModelInfo, TrainResult

    output = Path(output)
    check_output(output, force)  # before the work, not after it
    check_training(cfg, data, steps=steps, lr=lr, tokenizer=tokenizer)
    from contextlib import nullcontext

    with (progress(f"training {cfg.name}") if progress else nullcontext()) as update:
        def on_step(step: int, loss: float) -> None:
            if update is not None:
                update((step + 1) / steps, f"training {cfg.name}: step {step + 1}/{steps}, "
                       f"loss {loss:.4f}")

        trained = train(cfg, data, steps=steps, lr=lr, seed=seed, tokenizer=tokenizer,
                        on_step=on_step)
    checks = check(trained, data)
    record = {"data": Path(data.source).name, "steps": steps, "lr": lr, "seed": seed,
              "loss_first": trained.losses[0], "loss_last": trained.losses[-1]}
    save(trained, output, record=record, force=force)
    return TrainResult(
        model=ModelInfo(config=cfg.name, weights=None, seed=seed, cfg=trained.cfg),
        output=str(output), data=data.source,
        examples=len(data.pairs) if data.pairs else len(examples(trained.cfg,
                                                                 trained.tokenizer, data)),
        steps=steps, lr=lr, seed=seed, vocab_size=trained.cfg.vocab_size,
        params=total_params(trained.cfg), loss_first=trained.losses[0],
        loss_last=trained.losses[-1], losses=trained.losses, checks=checks,
        all_exact=all(c.exact for c in checks) if data.pairs else None)


__all__ = ["train", "save", "run", "check", "read_pairs", "read_text_file", "TrainData",
           "Trained", "FORMAT", "CONFIG_FILE", "MODEL_FILE"]
