"""`ServedModel`: one loaded model as the server sees it: its kind (images, vectors or a
byte-level LM), its v2 input and output tensors, its class names, its page documents, and the
forward that the batcher calls (on `zoo.optimize`'s module when the server was asked to)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

import zoo
from zoo.deploy.exporter import example_input_for
from zoo.errors import InvalidArgumentError, ZooError
from zoo.loading.molecules import reads_molecules
from zoo.serve.protocol import ModelMetadata, TensorMetadata
from zoo.serve.serve_options import ServeConfig
from zoo.store import registry
from zoo.tokenizer import check_byte_lm

SERVED_KINDS = ("images", "vectors", "text")


@dataclass(frozen=True)
class TensorSpec:
    """A v2 tensor: name, datatype, shape with -1 for any size (the batch)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def metadata(self) -> TensorMetadata:
        return TensorMetadata(name=self.name, datatype=self.datatype, shape=list(self.shape))


@dataclass
class Documents:
    """What the page shows of a model: its card (Markdown), metrics, and PNG files by role
    (``curves``, ``confusion``): paths fixed when the model loads, never named by a client."""

    card: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    images: dict[str, Path] = field(default_factory=dict)


@dataclass
class ServedModel:
    name: str
    model: nn.Module
    kind: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    class_names: list[str] | None = None
    documents: Documents = field(default_factory=Documents)
    runner: nn.Module | None = None  # what forward runs: zoo.optimize's module, else the model
    context_length: int = 0  # text: prompt + new tokens at most
    preprocess: Callable[[Any], torch.Tensor] | None = None  # images: the weights' own eval transforms

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        """Class scores (float32, on the CPU) of a batch of model inputs; called from the
        model's worker thread."""
        with torch.no_grad():  # not inference_mode: an optimized model's compiled graph expects no_grad
            return (self.runner or self.model)(batch.to(self.device)).float().cpu()

    def metadata(self) -> ModelMetadata:
        parameters: dict[str, Any] = {"kind": self.kind}
        if self.class_names:
            parameters["class_names"] = self.class_names
        if self.context_length:
            parameters["context_length"] = self.context_length
        return ModelMetadata(
            name=self.name,
            versions=["1"],
            platform="pytorch_zoo",
            inputs=[s.metadata() for s in self.inputs],
            outputs=[s.metadata() for s in self.outputs],
            parameters=parameters,
        )

    def label(self, index: int) -> str:
        return self.class_names[index] if self.class_names and index < len(self.class_names) else str(index)


def load_served(source: str, config: ServeConfig) -> ServedModel:
    """``source`` (a weight name or a saved folder) loaded for serving, optimized when asked."""
    model = zoo.load(source, device=config.device)
    cfg = model.pretrained_cfg
    kind = registry.input_kind(cfg["architecture"])
    name = served_name(source)
    if reads_molecules(cfg):  # SMILES in: zoo.serve.molecules
        return _molecule_model(name, model, _documents(source, name))
    if kind not in SERVED_KINDS:
        raise InvalidArgumentError(
            f"{name} reads {kind}, which zoo serve does not take; it serves image and vector "
            "classifiers and byte-level language models"
        )
    documents = _documents(source, name)
    if kind == "text":
        return _text_model(name, model, documents)
    if cfg.get("head") not in (None, "classification"):
        raise InvalidArgumentError(f"{name} has head {cfg.get('head')!r}; zoo serve serves classification heads")
    if cfg.get("features_only") or not getattr(model, "num_classes", 0):  # as zoo predict refuses it
        raise InvalidArgumentError(
            f"{name} outputs feature maps, not class scores (a features-only model or one without a "
            "classifier): zoo serve needs a classifier's weights"
        )
    example = example_input_for(model, batch=1)
    names = cfg.get("class_names") or (registry.load_categories(cfg["categories"]) if cfg.get("categories") else None)
    served = ServedModel(
        name, model, kind,
        inputs=[TensorSpec("input", "FP32", (-1, *example.shape[1:]))],
        outputs=[TensorSpec("logits", "FP32", (-1, cfg["num_classes"]))],
        class_names=list(names) if names else None, documents=documents,
        preprocess=zoo.transforms(model) if kind == "images" else None,
    )  # fmt: skip
    if config.optimize:
        served.runner = _optimized(model, example, config.optimize, config.max_batch)
    return served


def _molecule_model(name: str, model: nn.Module, documents: Documents) -> ServedModel:
    """A model fine-tuned on molecules: the v2 BYTES input ``smiles``, its values or class scores out."""
    cfg = model.pretrained_cfg
    output = "prediction" if cfg.get("target") is not None else "logits"
    names = cfg.get("class_names")
    return ServedModel(
        name, model, "molecules",
        inputs=[TensorSpec("smiles", "BYTES", (-1,))],
        outputs=[TensorSpec(output, "FP32", (-1, cfg["num_classes"]))],
        class_names=list(names) if names else None, documents=documents,
    )  # fmt: skip


def _text_model(name: str, model: nn.Module, documents: Documents) -> ServedModel:
    check_byte_lm(model, name)
    return ServedModel(
        name,
        model,
        "text",
        inputs=[TensorSpec("text_input", "BYTES", (-1,))],
        outputs=[TensorSpec("text_output", "BYTES", (-1,))],
        documents=documents,
        context_length=model.config.max_position_embeddings,
    )


def served_name(source: str) -> str:
    """The name clients use: the weight name, or a folder's own name."""
    path = Path(source)
    return path.resolve().name if path.is_dir() else source


def _optimized(model: nn.Module, example: torch.Tensor, precision: str, max_batch: int) -> nn.Module:
    """`zoo.optimize` timed at ``max_batch``; graphs compiled up front for that size, 1 and a
    quarter of it, so that later batches of any size run on them (padded) without compiling."""
    sizes = list(dict.fromkeys([max_batch, 1, max(1, max_batch // 4)]))
    batch = example.expand(max_batch, *example.shape[1:]).clone().normal_()
    print(
        f"zoo serve: optimizing {model.pretrained_cfg.get('weights')} ({precision}) for batches of {sizes}; "
        "compiling takes a while",
        file=sys.stderr,
    )
    runner = zoo.optimize(model, batch, precision, max_batch_graphs=len(sizes))
    with torch.no_grad():
        for size in sizes[1:]:
            runner(batch[:size])
    print(f"zoo serve: {str(runner.optimize_report).splitlines()[0]}", file=sys.stderr)
    return runner


def _documents(source: str, name: str) -> Documents:
    """A registered weight's card and curves, or a `zoo finetune` folder's README, metrics and plots."""
    folder = Path(source)
    if folder.is_dir():
        images = {
            role: folder / file
            for role, file in (("curves", "curves.png"), ("confusion", "confusion_matrix.png"))
            if (folder / file).is_file()
        }
        card = folder / "README.md"
        return Documents(card.read_text() if card.is_file() else None, _folder_metrics(folder), images)
    try:
        info = zoo.info(name)
    except ZooError:  # a Hub repository or checkpoint: no card of zoo's
        return Documents()
    curves = Path(str(resources.files("zoo.weights").joinpath(f"{info.name}.png")))
    return Documents(info.card_text(), dict(info.metrics or {}), {"curves": curves} if curves.is_file() else {})


def _folder_metrics(folder: Path) -> dict[str, Any]:
    """The last epoch of metrics.json (training/loop/run_logs.py's history) and its scalar extras."""
    try:
        data = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    history = data.get("history") or []
    last = history[-1] if history and isinstance(history[-1], dict) else {}
    extras = {k: v for k, v in data.items() if k != "history" and isinstance(v, int | float | str)}
    return {"last epoch": {k: v for k, v in last.items() if isinstance(v, int | float)}, **extras}
