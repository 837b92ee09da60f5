"""``zoo finetune --track URI``: the MLflow run around a fine-tuning run (`finetune_tracking`).

It opens when the data and the model are ready (MLflow installed and a server answering were
checked before anything else, `zoo.training.loop.records.tracking.check_tracking`), logs the model name,
the data and the `FinetuneOptions` as params (the Trainer adds its `TrainConfig` and each
epoch's metrics, `zoo.training.loop.records.tracking.tracked`), and writes `RUN_FILE` into the output
folder: where the run is, so a team finds it again (the card says it too). When the run has
written its model and card, it logs them with the curves, metrics and reports (`LOGGED`), and the
model as an MLflow model, ``runs:/RUN_ID/model`` (`zoo.training.finetune.mlflow_model`). A run
resumed (``--resume``) goes on in the MLflow run that `RUN_FILE` names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zoo.loading.saved import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE
from zoo.store.files import read_json, write_json
from zoo.training.finetune import post_training
from zoo.training.finetune.options import FinetuneOptions
from zoo.training.loop.lr_finder import PLOT_FILE as LR_FINDER_PLOT
from zoo.training.loop.records.tracking import Tracker, require_mlflow, tracking_run
from zoo.training.loop.train_config import TrainConfig

RUN_FILE = "mlflow_run.json"
MODEL_ARTIFACT = "model"  # runs:/RUN_ID/model
LOGGED = (
    CARD_FILE,
    "curves.png",
    "metrics.json",
    "metrics.csv",
    "train.log",
    LR_FINDER_PLOT,
    post_training.REPORT_FILE,
    post_training.CONFUSION_FILE,
    post_training.SUMMARY_FILE,
)
MODEL_CODE = Path(__file__).with_name("mlflow_model.py")  # MLflow's "model from code"
PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"

__all__ = ["LOGGED", "MODEL_ARTIFACT", "RUN_FILE", "finetune_tracking", "log_model", "model_uri"]


def model_uri(run_id: str) -> str:
    """The URI `mlflow.pyfunc.load_model` loads a tracked run's model from (with the run's tracking URI set)."""
    return f"runs:/{run_id}/{MODEL_ARTIFACT}"


def _params(name: str, data: Any, description: str, options: FinetuneOptions) -> dict[str, Any]:
    """The run's params besides its TrainConfig: the model, the data and the options (not the command)."""
    shown = os.fspath(data) if isinstance(data, str | os.PathLike) else f"a {type(data).__name__}"
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.name != "command"}
    return {"model": name, "data": shown, "data_description": description, **fields}


def _resumed_run(out: Path, config: TrainConfig) -> str | None:
    """The MLflow run a resumed run goes on in: the one `RUN_FILE` names, if tracked to the same URI."""
    path = out / RUN_FILE
    if not config.resume or not path.is_file():
        return None
    try:
        saved = read_json(path, 1 << 16, fix="delete it to log the resumed run to a new MLflow run")
    except (OSError, ValueError):
        return None
    if isinstance(saved, dict) and saved.get("track") == config.track and isinstance(saved.get("run_id"), str):
        return saved["run_id"]
    return None


@contextlib.contextmanager
def finetune_tracking(
    config: TrainConfig, out: Path, name: str, data: Any, description: str, options: FinetuneOptions, main: bool
) -> Iterator[Tracker | None]:
    """The MLflow run of a fine-tuning run with ``config.track`` (None without it, and on the
    processes of a torchrun group but the first): it yields the `Tracker` for the block, logs
    the run's files and model when the block ends, and ends FINISHED, FAILED or KILLED as it does."""
    if config.track is None or not main:
        yield None
        return
    tags = {"zoo.out": str(Path(out).resolve()), "mlflow.note.content": f"`{options.command or 'zoo.finetune'}`"}
    with tracking_run(
        config.track,
        experiment=config.track_experiment,
        run_name=Path(out).resolve().name,
        params=_params(name, data, description, options),
        tags=tags,
        run_id=_resumed_run(out, config),
    ) as tracker:
        record = {"track": config.track, "store": tracker.store, "experiment": tracker.experiment}
        record |= {"experiment_id": tracker.experiment_id, "run_id": tracker.run_id, "model": model_uri(tracker.run_id)}
        write_json(record, out / RUN_FILE)
        try:
            yield tracker
        except BaseException:
            tracker.log_artifact(out / "train.log")  # what happened, beside the FAILED or KILLED run
            raise
        for file in LOGGED:
            tracker.log_artifact(out / file)
        if (out / CONFIG_FILE).is_file():
            log_model(tracker, out)


def log_model(tracker: Tracker, out: Path) -> None:
    """The saved model in ``out`` as an MLflow model (`zoo.training.finetune.mlflow_model.ZooModel`),
    at ``runs:/RUN_ID/model``."""
    require_mlflow()
    import mlflow.pyfunc

    with tempfile.TemporaryDirectory(prefix="zoo-mlflow-") as staging:
        folder = Path(staging) / "zoo_model"
        folder.mkdir()
        for file in (CONFIG_FILE, WEIGHTS_FILE, CARD_FILE):
            if (out / file).is_file():
                shutil.copy2(out / file, folder / file)
        with _quiet_mlflow():
            mlflow.pyfunc.save_model(
                Path(staging) / MODEL_ARTIFACT,
                python_model=str(MODEL_CODE),
                artifacts={"zoo_model": str(folder)},
                pip_requirements=_requirements(),
                metadata={"zoo_run": str(Path(out).resolve())},
            )
        tracker.log_artifact(Path(staging) / MODEL_ARTIFACT, MODEL_ARTIFACT)
    tracker.set_tags({"zoo.model_uri": model_uri(tracker.run_id)})


@contextlib.contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """No progress bars (MLflow's copy of the artifacts), warnings nor notes (no signature: the
    model takes several kinds of input) while MLflow saves the model."""
    before, logger = os.environ.get(PROGRESS_BAR), logging.getLogger("mlflow")
    os.environ[PROGRESS_BAR], level = "false", logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
        if before is None:
            os.environ.pop(PROGRESS_BAR, None)
        else:
            os.environ[PROGRESS_BAR] = before


def _requirements() -> list[str]:
    """What loading the model needs besides zoo itself (not on PyPI: install it from its repository)."""
    found = []
    for name in ("mlflow", "torch", "numpy", "pandas", "pillow", "safetensors"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{name}=={importlib.metadata.version(name)}")
    return found
