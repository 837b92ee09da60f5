"""What `zoo.training.loop.trainer.Trainer` counts over an epoch: `EpochMeter` (running sums of the
loss, correct predictions and logged scalars, kept on the device, summed over processes at the
end) and what it reads off a batch and a step output: `count_samples`, `count_correct`, and
`take_first_samples` for a last evaluation batch padded with repeats. A regression step's
``sum/`` logs (`zoo.training.loop.steps.regression_sums`) become ``mae``, ``rmse`` and ``r2``; a
multi-label step's ``cat/`` logs (the probabilities and targets of every sample) become ``map``,
``f1_micro`` and ``f1_macro`` (`multi_label_metrics`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from zoo.training.loop.steps import StepOutput, regression_sums


class EpochMeter:
    """Running sums for one epoch, kept on the device so steps never wait for a sync."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.kept: dict[str, list[torch.Tensor]] = {}  # ``cat/`` logs, concatenated at the end (not checkpointed)
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
            if key.startswith("cat/"):
                self.kept.setdefault(key, []).append(value.detach().float())
                continue
            if key.startswith("sum/"):  # float64 totals (a regression's, `regression_sums`)
                self._add(key, value.detach().double() if isinstance(value, torch.Tensor) else float(value))
                continue
            value = value.detach().float() if isinstance(value, torch.Tensor) else float(value)
            self._add(f"log:{key}", value)
        self.steps += 1

    def _add(self, key: str, value: torch.Tensor | float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value

    def reduce(self) -> None:
        """Sum over every process (before `result`, under DDP/FSDP)."""
        if not (dist.is_available() and dist.is_initialized()):
            return
        # every process the same collectives of the same sizes, also one that got no sample (a
        # validation set smaller than the group: its meter is empty; was Gloo's size mismatch, an abort)
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (sorted(self.sums), {k: torch.cat(v).cpu() for k, v in self.kept.items()}))
        kept = sorted({k for _, part in gathered for k in part})
        self.kept = {k: [part[k] for _, part in gathered if k in part] for k in kept}
        keys = sorted({k for names, _ in gathered for k in names})
        sums = [float(self.sums.get(k, 0.0)) for k in keys]
        total = torch.tensor(sums + [self.samples, self.steps], dtype=torch.float64)
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
        if "cat/scores" in self.kept:
            scores, targets = (torch.cat(self.kept[k]).cpu().numpy() for k in ("cat/scores", "cat/targets"))
            out |= {f"{prefix}_{k}": v for k, v in multi_label_metrics(scores, targets).items()}
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"sums": {k: float(v) for k, v in self.sums.items()}, "samples": self.samples, "steps": self.steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sums, self.samples, self.steps = dict(state["sums"]), state["samples"], state["steps"]


def regression_metrics(sums: Mapping[str, Any]) -> dict[str, float]:
    """MAE, RMSE and R² (1 - SSE / total sum of squares; NaN when the targets do not vary)
    from the ``sum/`` totals of `zoo.training.loop.steps.regression_sums` (shifted targets: the
    spread is scale-free, so targets near 1e-42 have an R² as those near 1 do)."""
    n = float(sums["sum/count"])
    squared = float(sums["sum/squared_error"])
    spread = float(sums["sum/target_squared"]) - float(sums["sum/target"]) ** 2 / n
    r2 = 1.0 - squared / spread if spread > 1e-9 * float(sums["sum/target_squared"]) and spread > 0 else math.nan
    return {"mae": float(sums["sum/abs_error"]) / n, "rmse": math.sqrt(squared / n), "r2": r2}


MIN_POSITIVES = 5  # validation positives a label needs for a threshold of its own


def best_f1_threshold(scores: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """The threshold on ``scores`` whose decisions (``score >= threshold``) give the best F1
    against the 0/1 ``truth``, and that F1: halfway between the lowest score taken and the next
    one below it (0.5 and F1 0 without positives)."""
    positives = float(truth.sum())
    if positives == 0 or len(scores) == 0:
        return 0.5, 0.0
    order = np.argsort(-scores, kind="stable")
    ranked, hits = scores[order], truth[order]
    last = np.flatnonzero(np.r_[ranked[1:] != ranked[:-1], True])  # the last sample of each run of equal scores
    taken = last + 1.0
    f1 = 2 * np.cumsum(hits)[last] / (taken + positives)  # 2TP / (2TP + FP + FN), TP + FP = taken
    best = int(np.argmax(f1))
    at = last[best]
    below = ranked[at + 1] if at + 1 < len(ranked) else 0.0
    return float((ranked[at] + below) / 2), float(f1[best])


def multi_label_thresholds(scores: np.ndarray, targets: np.ndarray) -> list[float]:
    """One decision threshold per label, chosen on validation for the best F1: each label's own
    where it has `MIN_POSITIVES` positives or more (labels differ in frequency, so one threshold
    for all under-calls the rare ones), else the best one over every label pooled (a threshold
    fitted to two or three positives is noise)."""
    pooled, _ = best_f1_threshold(scores.reshape(-1), targets.reshape(-1))
    thresholds = []
    for k in range(scores.shape[1]):
        enough = targets[:, k].sum() >= MIN_POSITIVES
        thresholds.append(best_f1_threshold(scores[:, k], targets[:, k])[0] if enough else pooled)
    return thresholds


def multi_label_metrics(
    scores: np.ndarray, targets: np.ndarray, thresholds: Sequence[float] | None = None
) -> dict[str, float]:
    """mAP (scikit-learn's ``average_precision_score``, the macro mean over the labels with a
    positive) and micro and macro F1 (over the labels with a positive) of probabilities
    ``scores`` [N, K] against 0/1 ``targets`` [N, K], decided at ``thresholds`` (a model's saved
    ones: ``zoo eval --data``), or else at those `multi_label_thresholds` chooses on the same
    samples (validation)."""
    from sklearn.metrics import average_precision_score

    present = targets.sum(0) > 0
    if not present.any():
        return {"map": math.nan, "f1_micro": math.nan, "f1_macro": math.nan}
    ap = float(average_precision_score(targets[:, present], scores[:, present], average="macro"))
    chosen = multi_label_thresholds(scores, targets) if thresholds is None else thresholds
    decided = scores >= np.asarray(chosen)
    tp = (decided & (targets > 0)).sum(0)
    fp = (decided & (targets == 0)).sum(0)
    fn = ((~decided) & (targets > 0)).sum(0)
    micro = 2 * tp.sum() / max(2 * tp.sum() + fp.sum() + fn.sum(), 1)
    macro = (2 * tp / np.maximum(2 * tp + fp + fn, 1))[present].mean()
    return {"map": ap, "f1_micro": float(micro), "f1_macro": float(macro)}


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
        logs = {k: v[:n] if k.startswith("cat/") else v for k, v in out.logs.items()}
        logs |= regression_sums(logits, targets, out.shift) if "sum/count" in out.logs else {}
        return StepOutput(out.per_sample_loss[:n].mean(), logits, targets, logs, out.per_sample_loss[:n], out.shift)
    flat = logits.reshape(-1, logits.shape[-1]).float()
    return StepOutput(F.cross_entropy(flat, targets.reshape(-1)), logits, targets, out.logs)
