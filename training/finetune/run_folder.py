"""The output folder of a fine-tuning run: what a run writes there (`RUN_OUTPUTS`), the check
that it holds nothing else before a run starts and the removal of an earlier run's files
(`prepare_output`, through the manifest of `zoo.training.finetune.run_files`), and the after-training
step on the validation set (`evaluate_and_export`: report, exports, int8, pruning)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import Dataset, SequentialSampler

from zoo.errors import InvalidArgumentError
from zoo.loading.saved import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE
from zoo.training.data.loaders import build_loader
from zoo.training.data.source import DataSource
from zoo.training.finetune import post_training as after_training
from zoo.training.finetune.run_files import Output, RunFiles
from zoo.training.finetune.run_files import prepare as run_files_of
from zoo.training.loop.checkpoint import BEST_CHECKPOINT, LAST_CHECKPOINT
from zoo.training.loop.steps import split_batch
from zoo.training.loop.train_config import TrainConfig

CALIBRATION_BATCHES = 4  # validation batches static int8 calibrates on


RUN_OUTPUTS = (
    Output(CONFIG_FILE),
    Output(WEIGHTS_FILE),
    Output(CARD_FILE),
    Output("metrics.csv"),
    Output("metrics.json"),
    Output("curves.png"),
    Output("train.log"),
    Output("tensorboard", folder=True, writes=()),  # event files with unique names
    Output("checkpoints", folder=True, writes=(LAST_CHECKPOINT, BEST_CHECKPOINT)),
    Output("profile", folder=True, writes=()),
    Output(after_training.TORCHSCRIPT_FILE),
    Output(after_training.EXPORTED_PROGRAM_FILE),
    Output(after_training.ONNX_FILE),
    Output(after_training.REPORT_FILE),
    Output(after_training.CONFUSION_FILE),
    Output(after_training.SUMMARY_FILE),
)


def prepare_output(out: Path, resume: bool, overwrite: bool) -> RunFiles:
    """Refuse an output folder that holds anything but a run to resume, unless ``overwrite``;
    then remove what an earlier run wrote there (its manifest lists it) and nothing else,
    refusing before deleting anything when something in the run's way is not a run's own
    (`zoo.training.finetune.run_files`). A resume needs a run's folder (a run killed before its first
    checkpoint starts over) and removes nothing. Returns the run's `RunFiles`: seal them when
    the run ends."""
    if resume:
        names = {o.name for o in RUN_OUTPUTS}
        run_files = [p.name for p in out.iterdir() if p.name in names] if out.is_dir() else []
        if not run_files:
            raise InvalidArgumentError(
                f"--resume: {out} holds no run to resume (no {Path('checkpoints') / LAST_CHECKPOINT}); "
                "check --out, or drop --resume to start a new run"
            )
    return run_files_of(out, RUN_OUTPUTS, resume, overwrite)


def evaluate_and_export(model: nn.Module, val_set: Dataset, source: DataSource, config: TrainConfig) -> dict[str, Any]:
    """`zoo.training.finetune.post_training.post_training` on the validation set: report, exports, int8, pruning."""
    if config.progress:
        print(
            f"after training: evaluating, exporting and quantizing on {len(val_set)} validation samples "
            "(--no-post-training skips it)",
            flush=True,
        )
    loader = build_loader(val_set, config.batch_size, sampler=SequentialSampler(val_set), collate_fn=source.collate_fn)
    calibration = [_positional(split_batch(batch)[0]) for batch in itertools.islice(loader, CALIBRATION_BATCHES)]
    return after_training.post_training(
        model,
        loader,
        config.out_dir,
        calibration[0],
        class_names=source.class_names,
        dynamic_batch=source.kind != "graphs",
        calibration=calibration,
        progress=config.progress,
    )


def _positional(inputs: Any) -> Any:
    """A batch's inputs as a model call's positional arguments (a tensor, or a tuple)."""
    if isinstance(inputs, Mapping):
        return tuple(inputs.values())  # in the model's order (input_ids, attention_mask)
    return inputs if isinstance(inputs, torch.Tensor) else (inputs,)
