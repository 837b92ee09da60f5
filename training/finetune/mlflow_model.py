"""The MLflow model of a run tracked with ``zoo finetune --track URI``: `ZooModel`, a
``mlflow.pyfunc.PythonModel`` whose artifact ``zoo_model`` is the run's saved model (config.json,
model.safetensors and the card: what `zoo.load` reads), logged as MLflow's "model from code"
(MLflow runs this file when it loads the model; zoo itself never imports it, and the environment
that loads the model needs zoo installed)::

    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    model.predict(images)  # a DataFrame: a column per class (probabilities), or the target's column

What ``predict`` takes, as `zoo predict` and `zoo serve` do for the model's kind (`predict_table`):

Classifiers answer a probability per class (a softmax; multi-label models a sigmoid per label),
regressions their target in its units.

- image models: a float array or tensor the model takes (N, C, H, W: already preprocessed);
  uint8 images (N, H, W) or (N, H, W, C), preprocessed as the model's weights were
  (`zoo.transforms`); image files, as paths or bytes (a list, or a DataFrame's ``image`` or
  ``path`` column, or its only column);
- text classifiers: strings (a list, an array, or a DataFrame's ``text`` column or only column),
  tokenized by zoo's byte-level tokenizer;
- molecule models: SMILES (a list, or a DataFrame's ``smiles`` column or only column);
- vector models (DBNs): a float array or a numeric DataFrame, one row per sample.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import torch
from mlflow.pyfunc import PythonModel
from PIL import Image

import zoo
from zoo.errors import InvalidArgumentError
from zoo.loading.images import open_image
from zoo.loading.outputs import output_meaning
from zoo.loading.smiles import reads_molecules, smiles_batch
from zoo.store import weight_entries
from zoo.tokenizer import ByteTokenizer

ARTIFACT = "zoo_model"  # the artifact: the run's saved model folder
CHUNK = 64  # samples per forward pass
MAX_TEXT_TOKENS = 512  # as zoo finetune's --max-length default
COLUMNS = {"images": ("image", "path"), "text": ("text",), "molecules": ("smiles",)}
HINTS = {
    "images": "a float array (N, C, H, W), uint8 images (N, H, W[, C]), or image files (paths or bytes)",
    "vectors": "a float array or a numeric DataFrame, a row per sample",
}


class Predictor:
    """A saved zoo model (`zoo.load` of ``folder``) and what its kind of input becomes."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.model = zoo.load(folder).eval()
        cfg = self.model.pretrained_cfg
        self.kind = "molecules" if reads_molecules(cfg) else weight_entries.input_kind(cfg["architecture"])
        self.meaning = output_meaning(cfg)  # as zoo predict, zoo serve and zoo eval read the outputs
        outputs = self.model.num_classes or 1
        if self.meaning.task == "regression":
            name = self.meaning.target_name or "value"
            self.columns = [name] if outputs == 1 else [f"{name}_{i}" for i in range(outputs)]
        else:
            self.columns = [self.meaning.label(i) for i in range(outputs)]

    def __call__(self, inputs: Any) -> pd.DataFrame:
        """The predictions for ``inputs`` (see the module docstring), a row per sample."""
        if self.kind == "graphs":
            raise InvalidArgumentError("this MLflow model reads graphs: load it with zoo.load and pass PyG batches")
        outputs = [self._forward(chunk) for chunk in self._batches(inputs)]
        out = torch.cat(outputs) if outputs else torch.empty(0, len(self.columns))
        task = self.meaning.task
        if task == "regression":
            return pd.DataFrame(self.meaning.values(out).numpy(), columns=self.columns)
        out = out.float().reshape(len(out), -1)
        values = out.sigmoid() if task == "multi_label" else out.softmax(-1)
        return pd.DataFrame(values.numpy(), columns=self.columns)

    @torch.no_grad()
    def _forward(self, batch: Any) -> torch.Tensor:
        return self.model(**batch) if isinstance(batch, dict) else self.model(batch)

    def _batches(self, inputs: Any) -> Iterator[Any]:
        """Model-ready batches of ``inputs``, `CHUNK` samples at a time."""
        if self.kind == "molecules":
            smiles = _strings(inputs, "molecules")
            for start in range(0, len(smiles), CHUNK):
                yield smiles_batch(smiles[start : start + CHUNK], "model_input")
            return
        if self.kind == "text":
            texts, tokenizer = _strings(inputs, "text"), ByteTokenizer()
            for start in range(0, len(texts), CHUNK):
                ids, mask = tokenizer(texts[start : start + CHUNK], max_length=MAX_TEXT_TOKENS)
                yield {"input_ids": ids, "attention_mask": mask}
            return
        array = _array(inputs, self.kind)
        if isinstance(array, list):  # image files
            yield from self._images(array)
            return
        if array.dtype == torch.uint8 and self.kind == "images":
            yield from self._images(list(array.numpy()))
            return
        array = array.float()
        if self.kind == "images" and array.ndim == 3:
            array = array.unsqueeze(0)  # one (C, H, W) image
        for start in range(0, len(array), CHUNK):
            yield array[start : start + CHUNK]

    def _images(self, images: list[Any]) -> Iterator[torch.Tensor]:
        """Image files (paths, bytes) or uint8 pixel arrays, preprocessed as the weights were."""
        preprocess = zoo.transforms(self.model)
        for start in range(0, len(images), CHUNK):
            chunk = []
            for item in images[start : start + CHUNK]:
                if isinstance(item, np.ndarray):
                    image = Image.fromarray(item.squeeze(-1) if item.ndim == 3 and item.shape[-1] == 1 else item)
                else:
                    image = open_image(io.BytesIO(item) if isinstance(item, bytes) else item, name="model_input")
                chunk.append(preprocess(image))
            yield torch.stack(chunk)


def _column(frame: pd.DataFrame, kind: str) -> pd.Series:
    """The DataFrame column that holds the inputs of ``kind``: by its name, or the only one."""
    for name in COLUMNS.get(kind, ()):
        if name in frame.columns:
            return frame[name]
    if len(frame.columns) == 1:
        return frame.iloc[:, 0]
    names = " or ".join(repr(c) for c in COLUMNS.get(kind, ()))
    raise InvalidArgumentError(
        f"model_input: a DataFrame of {kind} needs a column {names} (or only one column), got {list(frame.columns)}"
    )


def _strings(inputs: Any, kind: str) -> list[str]:
    """Strings (SMILES, texts) from a string, a list, an array or a DataFrame column."""
    if isinstance(inputs, pd.DataFrame):
        inputs = _column(inputs, kind)
    values = [inputs] if isinstance(inputs, str) else list(np.asarray(inputs, dtype=object).reshape(-1))
    if not all(isinstance(v, str) for v in values):
        shown = next(type(v).__name__ for v in values if not isinstance(v, str))
        raise InvalidArgumentError(f"model_input: this model reads {kind} as strings, got a {shown}")
    return values


def _array(inputs: Any, kind: str) -> torch.Tensor | list[Any]:
    """A tensor of ``inputs`` (arrays, tensors, numeric DataFrames), or a list of image files."""
    if isinstance(inputs, pd.DataFrame):
        if kind == "images" and not all(pd.api.types.is_numeric_dtype(inputs[c]) for c in inputs.columns):
            return list(_column(inputs, kind))
        inputs = inputs.to_numpy()
    if isinstance(inputs, str | bytes) or (
        isinstance(inputs, Sequence) and inputs and isinstance(inputs[0], str | bytes | os.PathLike)
    ):
        return [inputs] if isinstance(inputs, str | bytes) else list(inputs)
    if isinstance(inputs, dict) and len(inputs) == 1:
        inputs = next(iter(inputs.values()))
    try:
        return inputs if isinstance(inputs, torch.Tensor) else torch.from_numpy(np.array(inputs))  # a copy: writable
    except (TypeError, ValueError, RuntimeError):
        raise InvalidArgumentError(
            f"model_input: cannot read a {type(inputs).__name__} as {kind}: pass {HINTS.get(kind, 'a float array')}"
        ) from None


def predict_table(folder: str | os.PathLike, inputs: Any) -> pd.DataFrame:
    """What `ZooModel` predicts for ``inputs``, from the saved model in ``folder`` (a test's way in)."""
    return Predictor(folder)(inputs)


class ZooModel(PythonModel):
    """A zoo model as an MLflow pyfunc model: `zoo.load` of its ``zoo_model`` artifact."""

    def load_context(self, context: Any) -> None:
        self.predictor = Predictor(context.artifacts[ARTIFACT])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """`Predictor`'s answer for ``model_input`` (a DataFrame, or an array, tensor or list: MLflow
        reads other hints than a DataFrame's as a schema to check): a DataFrame, a row per sample."""
        return self.predictor(model_input)


mlflow.models.set_model(ZooModel())


__all__ = ["ARTIFACT", "Predictor", "ZooModel", "predict_table"]
