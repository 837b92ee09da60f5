"""``lr="auto"``: a learning-rate range test (Smith, 2015) on the run's own first batches, at the
start of `Trainer.fit`, after ``precision="auto"`` has chosen how the steps run.

The sweep trains one optimizer step per learning rate, growing exponentially from `START_LR` to
`END_LR`, through the Trainer's own `Trainer.train_step` (its precision, accumulation, clipping,
layer-wise scales), and records an exponentially smoothed, debiased loss (fastai's smoothing with
``beta = 1 - 2 / steps``: its 0.98 at 100 steps, the same lag in decades of lr on fewer steps). It
stops early when the smoothed loss passes `DIVERGED` times the best so far or is not finite. It
takes `STEP_SHARE` of the run's optimizer steps, at least `MIN_STEPS` and at most `MAX_STEPS`
(each costs one training step); a loader of fewer than `MIN_BATCHES` optimizer steps a pass is not
swept (the sweep would repeat them, its loss falling by memorising them whatever the rate) and the
default stays, said so. The suggestion is fastai's ``valley`` (`valley`), computed as
``Learner.lr_find`` does: over the points left after skipping the first tenth of the planned
steps and the last `SKIP_END`, cut at the first NaN: the longest run of decreasing loss, and a
point 1/3 + 1/6 of the way into it (`suggest`). Two guards keep the pick from hurting
(`guarded`): a curve that falls by less than `FLAT` of its starting value over the weighed points
says nothing, and the run keeps the default learning rate; so does a valley on the flat part
before the loss falls (less than `FLAT_PART` of the fall behind it, as noise makes on a short
sweep: fastai's older ``minimum`` rule there, a tenth of the lowest loss's rate, cost a point on
the transfer suite). A pick within
`SNAP` times the default keeps the default: the smoothed curve cannot tell rates that close
apart (on the transfer suite, picks 1.1-2.6x off the default cost 0.6-1.3 points). Weights and buffers (BatchNorm statistics),
optimizer, EMA, step count, the generators and the data position are put back afterwards, so the
run starts exactly as it would have with the suggested value given as ``lr``. The curve is
`PLOT_FILE` in the run folder. Under torchrun with DDP the first process sweeps on its bare model
and sends the value to the others; FSDP is refused (pass a number).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from zoo.errors import InvalidArgumentError
from zoo.training.loop.distributed import from_first_process
from zoo.training.loop.optim import start_lr
from zoo.training.loop.records.checkpoint import rng_state, set_rng_state
from zoo.training.loop.records.curves import figure, save_figure
from zoo.training.loop.speed import alone, trying

if TYPE_CHECKING:
    from zoo.training.loop.epochs import Epochs

Trainer = Any  # a zoo.training.loop.trainer.Trainer (which imports this module)

START_LR, END_LR = 1e-7, 10.0
MAX_STEPS = 100  # fastai's and Lightning's sweep
MIN_STEPS = 50  # fewer leave too few points over the 8 decades for a valley once the ends are skipped
STEP_SHARE = 0.2  # of the run's optimizer steps, at most (above MIN_STEPS)
DIVERGED = 4.0  # the smoothed loss this many times the best so far ends the sweep
SKIP_END = 5  # last points left out of the suggestion, as fastai does
FLAT = 0.05  # the smoothed loss must fall by this share of its first weighed value, or the default stays
FLAT_PART = 0.1  # a valley with less of the fall than this behind it is on the flat part
SNAP = 3.0  # a pick within this factor of the default keeps the default
MIN_BATCHES = 3  # fewer steps a pass: the sweep repeats each 25+ times, its loss falling by memorising them
PLOT_FILE = "lr_finder.png"


@dataclass
class LRFinderReport:
    """One sweep: the learning rates tried, the smoothed losses, the suggestion and its index
    (None: no suggestion, ``lr`` is then the optimizer's starting value), and why it ended."""

    lr: float
    lrs: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    index: int | None = None
    planned: int = 0
    seconds: float = 0.0
    note: str = ""
    kept_default: float | None = None  # the pick, when it was within SNAP times the default (which stays)

    def __str__(self) -> str:
        if not self.lrs:  # no sweep ran (`MIN_BATCHES`)
            return f"{self.lr:.3g} (the default: {self.note})"
        how = "fastai's valley of the smoothed loss" if self.index is not None else f"no suggestion ({self.note})"
        if self.kept_default is not None:
            how = f"the default: fastai's valley, {self.kept_default:.3g}, is within {SNAP:g}x of it"
        ended = f"; {self.note}" if self.index is not None and self.note else ""
        return (
            f"{self.lr:.3g} ({how}; {len(self.lrs)} of {self.planned} steps from {START_LR:g} to {END_LR:g}"
            f"{ended}, {self.seconds:.1f} s; curve in {PLOT_FILE})"
        )


def sweep_steps(total_steps: int) -> int:
    """The sweep's length for a run of ``total_steps`` optimizer steps."""
    return min(MAX_STEPS, max(MIN_STEPS, round(STEP_SHARE * total_steps)))


def sweep_lrs(steps: int) -> list[float]:
    """``steps`` learning rates from `START_LR` to `END_LR`, evenly spaced in log."""
    return [START_LR * (END_LR / START_LR) ** (i / max(steps - 1, 1)) for i in range(steps)]


def smoothed(loss: float, average: float, count: int, beta: float) -> tuple[float, float]:
    """The running average after ``loss`` (the ``count``-th) and its debiased value, as fastai's
    ``AvgSmoothLoss``: ``average = beta * average + (1 - beta) * loss``, over ``1 - beta**count``."""
    average = beta * average + (1 - beta) * loss
    return average, average / (1 - beta**count)


def valley(losses: Sequence[float]) -> int:
    """fastai's ``valley``: the index 1/3 + 1/6 of the way along the longest decreasing
    subsequence of ``losses`` (its start taken as fastai does, one before the first point)."""
    n = len(losses)
    max_start, max_end = 0, 0
    lengths = [1] * n
    for i in range(1, n):
        for j in range(i):
            if losses[i] < losses[j] and lengths[i] < lengths[j] + 1:
                lengths[i] = lengths[j] + 1
            if lengths[max_end] < lengths[i]:
                max_end = i
                max_start = max_end - lengths[max_end]
    sections = (max_end - max_start) / 3
    return max_start + int(sections) + int(sections / 2)


def suggest(losses: Sequence[float], planned: int) -> int | None:
    """The index (into ``losses``) of the suggested learning rate, as fastai's ``lr_find``
    picks it: `valley` over ``losses[planned // 10 : -SKIP_END]`` cut at its first NaN; None
    when fewer than two points are left."""
    skip = planned // 10
    kept = list(losses[skip:-SKIP_END])
    cut = next((i for i, value in enumerate(kept) if math.isnan(value)), len(kept))
    kept = kept[:cut]
    if len(kept) < 2:
        return None
    return skip + valley(kept)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every parameter group's learning rate to ``lr`` times the group's ``lr_scale``."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def resumed_lr(optimizer: torch.optim.Optimizer) -> float:
    """The base learning rate a resumed run's optimizer holds (the one its sweep chose): its
    first group's peak (one-cycle), or starting lr (other schedules), over the group's scale."""
    group = optimizer.param_groups[0]
    return group.get("max_lr", group.get("initial_lr", group["lr"])) / group.get("lr_scale", 1.0)


def find_lr(trainer: Trainer, epochs: Epochs) -> LRFinderReport:
    """Sweep on the first process (`sweep`), set every group's learning rate to the suggestion
    on all of them, print it and plot the curve; the trainer is otherwise as it was."""
    if trainer.fsdp:
        raise InvalidArgumentError(
            "TrainConfig.lr (--lr) auto does not run under FSDP (--distributed fsdp), whose sharded weights one "
            "process cannot sweep alone: pass a learning rate, e.g. --lr 1e-3"
        )
    report = None
    if trainer.is_main:
        with alone(trainer), kept(trainer, epochs):
            report = sweep(trainer, epochs, sweep_steps(epochs.total_steps))
    report = from_first_process(report, trainer.world_size, trainer.device)
    set_lr(trainer.optimizer, report.lr)
    if trainer.is_main:
        if trainer.out_dir is not None and trainer.config.plot and report.lrs:
            plot_sweep(report, trainer.out_dir / PLOT_FILE)
        tqdm.write(f"lr auto: {report}")  # the run's learning rate: said with --no-progress too (it hides bars)
    return report


def sweep(trainer: Trainer, epochs: Epochs, steps: int) -> LRFinderReport:
    """Train ``steps`` optimizer steps at `sweep_lrs`, recording the smoothed loss, until it
    diverges; the suggestion (`suggest`, at least ``min_lr``), or without one the starting lr."""
    cfg = trainer.config
    report = LRFinderReport(start_lr(cfg), planned=steps)
    batches = len(epochs.loader) // max(min(cfg.accum_steps, len(epochs.loader)), 1)  # `batch_groups` a pass
    if batches < MIN_BATCHES:
        report.note = (
            f"too few batches: {batches} batch{'es' if batches != 1 else ''} a pass, which the {steps}-step sweep would "
            f"repeat, its loss falling by memorising them; it needs {MIN_BATCHES} or more, so the sweep is skipped"
        )
        return report
    beta, average, best = 1 - 2 / steps, 0.0, math.inf
    started = time.perf_counter()
    trainer.train_mode()
    for count, (lr, group) in enumerate(zip(sweep_lrs(steps), batch_groups(epochs, cfg.accum_steps)), 1):
        set_lr(trainer.optimizer, lr)
        outputs = trainer.train_step(group)
        average, value = smoothed(sum(float(o.loss.detach()) for o in outputs) / len(outputs), average, count, beta)
        report.lrs.append(lr)
        report.losses.append(value if math.isfinite(value) else math.nan)
        best = min(best, value)
        if not math.isfinite(value) or value > DIVERGED * best:
            report.note = f"stopped at lr {lr:.2g}, where the loss diverged"
            break
    report.seconds = time.perf_counter() - started
    report.index = suggest(report.losses, steps)
    if report.index is None:
        report.note = "too few points before the loss diverged" if report.note else "too few points"
        return report
    report.index, why = guarded(report.losses, steps, report.index)
    report.note = "; ".join(part for part in (why, report.note) if part)
    if report.index is not None:
        take(report, max(report.lrs[report.index], cfg.min_lr))
    return report


def take(report: LRFinderReport, picked: float) -> None:
    """``report.lr`` (the default until now) becomes ``picked``, unless it is within `SNAP`
    times the default, which then stays (``report.kept_default`` records the pick)."""
    if report.lr / SNAP <= picked <= report.lr * SNAP:
        report.kept_default = picked
    else:
        report.lr = picked


def guarded(losses: Sequence[float], planned: int, index: int) -> tuple[int | None, str]:
    """The suggestion `suggest` made (``index``), unless the curve cannot carry it: None (the
    default rate stays) when the weighed points fall by less than `FLAT` of the first, or when
    the valley has less than `FLAT_PART` of the fall behind it. With the reason, or ""."""
    skip = planned // 10
    weighed = list(losses[skip:-SKIP_END])
    weighed = weighed[: next((i for i, v in enumerate(weighed) if math.isnan(v)), len(weighed))]
    first, low = weighed[0], min(weighed)
    fall = first - low
    if fall < FLAT * abs(first):
        return None, f"a flat curve: the loss fell {fall / abs(first):.1%} over the sweep, so the default stays"
    if first - losses[index] >= FLAT_PART * fall:
        return index, ""
    return None, "fastai's valley sat on the flat, noisy part before the loss falls, so the default stays"


def batch_groups(epochs: Epochs, size: int) -> Iterator[list[Any]]:
    """Groups of ``size`` micro-batches (one optimizer step each) from the run's loader, pass
    after pass (epochs 0, 1, ... of its sampler), as training reads them."""
    size = min(size, len(epochs.loader))
    if not size:
        return
    for epoch in itertools.count():
        epochs.sampler.set_epoch(epoch)
        group: list[Any] = []
        for batch in epochs.loader:
            group.append(batch)
            if len(group) == size:
                yield group
                group = []


@contextlib.contextmanager
def kept(trainer: Trainer, epochs: Epochs) -> Iterator[None]:
    """``trainer`` as it was after what runs inside: weights and buffers, optimizer, EMA and step
    count (`zoo.training.loop.speed.trying`), the modules' train/eval modes, the generators, the
    sampler's epoch and position and the loader's generator."""
    generators, modes = rng_state(), [m.training for m in trainer.model.modules()]
    position = (epochs.sampler.epoch, epochs.sampler.skip, epochs.generator.get_state())
    try:
        with trying(trainer, trainer.setting):
            epochs.sampler.skip = 0
            yield
    finally:
        set_rng_state(generators)
        for module, mode in zip(trainer.model.modules(), modes):
            module.training = mode
        epochs.sampler.set_epoch(position[0])
        epochs.sampler.skip = position[1]
        epochs.generator.set_state(position[2])


def plot_sweep(report: LRFinderReport, path: Path) -> None:
    """The smoothed loss against the learning rate (log scale), the points the suggestion
    weighed shaded, the suggestion marked."""
    fig = figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.plot(report.lrs, report.losses, color="tab:blue", label="training loss, smoothed")
    finite = [v for v in report.losses if math.isfinite(v)]
    if finite:
        low, first = min(finite), finite[0]
        ax.set_ylim(low - 0.05 * abs(low), max(min(max(finite), first + 2 * (first - low)), low + 1e-6))
    weighed = report.lrs[report.planned // 10 : -SKIP_END]
    if len(weighed) > 1:
        ax.axvspan(weighed[0], weighed[-1], color="0.92", label="points the suggestion weighs")
    if report.index is not None:
        ax.plot([report.lrs[report.index]], [report.losses[report.index]], "o", color="tab:red",
                label=f"suggestion {report.lrs[report.index]:.3g} (fastai's valley)")  # fmt: skip
    ax.set(xscale="log", xlabel="learning rate", ylabel="loss", title=f"lr range test: {len(report.lrs)} steps")
    ax.legend(loc="best", fontsize="small")
    save_figure(fig, path)
