"""What a `zoo.training.loop.trainer.Trainer` run leaves to read: train.log, TensorBoard points
(per step and per epoch), metrics.csv / metrics.json and the loss/accuracy curves. `RunLogs`
opens them when `Trainer.fit` starts and closes them when it ends; `start_profiler` traces a few
steps into out_dir/profile when ``TrainConfig.profile`` asks for it."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from zoo.errors import TrainingDivergedError
from zoo.store.files import write_bytes_atomic, write_json
from zoo.training.loop.records.checkpoint import to_json_types
from zoo.training.loop.records.curves import plot_curves
from zoo.training.loop.steps import StepOutput
from zoo.training.loop.train_config import TrainConfig

PLOT_EVERY_S = 30.0  # seconds between redraws of curves.png while a run goes on
_SHOWN = ("train_loss", "train_acc", "val_loss", "val_acc", "val_map", "val_f1_micro", "val_mae", "val_r2")


class RunLogs:
    """The log file (the records of ``logger``), the TensorBoard writer and the metrics files
    of one run in ``out_dir``; without an ``out_dir`` only the progress bar shows the loss."""

    def __init__(self, config: TrainConfig, out_dir: Path | None, logger: logging.Logger) -> None:
        self.config, self.out_dir, self.logger = config, out_dir, logger
        self._writer: Any = None
        self._handler: logging.Handler | None = None
        self._unplotted: list[dict[str, float]] | None = None  # a history curves.png does not show yet
        self._plotted_at = -math.inf

    def open(self, resumed: bool, global_step: int) -> None:
        """Start train.log with the run's config, and TensorBoard (dropping the points a resumed
        run logged after its checkpoint, from ``global_step`` on)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.out_dir / "train.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        self._handler = handler
        self.logger.addHandler(handler)
        self.logger.setLevel(logging.INFO)
        config = json.dumps(to_json_types(dataclasses.asdict(self.config)))
        self.logger.info("%s run: %s", "resumed" if resumed else "new", config)
        if self.config.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = global_step if resumed else None
            self._writer = SummaryWriter(str(self.out_dir / "tensorboard"), purge_step=purge)

    def close(self) -> None:
        """Draw the curves of the last epochs, flush and detach whatever `open` started (safe
        to call when nothing was opened)."""
        if self._unplotted is not None:
            self._plot()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._handler is not None:
            self.logger.removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def show_epoch(self, metrics: Mapping[str, float], epoch: int) -> None:
        """The epoch's line under the progress bar: its losses, accuracies (a multi-label's mAP
        and micro F1, a regression's MAE and R²) and its speed."""
        shown = {k: v for k, v in metrics.items() if k in _SHOWN}
        summary = "  ".join(f"{k} {v:.4f}" for k, v in shown.items())
        tqdm.write(f"epoch {epoch}/{self.config.epochs}  {summary}  {metrics['train_samples_per_s']:.0f} samples/s")

    def step(self, outputs: list[StepOutput], bar: tqdm, step: int, lr: float) -> None:
        """The mean loss of an optimizer step's micro-batches on the bar and in TensorBoard;
        a loss that is not finite stops the run here, with what to change."""
        loss = sum(float(o.loss.detach()) for o in outputs) / len(outputs)
        check_finite("loss", loss, f"step {step}")
        bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
        if self._writer is not None:
            self._writer.add_scalar("step/train_loss", loss, step)
            self._writer.add_scalar("step/lr", lr, step)
            for key, value in outputs[-1].logs.items():
                self._writer.add_scalar(f"step/{key}", float(value), step)

    def epoch(self, history: list[dict[str, float]], extra: Mapping[str, Any]) -> None:
        """The metrics files and TensorBoard's epoch points after each epoch (``history[-1]``
        is the epoch just ended; ``extra`` goes to metrics.json), and the curves after the first
        epoch and then at most every `PLOT_EVERY_S` (a redraw takes about half a second, more
        than a small model's epoch) and when the run ends (`close`)."""
        write_history(history, self.out_dir, extra)
        metrics = history[-1]
        if self._writer is not None:
            for key, value in metrics.items():
                if key not in ("epoch", "step"):
                    self._writer.add_scalar(f"epoch/{key}", value, int(metrics["epoch"]))
            self._writer.flush()
        if self.config.plot:
            self._unplotted = history
            if time.monotonic() - self._plotted_at >= PLOT_EVERY_S:
                self._plot()

    def _plot(self) -> None:
        """curves.png of the history not drawn yet."""
        history, self._unplotted = self._unplotted, None
        plot_curves(history, self.out_dir / "curves.png")
        self._plotted_at = time.monotonic()


def check_finite(name: str, value: float, when: str) -> None:
    """Stop a run whose ``name`` (a loss) is NaN or infinite at ``when``: a `TrainingDivergedError`
    saying what to change (one line on the command line, not a traceback)."""
    if not math.isfinite(value):
        raise TrainingDivergedError(
            f"the {name} is {value} at {when}: training diverged; lower the learning rate (--lr), "
            "clip gradients (--clip-grad) or train in fp32"
        )


def write_history(history: list[dict[str, float]], out_dir: Path, extra: Mapping[str, Any] | None = None) -> None:
    """metrics.csv (one row per epoch) and metrics.json (the history plus ``extra``), atomically."""
    columns = list(dict.fromkeys(k for row in history for k in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(history)
    write_bytes_atomic(out_dir / "metrics.csv", text.getvalue().encode())
    write_json({"history": history, **(extra or {})}, out_dir / "metrics.json")


def start_profiler(out_dir: Path, device: torch.device, rank: int, logger: logging.Logger) -> torch.profiler.profile:
    """A started torch.profiler tracing a few steps (CUDA activity too on a GPU) into
    out_dir/profile, one trace per process, with `top_ops` of those steps beside it
    (top_ops-rank{N}.csv) and in one line of ``logger``: which kernels bound a step."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    folder = out_dir / "profile"
    trace = torch.profiler.tensorboard_trace_handler(str(folder), worker_name=f"rank{rank}")

    def ready(profiler: torch.profiler.profile) -> None:
        trace(profiler)
        # the steps traced: fewer than PROFILED_STEPS when the run ended inside the window
        steps = min(profiler.step_num - _WAIT - _WARMUP, PROFILED_STEPS)
        rows = top_ops(profiler, device, max(steps, 1))
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=["op", "ms_per_step", "share", "calls_per_step"])
        writer.writeheader()
        writer.writerows(rows)
        write_bytes_atomic(folder / f"top_ops-rank{rank}.csv", text.getvalue().encode())
        shown = ", ".join(f"{row['op']} {row['share']}" for row in rows[:5])
        logger.info(
            "profile: a step's %s time went to %s (%s)", _busy(device), shown, folder / f"top_ops-rank{rank}.csv"
        )

    profiler = torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=_WAIT, warmup=_WARMUP, active=PROFILED_STEPS, repeat=1),
        on_trace_ready=ready,
        record_shapes=True,
    )
    profiler.start()
    return profiler


PROFILED_STEPS = 3
_WAIT, _WARMUP = 1, 1  # steps before the traced ones: one skipped, one warming up


def _busy(device: torch.device) -> str:
    return "GPU" if device.type == "cuda" else "CPU"


def top_ops(
    profiler: torch.profiler.profile, device: torch.device, steps: int, limit: int = 15
) -> list[dict[str, Any]]:
    """The operators that took most of the profiled steps' time, by self time (the kernels'
    own time, without their children's: the shares add up to 100%) on the device that does
    the work (the GPU's kernels on CUDA, else the CPU's), each with ms and calls per step of
    the ``steps`` traced."""
    cuda = device.type == "cuda"
    events = [e for e in profiler.key_averages() if not e.key.startswith("ProfilerStep")]

    def own(event: Any) -> float:
        return float(event.self_device_time_total if cuda else event.self_cpu_time_total)

    total = sum(own(e) for e in events) or 1.0
    ranked = sorted((e for e in events if own(e) > 0), key=own, reverse=True)[:limit]
    return [
        {"op": e.key, "ms_per_step": round(own(e) / 1000 / steps, 3), "share": f"{100 * own(e) / total:.1f}%",
         "calls_per_step": round(e.count / steps, 1)}
        for e in ranked
    ]  # fmt: skip
