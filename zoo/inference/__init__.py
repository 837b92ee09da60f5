"""One way from a model's inputs to its answers: `Predictor` turns what a user or a client
hands zoo (image files and folders, encoded images, PIL images, pixel arrays, preprocessed
tensors, feature rows, texts, SMILES) into checked, model-ready batches (`Predictor.prepare`;
`Predictor.chunks` one input at a time, image files decoded by worker processes), runs the model,
and reads its outputs as the run means them (`Predictor.answers`, `zoo.loading.outputs`: class
names and probabilities, multi-label tags over their thresholds, regression values in the
target's units). ``zoo.predict`` is it from Python; the MLflow model, ``zoo predict`` (its
arguments and ``--input`` rows) and ``zoo serve`` (every protocol) prepare their inputs through
it, so one input gets one answer, or one refusal, on every path."""

from zoo.inference.predictor import Predictor, predict

__all__ = ["Predictor", "predict"]
