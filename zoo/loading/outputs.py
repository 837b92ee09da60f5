"""What a model's outputs mean, read from its configuration alone: class scores (softmax, the
top k), a regression's values in the target's units (`OutputMeaning.values`: the outputs as
they are, or un-standardised in float64 when the run recorded ``target.standardised``), or multi-label logits (sigmoid, each label over its decision
threshold). ``zoo predict`` (arguments and files), ``zoo serve`` (v1 and v2) and ``zoo eval
--data`` all read outputs through here, so they say the same thing of the same model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from zoo.store import weight_entries

Task = Literal["classes", "regression", "multi_label"]
REGRESSION_HEADS = ("graph_regression", "regression")


@dataclass(frozen=True)
class OutputMeaning:
    """The task a model's head answers and the names it answers with: class names (classes),
    label names and thresholds (multi-label), the target's name, mean and std (regression)."""

    task: Task
    names: list[str] | None = None
    thresholds: list[float] | None = None
    target: Mapping[str, Any] | None = None

    @property
    def target_name(self) -> str | None:
        return self.target.get("name") if self.target else None

    @property
    def output_names(self) -> list[str] | None:
        """A regression's name of each output (``target.outputs``: a descriptor backbone's), or None."""
        return list(self.target["outputs"]) if self.target and self.target.get("outputs") else None

    def label(self, index: int) -> str:
        return self.names[index] if self.names and index < len(self.names) else str(index)

    def values(self, outputs: torch.Tensor) -> torch.Tensor:
        """A regression's outputs [N, K] in the target's units, float64: ``outputs * std + mean``
        (per output where the target lists them) when the model outputs standardised values
        (``target.standardised``: a mean too far from zero for a float32 head, as 1.7e9, or a
        head of many named outputs), else the outputs as they are."""
        outputs = outputs.detach().double().cpu().reshape(len(outputs), -1)
        if self.target and self.target.get("standardised"):
            std, mean = (torch.as_tensor(self.target[k], dtype=torch.float64) for k in ("std", "mean"))
            return outputs * std + mean  # a number, or one per output
        return outputs

    def answers(self, outputs: torch.Tensor, top_k: int = 5) -> list[dict[str, Any]]:
        """One answer per row of ``outputs`` [N, K] (a model's float outputs): ``{"classes":
        [{"label", "index", "score"}, ...]}`` (the top k by softmax), ``{"value", "target"}``
        (regression; a list of values for several outputs, with ``"outputs"`` naming them where the
        target does), or ``{"labels": [...]}`` (every label
        whose sigmoid probability reaches its threshold, most probable first)."""
        if self.task == "regression":
            named = {"outputs": self.output_names} if self.output_names else {}  # one name per value
            return [
                {"value": row[0].item() if row.numel() == 1 else row.tolist(), "target": self.target_name, **named}
                for row in self.values(outputs)
            ]
        outputs = outputs.detach().float().cpu().reshape(len(outputs), -1)
        if self.task == "multi_label":
            return [{"labels": self._over_threshold(row)} for row in outputs.sigmoid()]
        top = outputs.softmax(-1).topk(min(top_k, outputs.shape[-1]), dim=-1)
        return [
            {"classes": [self._scored(i, p) for p, i in zip(values.tolist(), indices.tolist())]}
            for values, indices in zip(top.values, top.indices)
        ]

    def _over_threshold(self, probabilities: torch.Tensor) -> list[dict[str, Any]]:
        thresholds = self.thresholds or [0.5] * len(probabilities)
        kept = [(p, i) for i, (p, t) in enumerate(zip(probabilities.tolist(), thresholds)) if p >= t]
        return [self._scored(i, p) for p, i in sorted(kept, key=lambda item: -item[0])]

    def _scored(self, index: int, score: float) -> dict[str, Any]:
        return {"label": self.label(index), "index": index, "score": score}


def output_meaning(cfg: Mapping[str, Any]) -> OutputMeaning:
    """The meaning of the outputs of a model with this configuration (its ``pretrained_cfg``)."""
    multi_label = cfg.get("multi_label")
    if multi_label:
        return OutputMeaning("multi_label", list(multi_label["names"]), [float(t) for t in multi_label["thresholds"]])
    if cfg.get("target") is not None or cfg.get("head") in REGRESSION_HEADS:
        return OutputMeaning("regression", target=cfg.get("target"))
    names = cfg.get("class_names") or (
        weight_entries.load_categories(cfg["categories"]) if cfg.get("categories") else None
    )
    return OutputMeaning("classes", list(names) if names else None)


def describe_task(meaning: OutputMeaning) -> str:
    """The task in words for a message: ``3 classes``, ``regression of 'TPSA'``, ``5 labels (multi-label)``."""
    if meaning.task == "regression":
        return f"regression of {meaning.target_name!r}" if meaning.target_name else "regression"
    count = len(meaning.names) if meaning.names else "its"
    return f"{count} labels (multi-label)" if meaning.task == "multi_label" else f"{count} classes"


__all__ = ["OutputMeaning", "describe_task", "output_meaning"]
