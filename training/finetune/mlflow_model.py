"""The MLflow model of a run tracked with ``zoo finetune --track URI``: `ZooModel`, a
``mlflow.pyfunc.PythonModel`` whose artifact ``zoo_model`` is the run's saved model (config.json,
model.safetensors and the card: what `zoo.load` reads), logged as MLflow's "model from code"
(MLflow runs this file when it loads the model; zoo itself never imports it, and the environment
that loads the model needs zoo installed)::

    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    model.predict(images)  # a DataFrame: a column per class (probabilities), or the target's column

What ``predict`` takes, as ``zoo.predict`` does for the model's kind (`zoo.inference`; `predict_table`):

Classifiers answer a probability per class (a softmax; multi-label models a sigmoid per label),
regressions their target in its units.

- image models: a float array or tensor the model takes (N, C, H, W: already preprocessed);
  uint8 images (N, H, W) or (N, H, W, C), preprocessed as the model's weights were
  (`zoo.transforms`); image files, as paths or bytes (a list, or a DataFrame's ``image`` or
  ``path`` column, or its only column);
- text classifiers: strings (a list, or a DataFrame's ``text`` column or only column),
  tokenized by zoo's byte-level tokenizer at the run's own length;
- molecule models: SMILES (a list, or a DataFrame's ``smiles`` column or only column);
- vector models (DBNs): a float array or a numeric DataFrame, one row per sample.
"""

from __future__ import annotations

import os
from typing import Any

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

from zoo import inference
from zoo.errors import InvalidArgumentError

ARTIFACT = "zoo_model"  # the artifact: the run's saved model folder
COLUMNS = {"images": ("image", "path"), "text": ("text",), "molecules": ("smiles",)}


class Predictor:
    """A saved zoo model read through zoo's one predictor (`zoo.inference.Predictor`: the
    batches, checks and refusals of ``zoo.predict``), with MLflow's DataFrames in and out."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.predictor = inference.Predictor(folder)
        self.model, self.kind, self.meaning = self.predictor.model, self.predictor.kind, self.predictor.meaning
        outputs = self.model.num_classes or 1
        if self.meaning.task == "regression":
            name = self.meaning.target_name or "value"
            self.columns = [name] if outputs == 1 else [f"{name}_{i}" for i in range(outputs)]
        else:
            self.columns = [self.meaning.label(i) for i in range(outputs)]

    def __call__(self, inputs: Any) -> pd.DataFrame:
        """The predictions for ``inputs`` (see the module docstring), a row per sample."""
        out = self.predictor.outputs(_model_inputs(inputs, self.kind))
        task = self.meaning.task
        if task == "regression":
            return pd.DataFrame(self.meaning.values(out).numpy(), columns=self.columns)
        values = out.sigmoid() if task == "multi_label" else out.softmax(-1)
        return pd.DataFrame(values.numpy(), columns=self.columns)


def _model_inputs(inputs: Any, kind: str) -> Any:
    """What `zoo.inference.Predictor` reads, from MLflow's input: a DataFrame's column (strings,
    image files) or its numbers, a dict's only value, else the input as it is."""
    if isinstance(inputs, dict) and len(inputs) == 1:
        inputs = next(iter(inputs.values()))
    if not isinstance(inputs, pd.DataFrame):
        return list(inputs) if isinstance(inputs, pd.Series) else inputs
    if kind in ("text", "molecules"):
        return [*_column(inputs, kind)]
    if kind == "images" and not all(pd.api.types.is_numeric_dtype(inputs[c]) for c in inputs.columns):
        return list(_column(inputs, kind))
    return inputs.to_numpy()


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
