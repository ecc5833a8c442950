"""`tfx train-sae COLLECT_DIR --site SITE -o SAE_DIR`: an SAE trained on a collect
folder's rows of one site, written in SAELens's folder format.

The rows are split in corpus order: the last `holdout` of them are held out and judged
at the end (FVU, L0, dead latents); the rest are shuffled once per epoch by a generator
seeded with (seed, epoch), so step s always trains on the same batch. SAE_DIR holds the
run while it trains: train-state.json (what run this is) and train-state.safetensors
(parameters, Adam's moments, the dead-latent counters, the losses so far and the step
reached), each written to a temporary name and renamed. A killed run started again with
the same options continues from the last checkpoint and ends with the same bytes as an
uninterrupted one; other options are refused unless --force. At the end SAE_DIR gets
cfg.json + sae_weights.safetensors (SAELens's format, read by `--sae`), the checkpoint
goes and train-state.json keeps the options and the held-out numbers.

`acts` is a collect folder opened by core.datasets.read.Activations (the API opens it:
the features layer does not import the datasets layer above it).
"""
from __future__ import annotations

import math
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch

from ...errors import NonFiniteError, OutputFileError, RangeError, SelectError, UsageError
from ..outputs import NestedManifest, OutputFolder
from ..progress import counting
from . import metrics
from .formats import SAELENS_CFG, SAELENS_WEIGHTS
from .hooks import hook_name
from .trainer import Trainer, geometric_median
from .write import saelens_files

STATE_JSON, STATE_TENSORS = "train-state.json", "train-state.safetensors"
STATE_SCHEMA = "tfx-train-sae/1"
B_DEC_INITS = ("median", "mean", "zeros")
DEFAULT_LATENTS, DEFAULT_K, DEFAULT_STEPS = 4096, 32, 1000
# Past any SAE trained so far (OpenAI's largest had 16M latents; 100M steps of one token
# would be days): larger numbers are typos, and would not fit the tensors they size.
MAX_LATENTS, MAX_STEPS = 2**24, 10**8
NEVER = 2**62  # a count of tokens no run reaches (--dead-after past it: never dead)
MEDIAN_ROWS = 8192  # rows the geometric median of b_dec's start is taken over
CHECKPOINT_SECONDS = 60.0
LOSS_POINTS = 100  # the loss curve in the result: means over this many spans
# A run whose loss ended above this many times where it began, and whose held-out
# reconstruction is worse than the mean's (FVU above 1), diverged as surely as a NaN run:
# a flat run's span means differ by their noise (well under this), a trained one's fall.
DIVERGED_RISE = 2.0
# the trainer's and SAELens's name of each architecture's activation
ACTIVATIONS = {"standard": "relu", "jumprelu": "jumprelu", "topk": "topk"}


@dataclass(frozen=True)
class TrainOptions:
    """The training options, checked and completed (defaults that depend on the data
    filled in). The fields, in this order, are the options part of the run's identity
    in train-state.json (see `recorded`)."""

    architecture: str  # "topk", "standard": ReLU with an L1 penalty, or "jumprelu"
    latents: int
    k: int | None  # TopK's k; None for a ReLU SAE
    l1: float | None  # the L1 coefficient of a ReLU SAE (JumpReLU: its L0's); None for TopK
    lr: float
    batch_size: int
    steps: int
    b_dec_init: str  # one of B_DEC_INITS
    dead_after: int  # tokens without firing before a latent counts as dead
    aux_k: int  # TopK's auxiliary loss over this many dead latents; 0: off
    aux_coef: float | None  # its weight; None when aux_k is 0

    @property
    def activation(self) -> str:
        """The trainer's and SAELens's name of the activation."""
        return ACTIVATIONS[self.architecture]

    def recorded(self) -> dict:
        """The options as the state file records them (field order, plain values)."""
        return asdict(self)


def resolve_options(*, d_in: int, train_tokens: int, k=None, latents=None, expansion=None,
                    l1=None, lr=4e-4, batch_size=4096, steps=None, epochs=None,
                    b_dec_init="median", dead_after=None, aux_k=None,
                    aux_coef=1 / 32, jumprelu=None) -> TrainOptions:
    """The options checked and completed (defaults that depend on the data filled in).
    `jumprelu`: a JumpReLU's L0 coefficient (train-transcoder's --jumprelu)."""
    if jumprelu is not None:
        return _jumprelu_options(jumprelu, l1=l1, k=k, d_in=d_in, train_tokens=train_tokens,
                                 latents=latents, expansion=expansion, lr=lr,
                                 batch_size=batch_size, steps=steps, epochs=epochs,
                                 b_dec_init=b_dec_init, dead_after=dead_after, aux_k=aux_k,
                                 aux_coef=aux_coef)
    if latents is not None and expansion is not None:
        raise UsageError("--latents and --expansion both give the SAE's width; give one")
    if expansion is not None:
        if not expansion > 0:
            raise RangeError(f"--expansion {expansion} must be above 0 (latents = expansion × "
                             f"d_in, d_in {d_in})")
        if not expansion * d_in <= MAX_LATENTS:
            raise RangeError(f"--expansion {expansion} gives more than {MAX_LATENTS:,} latents "
                             f"(d_in {d_in}); give a smaller one")
        latents = int(round(expansion * d_in))
    latents = DEFAULT_LATENTS if latents is None else latents
    if latents < 1:
        raise RangeError(f"--latents {latents} must be at least 1")
    if latents > MAX_LATENTS:
        raise RangeError(f"--latents {latents:,} is more than {MAX_LATENTS:,}; give a smaller "
                         "width")
    relu = l1 is not None
    if relu:
        if k is not None:
            raise UsageError("--k is TopK's and --l1 trains a ReLU SAE with an L1 penalty; "
                             "give one of them")
        if aux_k:
            raise UsageError("--aux-k is TopK's auxiliary loss; drop it with --l1")
        if not l1 > 0:
            raise RangeError(f"--l1 {l1} must be above 0")
    else:
        k = DEFAULT_K if k is None else k
        if not 1 <= k <= latents:
            raise RangeError(f"--k {k} is out of range: between 1 and the {latents:,} latents")
    if not lr > 0:
        raise RangeError(f"--lr {lr} must be above 0")
    if batch_size < 1:
        raise RangeError(f"--batch-size {batch_size} must be at least 1")
    if batch_size > train_tokens:
        raise RangeError(f"--batch-size {batch_size:,} is more than the {train_tokens:,} "
                         "training tokens; lower it, or collect more tokens")
    if steps is not None and epochs is not None:
        raise UsageError("--steps and --epochs both say how long to train; give one")
    per_epoch = train_tokens // batch_size
    if epochs is not None:
        if not epochs > 0:
            raise RangeError(f"--epochs {epochs} must be above 0")
        if not epochs * per_epoch <= MAX_STEPS:
            raise RangeError(f"--epochs {epochs} is more than {MAX_STEPS:,} steps of "
                             f"--batch-size {batch_size:,}; give fewer epochs")
        steps = max(1, int(math.ceil(epochs * per_epoch)))
    steps = DEFAULT_STEPS if steps is None else steps
    if steps < 1:
        raise RangeError(f"--steps {steps} must be at least 1")
    if steps > MAX_STEPS:
        raise RangeError(f"--steps {steps:,} is more than {MAX_STEPS:,}; give fewer steps")
    if b_dec_init not in B_DEC_INITS:
        raise UsageError(f"--b-dec-init {b_dec_init!r} is not one of {', '.join(B_DEC_INITS)}")
    dead_after = min(10_000_000, train_tokens) if dead_after is None else dead_after
    if dead_after < 1:
        raise RangeError(f"--dead-after {dead_after} must be at least 1 token")
    aux_k = 0 if relu else (min(512, latents // 2) if aux_k is None else aux_k)
    if aux_k < 0:
        raise RangeError(f"--aux-k {aux_k} must be 0 (off) or more")
    return TrainOptions(architecture="standard" if relu else "topk", latents=latents,
                        k=None if relu else k, l1=l1, lr=lr, batch_size=batch_size,
                        steps=steps, b_dec_init=b_dec_init, dead_after=dead_after,
                        aux_k=aux_k, aux_coef=aux_coef if aux_k else None)


def _jumprelu_options(coef, *, l1, k, **rest) -> TrainOptions:
    """A JumpReLU's options: a ReLU's, its L1 coefficient the L0 penalty's."""
    if l1 is not None or k is not None:
        raise UsageError("--jumprelu trains JumpReLU latents with an L0 penalty; --k "
                         "(TopK) and --l1 (ReLU) are other architectures: give one")
    if not coef > 0:
        raise RangeError(f"--jumprelu {coef} must be above 0 (the L0 penalty's coefficient)")
    opts = resolve_options(l1=coef, **rest)
    return TrainOptions(**{**asdict(opts), "architecture": "jumprelu"})


# -- the output folder -------------------------------------------------------------------
class TrainState(NestedManifest):
    """train-state.json: {"schema": "tfx-train-sae/1", "identity": {...}, "complete", and
    at the end "heldout" and "result"}."""

    FILE, SCHEMA, KIND = STATE_JSON, STATE_SCHEMA, "train-sae"


class RunFolder(OutputFolder):
    """SAE_DIR: refused when it holds something else, resumed when it holds this run."""

    MANIFEST = TrainState
    IS_FILE = "-o {path} is a file; give a folder for the SAE"
    STRANGERS = ("-o {path} exists and holds files tfx train-sae did not write; give a new "
                 "or empty folder, or pass --force to write the SAE beside them")
    OTHER_RUN = ("-o {path} holds another training run ({detail}); pass --force to start "
                 "over, or choose another folder")
    WRITE_HINT = "; the last checkpoint is kept, so the same command resumes"
    MAKE_FOLDER = True

    def __init__(self, path: Path, identity: dict, force: bool, products=None):
        """`products`: the files a finished run leaves (default: SAELens's two in path)."""
        self.products = [Path(path) / SAELENS_CFG, Path(path) / SAELENS_WEIGHTS] \
            if products is None else list(products)
        self.resume_from = None  # the checkpoint's tensors, when continuing
        self.finished = None  # the recorded result, when this very run is already done
        super().__init__(path, TrainState.KIND, identity, force=force)

    def start_over(self) -> None:
        """Nothing goes: the new run's files replace the old run's as they are written."""

    def resume(self, record: TrainState) -> None:
        path = self.path
        if record.state.get("complete"):
            if isinstance(record.state.get("result"), dict) and all(
                    file.is_file() for file in self.products):
                self.finished = record.state["result"]  # nothing to do: the run is done
                return
            raise OutputFileError(f"-o {path} holds the finished SAE of this very run; pass "
                                  "--force to train it again, or choose another folder")
        if (path / STATE_TENSORS).exists():
            from safetensors.torch import load_file

            self.resume_from = load_file(str(path / STATE_TENSORS))

    def write_tensors(self, name: str, tensors: dict, metadata: dict | None = None) -> None:
        from safetensors.torch import save_file

        with self.atomic(name) as tmp:
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp),
                      metadata=metadata)


# -- the run -------------------------------------------------------------------------------
def _kept_rows(acts, skip_first):
    """The rows trained and judged: None for every row, else the indices of those past
    each window's first `skip_first` positions."""
    if int(skip_first) != skip_first or skip_first < 0:
        raise RangeError(f"--skip-first {skip_first} must be a whole number of positions, 0 "
                         "or more")
    if not skip_first:
        return None
    # a window's first token is at a document position that is a multiple of ctx
    ctx = int((acts.manifest.get("options") or {}).get("ctx") or 0)
    positions = acts.tokens().column("position").to_numpy()
    return np.flatnonzero((positions % ctx if ctx else positions) >= skip_first)



def split(acts, holdout: float, skip_first: int):
    """(the rows kept, None for all; tokens trained on; tokens held out), checked."""
    if not 0 < holdout < 1:
        raise RangeError(f"--holdout {holdout} must be a fraction between 0 and 1 (0.05: the "
                         "last 5% of the tokens)")
    keep = _kept_rows(acts, skip_first)
    n = acts.n_tokens if keep is None else len(keep)
    held = max(1, int(round(n * holdout)))
    if n - held < 1 or held < 2:
        raise RangeError(f"{acts.path} has {n:,} tokens: too few to hold out {holdout} of "
                         "them and train on the rest; collect more tokens")
    return keep, n - held, held

def train_sae(acts, *, site: str, output, k=None, latents=None, expansion=None, l1=None,
              lr=4e-4, batch_size=4096, steps=None, epochs=None, seed=0, holdout=0.05,
              skip_first=0, b_dec_init="median", dead_after=None, aux_k=None, aux_coef=1 / 32,
              force=False, progress=None, checkpoint_every=500):
    from ..results import TrainSAEResult

    if site not in acts.sites:
        raise SelectError(f"--site {site!r} is not in {acts.path} (it holds "
                          f"{', '.join(acts.sites)}); collect it with tfx collect --select "
                          f"{site}, or name one of those")
    keep, n_train, held = split(acts, holdout, skip_first)
    n = n_train + held
    width = int(next(s for s in acts.manifest["sites"] if s["name"] == site)["shape"][1])
    opts = resolve_options(d_in=width, train_tokens=n_train, k=k, latents=latents,
                           expansion=expansion, l1=l1, lr=lr, batch_size=batch_size,
                           steps=steps, epochs=epochs, b_dec_init=b_dec_init,
                           dead_after=dead_after, aux_k=aux_k, aux_coef=aux_coef)
    manifest = acts.manifest
    identity = {"site": site, "seed": seed, "holdout": holdout, **opts.recorded(),
                **({"skip_first": int(skip_first)} if skip_first else {}),
                "collect": str(Path(acts.path).resolve()), "collect_tokens": n,
                "collect_sha256": manifest.get("tokens_sha256")}
    folder = RunFolder(Path(output).expanduser(), identity, force)
    with folder:  # SAE_DIR held by this run alone until it ends
        if folder.finished is not None:  # the same command again: a no-op, as collect's is
            return TrainSAEResult(**{**folder.finished, "collect": str(acts.path),
                                     "output": str(folder.path),
                                     "resumed_from": opts.steps})
        rows = acts[site] if keep is None else acts[site][keep]
        data = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))
        train, test = data[:n_train], data[n_train:]
        scale = float(math.sqrt(width) /
                      train.to(torch.float64).norm(dim=1).mean().clamp_min(1e-12))
        trainer = Trainer(width, opts.latents, activation=opts.activation, k=opts.k,
                          l1=opts.l1 or 0.0, lr=opts.lr, aux_k=opts.aux_k,
                          aux_coef=opts.aux_coef or 0.0,  # read only when aux_k > 0
                          dead_after=min(opts.dead_after, NEVER), scale=scale, seed=seed,
                          b_dec=_b_dec_start(train, scale, opts.b_dec_init, seed))
        losses, start, seconds = _train(folder, trainer, train, opts, seed=seed,
                                        progress=progress, checkpoint_every=checkpoint_every)
        total, B = opts.steps, opts.batch_size
        judged = evaluate(trainer, test)
        curve = _curve(losses)
        _write_sae(folder, trainer, judged, curve, opts, hook_name=hook_name(site),
                   model_name=(manifest.get("model") or {}).get("config"))
        result = TrainSAEResult(
            collect=str(acts.path), site=site, hook_name=hook_name(site), output=str(folder.path),
            architecture=opts.architecture, d_in=width, latents=opts.latents, k=opts.k,
            l1=opts.l1, lr=opts.lr, batch_size=B, steps=total, epochs=total * B / n_train,
            seed=seed, holdout=holdout, b_dec_init=opts.b_dec_init, dead_after=opts.dead_after,
            aux_k=opts.aux_k, aux_coef=opts.aux_coef, train_tokens=n_train,
            holdout_tokens=held, skip_first=int(skip_first) or None, scale=scale,
            resumed_from=start,
            fvu=judged["fvu"], l0=judged["l0"], dead=judged["dead"],
            dead_fraction=judged["dead"] / opts.latents,
            dead_in_training=int(trainer.dead.sum()), loss_first=curve[0], loss_last=curve[-1],
            losses=curve, seconds=seconds,
            tokens_per_s=(total - start) * B / seconds if seconds > 0 and total > start else None)
        folder.write_manifest(complete=True, heldout=judged, result=_recorded(result))
        (folder.path / STATE_TENSORS).unlink(missing_ok=True)
    return result


def _train(folder: RunFolder, trainer: Trainer, train: torch.Tensor, opts: TrainOptions, *, seed,
           progress, checkpoint_every, targets: torch.Tensor | None = None,
           what: str = "tfx train-sae") -> tuple[torch.Tensor, int, float]:
    """The steps not yet taken (from folder's checkpoint, if any), a checkpoint every
    `checkpoint_every` steps or CHECKPOINT_SECONDS: (the losses, the step started at, the
    seconds taken). `targets`: a transcoder's rows to reconstruct, row for row of
    `train` (an SAE reconstructs `train` itself)."""
    total, B = opts.steps, opts.batch_size
    n_train = len(train)
    losses = torch.full((total,), float("nan"))
    start = 0
    if folder.resume_from is not None:
        trainer.load_state(folder.resume_from)
        losses = folder.resume_from["losses"].clone()
        start = int(folder.resume_from["step"][0])
    else:
        folder.write_manifest(complete=False)

    def save(step: int) -> None:
        folder.write_tensors(STATE_TENSORS, {**trainer.state(), "losses": losses,
                                             "step": torch.tensor([step], dtype=torch.int64)})

    began, saved_at = time.perf_counter(), time.perf_counter()
    per_epoch = n_train // B
    perm, epoch_of_perm = None, -1
    with counting(progress, what, total, "steps") as update:
        update(start, start * B)
        for step in range(start, total):
            epoch, j = divmod(step, per_epoch)
            if epoch != epoch_of_perm:
                # within the generator's 64 bits, whatever the seed (0 to 2**64 - 1)
                g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**64)
                perm, epoch_of_perm = torch.randperm(n_train, generator=g), epoch
            rows = perm[j * B:(j + 1) * B]
            y = None if targets is None else targets[rows] * trainer.scale_out
            losses[step] = _finite_loss(trainer.step(train[rows] * trainer.scale, y), step,
                                        opts.lr, folder)
            update(step + 1, (step + 1) * B)
            if (step + 1) % checkpoint_every == 0 or \
                    time.perf_counter() - saved_at > CHECKPOINT_SECONDS:
                save(step + 1)
                saved_at = time.perf_counter()
    seconds = time.perf_counter() - began
    if start < total:
        save(total)
    return losses, start, seconds


def _write_sae(folder: RunFolder, trainer: Trainer, judged: dict, curve: list,
               opts: TrainOptions, *, hook_name: str, model_name) -> None:
    """The trained SAE into SAE_DIR, once every number about it is known finite: a run
    whose training diverged writes no SAE and leaves no state of its own, so nothing reads
    a NaN SAE as a trained one. cfg.json lands after the weights, and the state says
    complete last."""
    weights = trainer.weights()
    check_diverged(weights, judged, curve, folder, opts.lr, "the SAE's training",
                   f"no SAE is written to {folder.path}")
    cfg, tensors = saelens_files(activation=opts.activation, hook_name=hook_name, k=opts.k,
                                 model_name=model_name, **weights)
    folder.write_tensors(SAELENS_WEIGHTS, tensors)
    folder.write_json(SAELENS_CFG, cfg)


def _recorded(result) -> dict:
    """The result's own fields (not the run's timing), for an identical rerun to return."""
    skip = {"model", "input", "tensors", "stack", "interventions", "seconds", "tokens_per_s"}
    return {f.name: getattr(result, f.name) for f in fields(result) if f.name not in skip}


def _finite_loss(loss: float, step: int, lr: float, folder: RunFolder,
                 what: str = "the loss") -> float:
    """The step's loss (or the held-out FVU); a NaN or infinite one ends the run, leaving
    no SAE that looks usable: the folder goes when this run made it, else the run's state
    files do."""
    if math.isfinite(loss):
        return loss
    _forget_run(folder)
    raise NonFiniteError(f"train-sae diverged: {what} became {loss} at step {step + 1}; "
                         f"lower --lr (now {lr:g})")


def check_diverged(weights: dict, judged: dict, curve: list, folder: RunFolder, lr: float,
                   what: str, kept: str) -> None:
    """A trained run that diverged leaves nothing that looks usable (_forget_run) and is
    refused, naming --lr: a weight, its loss or held-out numbers not finite (a NaN), or a
    loss that ended DIVERGED_RISE times above where it began with a held-out FVU above 1
    (a finite blow-up). The refusal: "`what` diverged: <why>, so `kept`; ... --lr"."""
    broken = [name for name, t in weights.items()
              if t is not None and not bool(torch.isfinite(t).all())]
    fvu = judged["fvu"]
    error, why = NonFiniteError, None
    if broken:
        why = f"its {broken[0]} holds NaN or infinite values"
    elif any(v is not None and not math.isfinite(v) for v in (fvu, judged["l0"], *curve)):
        why = "its loss or held-out FVU is not a finite number"
    elif fvu is not None and fvu > 1 and len(curve) > 1 and curve[-1] > DIVERGED_RISE * curve[0]:
        error, why = RangeError, ("its loss rose over the run and its held-out FVU is above 1 "
                                  "(worse than predicting the mean)")
    if why is not None:
        _forget_run(folder)
        raise error(f"{what} diverged: {why}, so {kept}; train with a lower --lr (now {lr:g})")


def _forget_run(folder: RunFolder) -> None:
    """A diverged run leaves nothing that looks usable: the folder goes when this run made
    it, else the run's own state files do (the user's other files stay)."""
    if folder.created:
        shutil.rmtree(folder.path, ignore_errors=True)
    else:
        for name in (STATE_JSON, STATE_TENSORS):
            (folder.path / name).unlink(missing_ok=True)


def _b_dec_start(train: torch.Tensor, scale: float, how: str, seed: int) -> torch.Tensor:
    if how == "zeros":
        return torch.zeros(train.shape[1])
    if how == "mean":
        return (train.to(torch.float64).mean(dim=0) * scale).to(torch.float32)
    g = torch.Generator().manual_seed(seed)
    rows = torch.randperm(len(train), generator=g)[:MEDIAN_ROWS].sort().values
    return (geometric_median(train[rows]) * scale).to(torch.float32)


def evaluate(trainer: Trainer, x: torch.Tensor, rows_at_once: int = 4096) -> dict:
    """The trained SAE on held-out rows x (raw): FVU, mean L0 and the latents that fire
    on none of them."""
    W = trainer.weights()
    recon, l0_sum = [], 0
    fired = torch.zeros(trainer.latents, dtype=torch.bool)
    with torch.inference_mode():
        for i in range(0, len(x), rows_at_once):
            f = trainer.encode(x[i:i + rows_at_once])
            recon.append(f @ W["W_dec"] + W["b_dec"])
            l0_sum += int(metrics.l0(f).sum())
            fired |= (f != 0).any(dim=0)
    fvu = metrics.fvu(x, torch.cat(recon))
    return {"fvu": fvu, "l0": l0_sum / max(len(x), 1), "dead": int((~fired).sum()),
            "tokens": len(x)}


def _curve(losses: torch.Tensor) -> list[float]:
    """The loss per step, as means over at most LOSS_POINTS equal spans."""
    values = losses[~torch.isnan(losses)].to(torch.float64)
    if len(values) == 0:
        return [float("nan")]
    spans = torch.tensor_split(values, min(LOSS_POINTS, len(values)))
    return [float(s.mean()) for s in spans]


__all__ = ["train_sae", "resolve_options", "TrainOptions", "evaluate", "RunFolder",
           "check_diverged", "ACTIVATIONS", "DIVERGED_RISE"]
