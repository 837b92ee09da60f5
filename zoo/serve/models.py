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

import numpy as np
import torch
import torch.nn as nn

import zoo
from zoo.deploy.exporter import example_input_for
from zoo.errors import InvalidArgumentError, ZooError
from zoo.loading.outputs import OutputMeaning, output_meaning
from zoo.loading.smiles import reads_molecules
from zoo.loading.transforms import text_length
from zoo.serve.protocol import ModelMetadata, TensorMetadata
from zoo.serve.serve_options import ServeConfig
from zoo.store import weight_entries
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
    meaning: OutputMeaning | None = None  # what the outputs say (classes, values, labels); None: a language model

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
        if self.meaning is not None:
            parameters["task"] = self.meaning.task
        if self.class_names:
            parameters["class_names"] = self.class_names
        if self.meaning is not None and self.meaning.task == "multi_label":
            parameters["thresholds"] = self.meaning.thresholds
        if self.meaning is not None and self.meaning.target:
            parameters["target"] = self.meaning.target_name
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

    def answers(self, outputs: torch.Tensor, top_k: int) -> list[dict[str, Any]]:
        """The v1 answer of each row of outputs: its top classes, value or labels over threshold
        (`zoo.loading.outputs`, as ``zoo predict`` prints them)."""
        return (self.meaning or OutputMeaning("classes", self.class_names)).answers(outputs, top_k)

    def v2_outputs(self, outputs: torch.Tensor) -> dict[str, np.ndarray]:
        """The v2 output tensors of the model's outputs [N, K]: ``logits`` (classes), ``prediction``
        (regression, the target's units, FP64), or ``probabilities`` and ``decisions`` (multi-label:
        sigmoid, and whether each reaches its label's threshold)."""
        if self.meaning is not None and self.meaning.task == "multi_label":
            probabilities = outputs.float().sigmoid()
            thresholds = torch.tensor(self.meaning.thresholds or [0.5] * outputs.shape[-1])
            return {"probabilities": probabilities.numpy(), "decisions": (probabilities >= thresholds).numpy()}
        if self.meaning is not None and self.meaning.task == "regression":
            return {"prediction": self.meaning.values(outputs).numpy()}  # float64: every digit of 1.7e9 + 10 i
        return {self.outputs[0].name: outputs.float().numpy()}


def output_specs(meaning: OutputMeaning, width: int) -> list[TensorSpec]:
    """The v2 outputs a model of this meaning answers (`ServedModel.v2_outputs`)."""
    if meaning.task == "regression":
        return [TensorSpec("prediction", "FP64", (-1, width))]
    if meaning.task == "multi_label":
        return [TensorSpec("probabilities", "FP32", (-1, width)), TensorSpec("decisions", "BOOL", (-1, width))]
    return [TensorSpec("logits", "FP32", (-1, width))]


def load_served(source: str, config: ServeConfig) -> ServedModel:
    """``source`` (a weight name or a saved folder) loaded for serving, optimized when asked."""
    model = zoo.load(source, device=config.device)
    cfg = model.pretrained_cfg
    kind = weight_entries.input_kind(cfg["architecture"])
    name = served_name(source)
    if reads_molecules(cfg):  # SMILES in: zoo.serve.smiles_requests
        return _molecule_model(name, model, _documents(source, name))
    if kind not in SERVED_KINDS:
        raise InvalidArgumentError(
            f"{name} reads {kind}, which zoo serve does not take; it serves image and vector "
            "classifiers and byte-level language models"
        )
    documents = _documents(source, name)
    if kind == "text" and cfg.get("head") == "sequence_classification":
        return _text_classifier(name, model, documents)
    if kind == "text":
        return _text_model(name, model, documents)
    if cfg.get("head") not in (None, "classification"):
        raise InvalidArgumentError(
            f"{name} has head {cfg.get('head')!r}; zoo serve serves classification heads (classes, values, labels)"
        )
    if cfg.get("features_only") or not getattr(model, "num_classes", 0):  # as zoo predict refuses it
        raise InvalidArgumentError(
            f"{name} outputs feature maps, not class scores (a features-only model or one without a "
            "classifier): zoo serve needs a classifier's weights"
        )
    example = example_input_for(model, batch=1)
    meaning = output_meaning(cfg)
    served = ServedModel(
        name, model, kind,
        inputs=[TensorSpec("input", "FP32", (-1, *example.shape[1:]))],
        outputs=output_specs(meaning, cfg["num_classes"]),
        class_names=meaning.names, documents=documents,
        preprocess=zoo.transforms(model) if kind == "images" else None, meaning=meaning,
    )  # fmt: skip
    if config.optimize:
        served.runner = _optimized(model, example, config.optimize, config.max_batch)
    return served


def _molecule_model(name: str, model: nn.Module, documents: Documents) -> ServedModel:
    """A model fine-tuned on molecules: the v2 BYTES input ``smiles``, its values or class scores out."""
    return _strings_model(name, model, documents, "molecules", "smiles")


def _text_classifier(name: str, model: nn.Module, documents: Documents) -> ServedModel:
    """A text classifier (or regression, or multi-label) fine-tuned on text rows: the v2 BYTES
    input ``text``, byte tokens as in training (`zoo.serve.text_requests`)."""
    return _strings_model(name, model, documents, "texts", "text", context_length=text_length(model))


def _strings_model(name: str, model: nn.Module, documents: Documents, kind: str, input_name: str,
                   **extra: Any) -> ServedModel:  # fmt: skip
    """A model whose requests are strings (one v2 BYTES input): its outputs as its config says."""
    cfg = model.pretrained_cfg
    meaning = output_meaning(cfg)
    return ServedModel(
        name, model, kind,
        inputs=[TensorSpec(input_name, "BYTES", (-1,))],
        outputs=output_specs(meaning, cfg["num_classes"]),
        class_names=meaning.names, documents=documents, meaning=meaning, **extra,
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
    """The name clients use: the weight name, a folder's own name, or a Hub repository's
    ``ORG/REPO`` as ``ORG--REPO`` (Hugging Face's cache spelling: a route's name holds no '/')."""
    path = Path(source)
    if path.is_dir():
        return path.resolve().name
    return source.removeprefix("hf-hub:").replace("/", "--") if source.startswith("hf-hub:") else source


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
    """The last epoch of metrics.json (training/loop/records/run_logs.py's history) and its scalar extras."""
    try:
        data = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    history = data.get("history") or []
    last = history[-1] if history and isinstance(history[-1], dict) else {}
    extras = {k: v for k, v in data.items() if k != "history" and isinstance(v, int | float | str)}
    return {"last epoch": {k: v for k, v in last.items() if isinstance(v, int | float)}, **extras}
