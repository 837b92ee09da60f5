"""`Predictor`: a model and the one path from its inputs to its answers (`zoo.inference`), and
`predict`, which is ``zoo.predict``:

    >>> import zoo
    >>> rows = zoo.predict("resnet20.fmnist", ["shirt.png", "boot.png"], top_k=3)
    >>> rows[0]["classes"][0]            # {"label": "Shirt", "index": 6, "score": 0.93}
    >>> zoo.predict("runs/prices", "photos/")     # a regression run: [{"value": 41.3, "target": "price"}, ...]
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

from zoo.deploy.exporter import example_input_for
from zoo.errors import InvalidArgumentError
from zoo.inference.items import batch_of, image_items, strings
from zoo.loading.build import load
from zoo.loading.images import open_image
from zoo.loading.outputs import OutputMeaning, output_meaning
from zoo.loading.smiles import reads_molecules, smiles_batch
from zoo.loading.transforms import text_length, transforms
from zoo.store import weight_entries
from zoo.tokenizer import ByteTokenizer

KINDS = ("images", "vectors", "text", "molecules")
BATCH_SIZE = 64


class Predictor:
    """``model`` (a name or folder `zoo.load` takes, or a loaded zoo model) with what its kind of
    input becomes (`batches`) and what its outputs mean (``meaning``); calling it gives one
    answer per input. A model that predicts nothing (features only, a language model) is refused."""

    def __init__(self, model: str | os.PathLike | nn.Module, *, device: str = "cpu", batch_size: int = BATCH_SIZE):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= 65536:
            raise InvalidArgumentError(f"batch_size must be a whole number from 1 to 65536, got {batch_size!r}")
        self.name = model if isinstance(model, str) else os.fspath(model) if isinstance(model, os.PathLike) else None
        self.model = (model if isinstance(model, nn.Module) else load(model, device=device)).eval()
        cfg = getattr(self.model, "pretrained_cfg", None) or {}
        if "architecture" not in cfg:
            raise InvalidArgumentError(f"{type(self.model).__name__} is not a zoo model (no pretrained_cfg)")
        self.kind = "molecules" if reads_molecules(cfg) else weight_entries.input_kind(cfg["architecture"])
        shown = self.name or cfg["architecture"]
        if self.kind not in KINDS or (self.kind == "text" and cfg.get("head") != "sequence_classification"):
            raise InvalidArgumentError(f"{shown} does not predict classes or values (it reads {self.kind} and has head "
                                       f"{cfg.get('head')!r}); a language model continues text: zoo generate")  # fmt: skip
        if cfg.get("features_only") or not getattr(self.model, "num_classes", 0):
            raise InvalidArgumentError(
                f"{shown} outputs feature maps, not class scores (a features-only model or one without a "
                "classifier): predicting needs a classifier's or a regression's weights"
            )
        self.meaning: OutputMeaning = output_meaning(cfg)
        self.batch_size, self.device = batch_size, next(self.model.parameters()).device
        self.shape = tuple(example_input_for(self.model, 1).shape[1:]) if self.kind in ("images", "vectors") else ()

    def batches(self, inputs: Any) -> Iterator[Any]:
        """Model-ready batches of ``inputs``, `batch_size` samples each, checked before any runs."""
        size = self.batch_size
        if self.kind in ("text", "molecules"):
            items = strings(inputs, "texts" if self.kind == "text" else "SMILES")
            for start in range(0, len(items), size):
                yield self._strings(items[start : start + size])
            return
        if self.kind == "vectors":
            rows = batch_of(inputs, self.shape, "feature rows")
            yield from rows.split(size)
            return
        items = image_items(inputs)
        if isinstance(items, torch.Tensor):  # a preprocessed float batch
            yield from batch_of(items, self.shape, "preprocessed images").split(size)
            return
        preprocess = transforms(self.model)
        for item in items:  # a missing or unreadable file is found before the model runs
            if isinstance(item, str | os.PathLike):
                open_image(item, decode=False)
        for start in range(0, len(items), size):
            chunk = items[start : start + size]
            yield torch.stack([preprocess(_image(item, start + i)) for i, item in enumerate(chunk)])

    @torch.no_grad()
    def outputs(self, inputs: Any) -> torch.Tensor:
        """The model's float outputs [N, K] for ``inputs``, on the CPU."""
        outputs = []
        for batch in self.batches(inputs):
            batch = (
                batch.to(self.device)
                if not isinstance(batch, dict)
                else {k: v.to(self.device) for k, v in batch.items()}
            )
            out = self.model(**batch) if isinstance(batch, dict) else self.model(batch)
            outputs.append(out.float().reshape(len(out), -1).cpu())
        return torch.cat(outputs)

    def __call__(self, inputs: Any, top_k: int = 5) -> list[dict[str, Any]]:
        """One answer per input, as ``zoo predict`` prints them: ``{"classes": [{"label", "index",
        "score"}, ...]}`` (the top k by probability), ``{"value", "target"}`` (a regression, in the
        target's units) or ``{"labels": [...]}`` (multi-label, each over its saved threshold)."""
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1_000_000:
            raise InvalidArgumentError(f"top_k must be a whole number from 1 to 1000000, got {top_k!r}")
        return self.meaning.answers(self.outputs(inputs), top_k)

    def _strings(self, chunk: list[str]) -> Any:
        if self.kind == "molecules":
            return smiles_batch(chunk, "inputs")
        ids, mask = ByteTokenizer()(chunk, max_length=text_length(self.model))
        return {"input_ids": ids, "attention_mask": mask}


def _image(item: Any, index: int) -> Image.Image:
    """One image source as a PIL image: a file (read through zoo's bounded reader), its bytes,
    a PIL image, or uint8 pixels [H, W] / [H, W, C]."""
    if isinstance(item, Image.Image):
        return item
    if isinstance(item, np.ndarray | torch.Tensor):
        pixels = np.asarray(item)
        if pixels.dtype != np.uint8:
            raise InvalidArgumentError(f"inputs[{index}] has {pixels.dtype} pixels; an image's pixels are uint8")
        return Image.fromarray(pixels[..., 0] if pixels.ndim == 3 and pixels.shape[-1] == 1 else pixels)
    source = io.BytesIO(item) if isinstance(item, bytes) else item
    return open_image(source, name=f"inputs[{index}]" if isinstance(item, bytes) else None)


def predict(
    model: str | os.PathLike | nn.Module,
    inputs: Any,
    *,
    top_k: int = 5,
    device: str = "cpu",
    batch_size: int = BATCH_SIZE,
) -> list[dict[str, Any]]:
    """What ``model`` (a name, a saved or fine-tuned run's folder, or a loaded zoo model) says
    of each of ``inputs``: image files, a folder of them, PIL images or uint8 pixel arrays (or
    a preprocessed float batch [N, C, H, W]) for image models; feature rows [N, D]; texts for a
    text classifier; SMILES for a molecule model. One answer per input (`Predictor.__call__`),
    in input order; a bad input is an `InvalidArgumentError` naming it before the model runs."""
    return Predictor(model, device=device, batch_size=batch_size)(inputs, top_k)
