"""Training steps, batch -> loss: what one `zoo.training.loop.trainer.Trainer` step computes.

`StepFn` is the type of a step (``step(model, batch) -> StepOutput``); `ClassificationStep`
(cross-entropy, plus the model's auxiliary loss), `DistillationStep` (the same, learning also
from a frozen teacher), `RegressionStep` (MSE or Huber on standardised targets) and
`MaskedRegressionStep` (MSE over the targets present, NaN marking a missing one) are the
ones the zoo ships. `forward_with_aux` is the one place that knows
about routing/auxiliary losses. The batch helpers the steps and the evaluation loops share live
here too: `split_batch` (inputs and targets) and `move_to_device`; `check_manual_step` refuses what a
step that sets the gradients itself cannot do.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo.errors import InvalidArgumentError


@dataclass
class StepOutput:
    """What one step function returns: the loss to minimise, and optionally the logits and
    targets (for accuracy) and extra scalars to log (averaged over the epoch; keys starting with
    ``sum/`` are totals, summed over the epoch: `regression_sums`). A loss without autograd
    history means the step has set the parameters' ``.grad`` itself (contrastive divergence,
    say); the Trainer then only logs it, and averages the gradients over processes.
    ``per_sample_loss`` lets the loss be recomputed on part of a batch (a padded last batch),
    with the ``shift`` a regression's ``sum/`` totals were taken with."""

    loss: torch.Tensor
    logits: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    logs: dict[str, torch.Tensor | float] = field(default_factory=dict)
    per_sample_loss: torch.Tensor | None = None
    shift: float = 0.0


StepFn = Callable[[nn.Module, Any], StepOutput]


def check_manual_step(num_micro_batches: int, precision: str, fsdp: bool) -> None:
    """Refuse what a step that sets ``.grad`` itself (its loss has no autograd history) cannot
    do: accumulate micro-batches (it overwrites, not adds), fp16 scaling, FSDP."""
    if num_micro_batches > 1:
        raise InvalidArgumentError(
            "this step sets the gradients itself (its loss has no autograd history), so it cannot "
            "accumulate micro-batches: use accum_steps=1"
        )
    if precision == "fp16" or fsdp:
        raise InvalidArgumentError(
            "a step that sets the gradients itself works in fp32/bf16 and with DDP, not fp16 or FSDP"
        )


def split_batch(batch: Any, *, other_batches: str = "Trainer(step_fn=...)") -> tuple[Any, torch.Tensor]:
    """(inputs, targets) from an ``(x, y)`` pair, a dict with ``labels``/``label``/``y``
    (the rest are the model's keyword inputs), or a PyG batch (the batch itself and ``.y``):
    the one batch layout the steps, the evaluation report and post-training share.
    ``other_batches`` names, in the error, what the caller takes for other layouts."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, Mapping):
        key = next((k for k in ("labels", "label", "y") if k in batch), None)
        if key is not None:
            return {k: v for k, v in batch.items() if k != key}, batch[key]
    elif getattr(batch, "y", None) is not None:
        return batch, batch.y
    raise InvalidArgumentError(
        f"cannot find the targets in a batch of type {type(batch).__name__}: expected (inputs, targets), "
        f"a dict with 'labels', or a PyG batch with .y; pass {other_batches} for other batches"
    )


def move_to_device(batch: Any, device: torch.device, *, non_blocking: bool = False, channels_last: bool = False) -> Any:
    """``batch`` with every tensor on ``device``: tensors, (nested) tuples/lists/dicts, and
    objects with a ``.to`` method (PyG ``Data``/``Batch``); anything else is returned as is.
    ``non_blocking`` copies asynchronously (from pinned memory); ``channels_last`` puts 4-d
    floating-point tensors (image batches) in NHWC memory format."""
    if isinstance(batch, torch.Tensor):
        batch = batch.to(device, non_blocking=non_blocking)
        if channels_last and batch.ndim == 4 and batch.is_floating_point():
            batch = batch.contiguous(memory_format=torch.channels_last)
        return batch
    if isinstance(batch, Mapping):
        return {
            k: move_to_device(v, device, non_blocking=non_blocking, channels_last=channels_last)
            for k, v in batch.items()
        }
    if isinstance(batch, (tuple, list)):
        return type(batch)(
            move_to_device(v, device, non_blocking=non_blocking, channels_last=channels_last) for v in batch
        )
    if hasattr(batch, "to"):  # PyG Data/Batch and similar containers
        return batch.to(device, non_blocking=True) if non_blocking else batch.to(device)
    return batch


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside DistributedDataParallel and torch.compile wrappers (FSDP2 wraps none)."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


def with_aux_loss(
    loss: torch.Tensor, aux_loss: torch.Tensor | None, weight: float, logs: dict[str, torch.Tensor]
) -> torch.Tensor:
    """``loss`` plus ``weight`` times the model's auxiliary loss, which is logged as ``aux_loss``
    (unchanged without one)."""
    if aux_loss is None:
        return loss
    logs["aux_loss"] = aux_loss.detach()
    return loss + weight * aux_loss


def forward_with_aux(
    model: nn.Module, inputs: Any
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor]]:
    """(logits, aux_loss or None, logs) of ``model`` on ``inputs``: the one place that knows
    about auxiliary losses. ``model(x)`` returns logits; a model whose ``forward`` takes
    ``return_aux`` (the MoE models) is called with ``return_aux=True`` and returns an object
    with ``logits``, ``aux_loss`` and ``expert_fractions`` (share of token slots per expert,
    [layers, experts], as `zoo.architectures.moe.moe_transformer.MoEOutput`), logged per expert as
    ``expert_load/<i>``, the mean over layers. The call goes through the wrappers (DDP,
    torch.compile), so their hooks see it."""
    takes_aux = "return_aux" in inspect.signature(unwrap_model(model).forward).parameters
    kwargs = {"return_aux": True} if takes_aux else {}
    output = model(**inputs, **kwargs) if isinstance(inputs, Mapping) else model(inputs, **kwargs)
    if not takes_aux:
        return output, None, {}
    logs: dict[str, torch.Tensor] = {}
    fractions = output.expert_fractions
    if fractions.numel():
        fractions = fractions.detach().float()
        for i, value in enumerate(fractions.reshape(-1, fractions.shape[-1]).mean(0)):
            logs[f"expert_load/{i}"] = value
    return output.logits, output.aux_loss, logs


def rows_forward(
    model: nn.Module, batch: Any, target_dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor]]:
    """`forward_with_aux` for the steps whose targets are one row per sample [N, K] (regression,
    multi-label): the outputs as float [N, K], the targets in ``target_dtype`` of that shape."""
    inputs, targets = split_batch(batch)
    output, aux_loss, logs = forward_with_aux(model, inputs)
    output = output.float().reshape(targets.shape[0], -1)
    return output, targets.to(target_dtype).reshape(output.shape), aux_loss, logs


@dataclass
class ClassificationStep:
    """Cross-entropy on the model's logits ([N, K], or [N, T, K] with targets [N, T] and
    -100 for ignored positions), plus ``aux_loss_weight`` times the model's ``aux_loss``
    (`forward_with_aux`)."""

    label_smoothing: float = 0.0
    aux_loss_weight: float = 1.0

    def __call__(self, model: nn.Module, batch: Any) -> StepOutput:
        inputs, targets = split_batch(batch)
        logits, aux_loss, logs = self._logits_and_weighted_aux_loss(model, inputs)
        loss = self._cross_entropy(logits, targets.reshape(-1)) + aux_loss
        return StepOutput(loss, logits.detach(), targets, logs)

    def _logits_and_weighted_aux_loss(
        self, model: nn.Module, inputs: Any
    ) -> tuple[torch.Tensor, torch.Tensor | float, dict[str, Any]]:
        """(logits, weighted aux loss or 0, logs) of ``model`` on ``inputs``."""
        logits, aux_loss, logs = forward_with_aux(model, inputs)
        if aux_loss is None:
            return logits, 0.0, logs
        logs["aux_loss"] = aux_loss.detach()
        return logits, self.aux_loss_weight * aux_loss, logs

    def _cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        flat_logits = logits.reshape(-1, logits.shape[-1]) if logits.ndim > 2 else logits
        return F.cross_entropy(flat_logits.float(), targets, label_smoothing=self.label_smoothing)


@dataclass
class DistillationStep(ClassificationStep):
    """Knowledge distillation from a frozen ``teacher`` run on the same (augmented) batch:
    ``(1 - alpha)`` times the cross-entropy with the labels plus ``alpha`` times a loss against
    the teacher's predictions, either its argmax labels ("hard", DeiT's hard distillation:
    Touvron et al., 2021) or its distribution softened at ``temperature`` ("soft": KL
    divergence times T², Hinton et al., 2015). ``teacher_input`` maps the student's inputs to
    the teacher's (another normalisation); ``teacher_dtype`` runs the teacher under autocast to
    it (bfloat16 for speed). Validation uses a plain `ClassificationStep`."""

    teacher: nn.Module | None = None
    alpha: float = 0.5
    kind: Literal["hard", "soft"] = "hard"
    temperature: float = 1.0
    teacher_input: Callable[[Any], Any] | None = None
    teacher_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        if self.teacher is None:
            raise InvalidArgumentError("DistillationStep needs a teacher model, e.g. zoo.load('resnet56.fmnist')")
        if not 0.0 <= self.alpha <= 1.0 or self.temperature <= 0 or self.kind not in ("hard", "soft"):
            raise InvalidArgumentError(
                f"DistillationStep needs 0 <= alpha <= 1, temperature > 0 and kind 'hard' or 'soft'; got "
                f"alpha={self.alpha}, temperature={self.temperature}, kind={self.kind!r}"
            )
        self.teacher.eval().requires_grad_(False)

    def __call__(self, model: nn.Module, batch: Any) -> StepOutput:
        inputs, targets = split_batch(batch)
        logits, aux_loss, logs = self._logits_and_weighted_aux_loss(model, inputs)
        targets_flat = targets.reshape(-1)
        teacher_logits = self._teacher_logits(inputs, logits.device).reshape(-1, logits.shape[-1])
        if self.kind == "hard":
            distill = self._cross_entropy(logits, teacher_logits.argmax(-1).masked_fill(targets_flat == -100, -100))
        else:
            student = F.log_softmax(logits.reshape(-1, logits.shape[-1]).float() / self.temperature, dim=-1)
            teacher = F.log_softmax(teacher_logits / self.temperature, dim=-1)
            per_sample = F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)
            valid = targets_flat != -100
            distill = (per_sample * valid).sum() / valid.sum().clamp(min=1) * self.temperature**2
        logs["distill_loss"] = distill.detach()
        loss = (1 - self.alpha) * self._cross_entropy(logits, targets_flat) + self.alpha * distill + aux_loss
        return StepOutput(loss, logits.detach(), targets, logs)

    @torch.no_grad()
    def _teacher_logits(self, inputs: Any, device: torch.device) -> torch.Tensor:
        teacher = self.teacher.to(device)
        inputs = self.teacher_input(inputs) if self.teacher_input else inputs
        with torch.autocast(device.type, dtype=self.teacher_dtype, enabled=self.teacher_dtype is not None):
            logits = teacher(**inputs) if isinstance(inputs, Mapping) else teacher(inputs)
        return logits.float()


REGRESSION_LOSSES = ("mse", "huber")


# Which way each metric zoo reports is better, by the end of its name (``val_f1_micro``,
# ``train_loss``, a step's ``val_aux_loss``): stated once, read by the best epoch, early stopping,
# the plateau schedule, and zoo tune's objective and pruner.
HIGHER_IS_BETTER = ("acc", "top5", "r2", "map", "f1_micro", "f1_macro", "auroc", "auc")
LOWER_IS_BETTER = ("loss", "mae", "rmse", "mse", "error", "ppl", "bpb")


def higher_is_better(metric: str) -> bool:
    """Whether a higher value of ``metric`` is better (`HIGHER_IS_BETTER`, `LOWER_IS_BETTER`);
    a name that ends in neither is refused, naming what it takes."""
    for ends, higher in ((HIGHER_IS_BETTER, True), (LOWER_IS_BETTER, False)):
        if any(metric == end or metric.endswith("_" + end) for end in ends):
            return higher
    raise InvalidArgumentError(
        f"metric {metric!r}: zoo does not know whether a higher value is better; name one ending in "
        f"{', '.join(HIGHER_IS_BETTER)} (higher is better) or {', '.join(LOWER_IS_BETTER)} (lower), e.g. val_acc"
    )


def improves(monitor: str, row: dict[str, float], best: dict[str, float] | None) -> bool:
    """Whether epoch ``row`` beats the best epoch's ``best`` by ``monitor`` (`higher_is_better`).
    A tie (accuracy on a small validation set often ties) goes to the lower ``val_loss``: the
    later, better-fitted epoch rather than the first that reached the value."""
    if best is None:
        return True
    value, kept = row[monitor], best[monitor]
    if value != kept:
        return value > kept if higher_is_better(monitor) else value < kept
    loss, kept_loss = row.get("val_loss"), best.get("val_loss")
    return monitor != "val_loss" and loss is not None and kept_loss is not None and loss < kept_loss


def monitor_name(monitor: str | None, eval_step_fn: StepFn, has_val: bool) -> str:
    """The metric that picks a run's best epoch: ``monitor`` when set (its direction known:
    `higher_is_better`), else val_acc for classifiers, val_loss for other steps, train_loss
    without validation data."""
    if monitor:
        higher_is_better(monitor)
        return monitor
    if not has_val:
        return "train_loss"
    if isinstance(eval_step_fn, MultiLabelStep):
        return "val_map"
    return "val_acc" if isinstance(eval_step_fn, ClassificationStep) else "val_loss"


def regression_sums(predictions: torch.Tensor, targets: torch.Tensor, shift: float = 0.0) -> dict[str, torch.Tensor]:
    """The totals MAE, RMSE and R² are computed from over an epoch (``sum/`` logs, summed by
    `zoo.training.loop.meter.EpochMeter`), in float64 and the targets' units: the absolute and
    squared errors, and the targets less ``shift`` and their squares (a shift near the targets'
    mean keeps R²'s spread exact for targets far from zero, as 1.7e9 + 10 i)."""
    predictions, targets = predictions.detach().double(), targets.detach().double()
    error = predictions - targets
    centred = targets - shift
    return {
        "sum/count": torch.tensor(float(targets.numel()), dtype=torch.float64, device=targets.device),
        "sum/abs_error": error.abs().sum(),
        "sum/squared_error": error.square().sum(),
        "sum/target": centred.sum(),
        "sum/target_squared": centred.square().sum(),
    }


@dataclass
class RegressionStep:
    """MSE (or Huber, ``delta`` 1) between the model's outputs [N, K] and the targets
    standardised by ``mean`` and ``std`` (the training set's), plus ``aux_loss_weight`` times
    the model's auxiliary loss. The step output's ``logits`` are the predictions in the targets'
    units (``output * std + mean``, float64: targets as 1.7e9 + 10 i keep their last digits), and
    its ``sum/`` logs give MAE, RMSE and R² in them; after training `fold_standardisation` puts
    the same map into the head when float32 holds it exactly, else the run records it."""

    mean: float = 0.0
    std: float = 1.0
    loss: str = "mse"
    aux_loss_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.loss not in REGRESSION_LOSSES or not self.std > 0:
            raise InvalidArgumentError(
                f"RegressionStep needs loss one of {', '.join(REGRESSION_LOSSES)} and std > 0, got loss={self.loss!r}, "
                f"std={self.std}"
            )

    def __call__(self, model: nn.Module, batch: Any) -> StepOutput:
        output, targets, aux_loss, logs = rows_forward(model, batch, torch.float64)
        standard = ((targets - self.mean) / self.std).float()
        if self.loss == "mse":
            per_sample = F.mse_loss(output, standard, reduction="none").mean(-1)
        else:
            per_sample = F.huber_loss(output, standard, reduction="none").mean(-1)
        loss = per_sample.mean()
        loss = with_aux_loss(loss, aux_loss, self.aux_loss_weight, logs)
        predictions = output.detach().double() * self.std + self.mean
        logs |= regression_sums(predictions, targets, self.mean)
        return StepOutput(loss, predictions, targets, logs, per_sample.detach(), self.mean)


@dataclass
class MultiLabelStep:
    """Binary cross-entropy on logits (``BCEWithLogits``: one sigmoid per label) against
    multi-hot targets [N, K], plus ``aux_loss_weight`` times the model's auxiliary loss. With
    ``keep_scores`` (the evaluation step) the probabilities and targets go to the epoch's
    meter as ``cat/`` logs, from which it computes mAP and the F1 scores at the thresholds
    chosen on them (`zoo.training.loop.meter.multi_label_metrics`)."""

    keep_scores: bool = False
    aux_loss_weight: float = 1.0

    def __call__(self, model: nn.Module, batch: Any) -> StepOutput:
        logits, targets, aux_loss, logs = rows_forward(model, batch)
        per_sample = F.binary_cross_entropy_with_logits(logits, targets, reduction="none").mean(-1)
        loss = per_sample.mean()
        loss = with_aux_loss(loss, aux_loss, self.aux_loss_weight, logs)
        if self.keep_scores:
            logs |= {"cat/scores": logits.detach().sigmoid(), "cat/targets": targets.detach()}
        return StepOutput(loss, logits.detach(), targets, logs, per_sample.detach())


@dataclass
class MaskedRegressionStep:
    """MSE between the model's outputs [N, K] and targets [N, K] that may be missing (NaN, or
    any value that is not finite): the mean squared error over the present targets only, so a
    missing one adds neither loss nor gradient (many outputs, each target of a sample measured
    or not: the molecular descriptors a backbone is pretrained on), plus ``aux_loss_weight``
    times the model's auxiliary loss. The targets are standardised beforehand. Its ``sum/``
    logs are over the present targets, so an epoch's ``rmse`` squared is the masked MSE of the
    whole epoch; its ``targets`` have each missing one replaced by the prediction (no error)."""

    aux_loss_weight: float = 1.0

    def __call__(self, model: nn.Module, batch: Any) -> StepOutput:
        output, targets, aux_loss, logs = rows_forward(model, batch)
        present = torch.isfinite(targets)
        # where(), not a product with the mask: a NaN target times 0 is still NaN, in the loss and its gradient
        squared = torch.where(present, (output - targets.nan_to_num(0.0, 0.0, 0.0)).square(), 0.0)
        loss = squared.sum() / present.sum().clamp(min=1)
        per_sample = squared.sum(-1) / present.sum(-1).clamp(min=1)
        loss = with_aux_loss(loss, aux_loss, self.aux_loss_weight, logs)
        predictions = output.detach()
        logs |= regression_sums(predictions[present], targets[present])
        filled = torch.where(present, targets, predictions)
        return StepOutput(loss, predictions, filled, logs, per_sample.detach())


# the largest |mean| / std whose map float32 holds to about 1e-5 std, and the std range it scales by safely
FOLDED_OFFSET = 100.0
FOLDED_STD = (1e-20, 1e20)


def folds_exactly(mean: float, std: float) -> bool:
    """Whether ``std * output + mean`` in a float32 head keeps the targets' precision (to about
    1e-5 std): not for targets far from zero against their spread (1.7e9 + 10 i, 1e12 + 0.01 i)."""
    return FOLDED_STD[0] <= std <= FOLDED_STD[1] and abs(mean) <= FOLDED_OFFSET * std


@torch.no_grad()
def fold_standardisation(model: nn.Module, mean: float, std: float) -> bool:
    """Make ``model`` output the targets' units when float32 holds them (`folds_exactly`): its
    linear head ``W h + b`` becomes ``std * (W h + b) + mean``; False (the model unchanged, its
    outputs standardised: the run records the map for whatever reads them) otherwise."""
    head = model.get_classifier() if hasattr(model, "get_classifier") else None
    if not isinstance(head, nn.Linear):
        raise InvalidArgumentError(  # internal: every zoo model that regresses has a linear head
            f"cannot fold the target standardisation into {type(head).__name__}: a linear head is needed"
        )
    if not folds_exactly(mean, std):
        return False
    head.weight.mul_(std)
    if head.bias is not None:
        head.bias.mul_(std).add_(mean)
    return True
