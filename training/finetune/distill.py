"""Knowledge distillation in a fine-tuning run (`zoo.training.finetune.finetuning`): a frozen
teacher named by the user (`Distillation`) becomes the `zoo.training.loop.steps.DistillationStep`
the Trainer runs, with the student's image normalisation mapped to the teacher's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn as nn

import zoo
from zoo.bounds import Bounds, bounded, check_fields
from zoo.errors import InvalidArgumentError
from zoo.training.data.images.augment import default_preprocess
from zoo.training.data.source import DataSource
from zoo.training.loop.steps import DistillationStep

DISTILLATION_FLAGS = {"alpha": "--distill-alpha", "temperature": "--distill-temperature"}


@dataclass(frozen=True)
class Distillation:
    """A frozen teacher that `finetune` learns from as well as from the labels
    (`zoo.training.loop.steps.DistillationStep`): a weight name or a `zoo.save` folder that predicts the
    data's classes. Images are renormalised from the student's preprocessing to the teacher's;
    ``bf16`` runs the teacher under bfloat16 autocast (faster where the CPU has native bf16)."""

    teacher: str
    alpha: float = field(default=0.5, metadata=bounded(Bounds(0, 1)))  # the teacher's share of the loss
    kind: Literal["hard", "soft"] = "hard"
    temperature: float = field(default=1.0, metadata=bounded(Bounds(0, 100, low_open=True)))
    bf16: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "Distillation", DISTILLATION_FLAGS)
        if self.kind not in ("hard", "soft"):
            raise InvalidArgumentError(f"Distillation.kind (--distill-kind) must be hard or soft, got {self.kind!r}")

    def __str__(self) -> str:
        labels = "hard labels" if self.kind == "hard" else f"soft labels at temperature {self.temperature:g}"
        return f"{labels} of {self.teacher}" + (" (run in bf16)" if self.bf16 else "") + f", weight {self.alpha:g}"


def distillation_step(
    spec: Distillation, source: DataSource, student: nn.Module, label_smoothing: float = 0.0
) -> DistillationStep:
    """The `DistillationStep` of ``spec`` for ``student`` on data from ``source`` (images
    normalised by the student's ``pretrained_cfg["preprocess"]``)."""
    teacher = zoo.load(spec.teacher)
    names = teacher.pretrained_cfg.get("class_names")
    if teacher.num_classes != source.num_classes or (names and source.class_names and names != source.class_names):
        raise InvalidArgumentError(
            f"the teacher {spec.teacher} predicts {teacher.num_classes} classes and {source.description} has "
            f"{source.num_classes}{'' if not names else f' ({names} against {source.class_names})'}: a teacher "
            "must predict the data's classes; fine-tune one on it first (zoo finetune NAME --data ...) and pass "
            "its output folder"
        )
    teacher_input = None
    if source.kind == "images":
        in_chans, student_chans = getattr(teacher, "in_chans", None), getattr(student, "in_chans", None)
        if None not in (in_chans, student_chans) and in_chans != student_chans:
            raise InvalidArgumentError(
                f"the teacher {spec.teacher} takes {in_chans}-channel images and the student {student_chans}-channel "
                "ones; pick a teacher with the student's channel count"
            )
        preprocess = teacher.pretrained_cfg.get("preprocess") or default_preprocess(in_chans or source.in_chans)
        teacher_input = _renormalize(student.pretrained_cfg.get("preprocess") or {}, preprocess)
    return DistillationStep(
        teacher=teacher,
        alpha=spec.alpha,
        kind=spec.kind,
        temperature=spec.temperature,
        label_smoothing=label_smoothing,
        teacher_input=teacher_input,
        teacher_dtype=torch.bfloat16 if spec.bf16 else None,
    )


def _renormalize(
    student: Mapping[str, Any], teacher: Mapping[str, Any]
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Images normalised as ``student`` says, normalised as ``teacher`` says instead (None when
    the two agree): x * s_std / t_std + (s_mean - t_mean) / t_std, per channel."""
    mean_s, std_s = torch.tensor(student.get("mean", [0.0])), torch.tensor(student.get("std", [1.0]))
    mean_t, std_t = torch.tensor(teacher.get("mean", [0.0])), torch.tensor(teacher.get("std", [1.0]))
    if mean_s.shape == mean_t.shape and torch.equal(mean_s, mean_t) and torch.equal(std_s, std_t):
        return None
    scale, shift = (std_s / std_t)[:, None, None], ((mean_s - mean_t) / std_t)[:, None, None]
    return lambda x: x * scale.to(x) + shift.to(x)
