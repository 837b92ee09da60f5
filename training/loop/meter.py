"""What `zoo.training.loop.trainer.Trainer` counts over an epoch: `EpochMeter` (running sums of the
loss, correct predictions and logged scalars, kept on the device, summed over processes at the
end) and what it reads off a batch and a step output: `count_samples`, `count_correct`, and
`take_first_samples` for a last evaluation batch padded with repeats. A regression step's
``sum/`` logs (`zoo.training.loop.steps.regression_sums`) become ``mae``, ``rmse`` and ``r2``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from zoo.training.loop.steps import StepOutput, regression_sums


class EpochMeter:
    """Running sums for one epoch, kept on the device so steps never wait for a sync."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.samples = 0
        self.steps = 0

    def update(
        self,
        loss: torch.Tensor,
        num: int,
        correct: torch.Tensor | None,
        counted: torch.Tensor | None,
        logs: Mapping[str, Any],
    ) -> None:
        self._add("loss", loss.detach().float() * num)
        self.samples += num
        if correct is not None:
            self._add("correct", correct)
            self._add("counted", counted)
        for key, value in logs.items():
            value = value.detach().float() if isinstance(value, torch.Tensor) else float(value)
            self._add(key if key.startswith("sum/") else f"log:{key}", value)
        self.steps += 1

    def _add(self, key: str, value: torch.Tensor | float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value

    def reduce(self) -> None:
        """Sum over every process (before `result`, under DDP/FSDP)."""
        if not (dist.is_available() and dist.is_initialized()):
            return
        keys = sorted(self.sums)
        total = torch.tensor([float(self.sums[k]) for k in keys] + [self.samples, self.steps], dtype=torch.float64)
        dist.all_reduce(total)
        values = total.tolist()
        self.sums = dict(zip(keys, values))
        self.samples, self.steps = int(values[-2]), int(values[-1])

    def result(self, prefix: str) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.samples:
            out[f"{prefix}_loss"] = float(self.sums["loss"]) / self.samples
        if float(self.sums.get("counted", 0)):
            out[f"{prefix}_acc"] = float(self.sums["correct"]) / float(self.sums["counted"])
        for key, value in self.sums.items():
            if key.startswith("log:"):
                out[f"{prefix}_{key[4:]}"] = float(value) / max(self.steps, 1)
        if float(self.sums.get("sum/count", 0)):
            out |= {f"{prefix}_{k}": v for k, v in regression_metrics(self.sums).items()}
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"sums": {k: float(v) for k, v in self.sums.items()}, "samples": self.samples, "steps": self.steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sums, self.samples, self.steps = dict(state["sums"]), state["samples"], state["steps"]


def regression_metrics(sums: Mapping[str, Any]) -> dict[str, float]:
    """MAE, RMSE and R² (1 - SSE / total sum of squares; NaN when the targets do not vary)
    from the ``sum/`` totals of `zoo.training.loop.steps.regression_sums`."""
    n = float(sums["sum/count"])
    squared = float(sums["sum/squared_error"])
    spread = float(sums["sum/target_squared"]) - float(sums["sum/target"]) ** 2 / n
    r2 = 1.0 - squared / spread if spread > 1e-12 * max(float(sums["sum/target_squared"]), 1.0) else math.nan
    return {"mae": float(sums["sum/abs_error"]) / n, "rmse": math.sqrt(squared / n), "r2": r2}


def count_correct(out: StepOutput) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Correct predictions and how many were counted (targets of -100 are ignored)."""
    if out.logits is None or out.targets is None or out.targets.is_floating_point():
        return None, None
    targets = out.targets.reshape(-1)
    predictions = out.logits.reshape(-1, out.logits.shape[-1]).argmax(-1)
    if predictions.shape != targets.shape:
        return None, None
    valid = targets != -100
    return ((predictions == targets) & valid).sum(), valid.sum()


def count_samples(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (graphs: ``num_graphs``)."""
    if hasattr(batch, "num_graphs"):
        return int(batch.num_graphs)
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (tuple, list)) else ()
    for item in items:
        size = count_samples(item)
        if size:
            return size
    return 0


def take_first_samples(out: StepOutput, n: int) -> StepOutput:
    """The step output of the first ``n`` samples of a batch (the rest are padding): logits,
    targets, and the loss recomputed on them (a regression's from its per-sample loss and
    ``sum/`` totals, else the cross-entropy) when there are logits."""
    if out.logits is None or out.targets is None or n == 0:
        logs = {k: v for k, v in out.logs.items() if not k.startswith("sum/")}
        return StepOutput(out.loss.new_zeros(()), None, None, logs)
    logits, targets = out.logits[:n], out.targets[:n]
    if out.per_sample_loss is not None:
        logs = {**out.logs, **regression_sums(logits, targets)} if "sum/count" in out.logs else out.logs
        return StepOutput(out.per_sample_loss[:n].mean(), logits, targets, logs, out.per_sample_loss[:n])
    flat = logits.reshape(-1, logits.shape[-1]).float()
    return StepOutput(F.cross_entropy(flat, targets.reshape(-1)), logits, targets, out.logs)
