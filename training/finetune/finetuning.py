"""Fine-tune a zoo model on your data and save the best epoch's model, card and metrics.

`finetune_with_config` is the run, from a `FinetuneOptions` and a `TrainConfig`: ``zoo finetune
NAME --data PATH --out DIR`` runs it (`run`; also ``python -m zoo.training.finetune``, `main`),
and so does `zoo.finetune` (`zoo.training.finetune.keywords`: the same flags as keywords, the one
`finetune` signature).

NAME is a weight name (``resnet50.tv_in1k``), a directory written by `zoo.save`, or a bare
architecture (``resnet20``), which trains from scratch with a warning (`load_for_data`). The head
gets one output per class of the data and image models take its channel count. Modes:

- ``linear-probe``: only the classifier trains; the body is frozen (BatchNorm in eval mode);
- ``partial``: the last ``stages`` stages of the body (its ``feature_info`` levels, or its
  blocks) and the head;
- ``full``: everything; ``layer_decay`` scales each stage's learning rate by decay^(depth from the top).

OUT receives the best model as `zoo.save` writes it (``zoo.load(OUT)`` restores it) with a
model card, the metrics (CSV, JSON), loss/accuracy curves, TensorBoard logs and checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import Dataset

import zoo
from zoo.architectures import ARCHS
from zoo.bounds import show_defaults
from zoo.errors import DataError, InvalidArgumentError, WeightsMismatchError, ZooError, run_command
from zoo.loading.resolve import Registered, SavedFolder, architecture, resolve
from zoo.loading.saved import WEIGHTS_FILE, read_saved_config
from zoo.loading.smiles import reads_graphs
from zoo.loading.state_dicts import build_with_state_dict
from zoo.store import weight_entries
from zoo.store.model_config import ModelConfig, set_config, update_config
from zoo.store.state_dict_files import load_state_dict_file
from zoo.training.data.images.augment import Augment, image_preprocess, image_transforms
from zoo.training.data.kinds import DataSource, open_data
from zoo.training.data.molecules.molecule_files import MoleculeOptions, MoleculeSource
from zoo.training.data.text.text_rows import shown_names
from zoo.training.finetune import card
from zoo.training.finetune.defaults import NO_HEAD_PHASE, default_augment, head_epochs, with_data_defaults
from zoo.training.finetune.distill import distillation_step
from zoo.training.finetune.mlflow_run import finetune_tracking
from zoo.training.finetune.options import FinetuneOptions, add_arguments, options_from_args, warn_shared_shards
from zoo.training.finetune.report import saved_thresholds
from zoo.training.finetune.run_folder import evaluate_and_export, on_changed_data, prepare_output
from zoo.training.finetune.stages import apply_mode, layer_decay_scale, match_head, train_head
from zoo.training.loop.callbacks import Callback
from zoo.training.loop.records.checkpoint import elastic_resume
from zoo.training.loop.records.tracking import check_tracking
from zoo.training.loop.steps import MultiLabelStep, RegressionStep, StepFn, fold_standardisation
from zoo.training.loop.train_config import TrainConfig, config_from_args, given_options
from zoo.training.loop.trainer import Trainer

__all__ = [
    "FinetuneResult",
    "finetune_with_config",
    "load_for_data",
    "main",
    "module_main",
    "run",
]


def _fitting_example(kind: str) -> str:
    """A name that fine-tunes on data of ``kind``, from the family specs."""
    return next(s.finetune_example for s in ARCHS.values() if s.inputs == kind and s.finetune_example)


def _check_fits(name: str, arch: str, data: DataSource) -> None:
    """Refuse, before anything is built, data of a kind the architecture does not read."""
    holds = data.kind if data.kind != "tensors" else "images" if data.image_size else "vectors"
    reads = weight_entries.input_kind(arch)
    if reads != holds:
        raise DataError(
            f"{name} reads {reads}, but {data.description} holds {holds}: fine-tune a model that reads "
            f"{holds}, e.g. {_fitting_example(holds)}"
        )


@dataclass
class FinetuneResult:
    """The fine-tuned model (best epoch, on CPU), its metrics and where it was saved."""

    model: nn.Module
    out: Path
    metrics: dict[str, float]
    history: list[dict[str, float]]
    mlflow_run_id: str | None = None  # with TrainConfig.track: the MLflow run (also in OUT/mlflow_run.json)


def load_for_data(
    name: str,
    data: DataSource,
    pretrained: bool = True,
    model_kwargs: Mapping[str, Any] | None = None,
    resolved: Any = None,
) -> tuple[nn.Module, str | None]:
    """The model NAME with a head of ``data.num_classes`` outputs (and for images, the data's
    channel count when it comes from the registry; text and graph data pick the
    sequence/graph classification head; ``model_kwargs`` go to the builder), and the weights it
    starts from (None: random initialisation)."""
    if data.num_classes is None:
        raise DataError(
            f"{data.description} has no labels; fine-tuning a classifier needs them (use Trainer with a custom step)"
        )
    source = resolved if resolved is not None else resolve(name)  # once: zoo.load takes the source as it is
    if isinstance(source, SavedFolder):
        return _saved_for_data(name, source.path, data, pretrained, model_kwargs)
    if not isinstance(source, Registered):
        raise InvalidArgumentError(
            f"{name!r}: fine-tuning starts from registered weights, an architecture or a folder "
            "written by zoo.save; download a Hub model with zoo.load and zoo.save it first"
        )
    arch = source.arch
    kwargs: dict[str, Any] = dict(model_kwargs or {})
    if data.kind == "images":
        kwargs.setdefault("in_chans", data.in_chans)
    elif data.kind == "graphs":
        kwargs.setdefault("in_channels", data.in_chans)
        if isinstance(data, MoleculeSource):
            kwargs.setdefault("edge_dim", data.edge_dim)
    head = _data_head(arch, data)
    if head is not None:
        kwargs.setdefault("head", head)
    _check_fits(name, arch, data)
    if "." not in name:
        if pretrained:
            fits = [w for w in weight_entries.weights_for(arch) if _weights_fit(w.model_kwargs, kwargs, data)]
            # a backbone first: weights trained on many named targets (gin3.moses_descriptors) start any property
            tags = [w.name for w in sorted(fits, key=lambda w: not (w.target or {}).get("outputs"))]
            hint = f" For pretrained weights that fit this data name them, e.g. {', '.join(tags[:2])}." if tags else ""
            message = f"{name!r} is a bare architecture: training it from scratch (random weights).{hint}"
            warnings.warn(message, stacklevel=3)
        model = zoo.load(source, pretrained=False, num_classes=data.num_classes, **kwargs)
        if hasattr(model, "size_kwargs"):  # a graph model's size stated, whatever its defaults become
            update_config(model, model_kwargs={**model.size_kwargs, **model.pretrained_cfg["model_kwargs"]})
        return model, None
    model = zoo.load(source, pretrained=pretrained, num_classes=data.num_classes, **kwargs)
    return model, name if pretrained else None


def _data_head(arch: str, data: DataSource) -> str | None:
    """The head the data's task takes on ``arch`` (graph regression for a target, else the
    family's fine-tuning head), or None where the architecture has one head."""
    heads = weight_entries.supported_heads(arch)
    head = "graph_regression" if data.target is not None else weight_entries.arch_spec(arch).finetune_head
    return head if head in heads else None


def _saved_for_data(
    name: str, folder: Path, data: DataSource, pretrained: bool, model_kwargs: Mapping[str, Any] | None
) -> tuple[nn.Module, str | None]:
    """`load_for_data` for a folder `zoo.save` wrote: its weights under the data's head (a fresh
    one of another task where the data's is not the folder's), or its architecture alone."""
    saved = read_saved_config(folder)
    _check_fits(name, saved["architecture"], data)
    if not pretrained:
        arch, kwargs = saved["architecture"], {**saved["model_kwargs"], **(model_kwargs or {})}
        return zoo.load(architecture(arch), pretrained=False, num_classes=data.num_classes, **kwargs), None
    if model_kwargs:
        raise InvalidArgumentError(
            f"{folder} is a saved model with fixed options; drop model_kwargs {dict(model_kwargs)}"
        )
    head = _data_head(saved["architecture"], data)
    if head is not None and head != saved["head"]:  # a regression backbone, class data (or the reverse)
        return _body_with_head(folder, saved, head, data), str(folder)
    channels = {"in_chans": data.in_chans} if data.kind == "images" else {}  # colour data, gray model: adapt
    return zoo.load(folder, num_classes=data.num_classes, **channels), str(folder)


def _body_with_head(folder: Path, saved: Mapping[str, Any], head: str, data: DataSource) -> nn.Module:
    """The saved model's body under a fresh ``head`` of the data's outputs: the architecture
    built with that head takes the folder's weights but the classifier's (checked as any load:
    shapes, names, finite values)."""
    kwargs = {**saved["model_kwargs"], "head": head, "num_classes": data.num_classes}
    builder = weight_entries.get_builder(saved["architecture"])
    try:
        state_dict = load_state_dict_file(folder / WEIGHTS_FILE)
        model = build_with_state_dict(builder, kwargs, state_dict, data.num_classes, fresh_head=True)
    except WeightsMismatchError as error:
        raise WeightsMismatchError(f"{error}\n  (in {folder / WEIGHTS_FILE})") from None
    config = ModelConfig.from_dict(saved).replace(
        head=head, num_classes=data.num_classes, model_kwargs={k: v for k, v in kwargs.items() if k != "num_classes"},
        categories=None, class_names=None, target=None, multi_label=None,
    )  # fmt: skip
    return set_config(model, config)


def _weights_fit(entry_kwargs: Mapping[str, Any], kwargs: Mapping[str, Any], data: DataSource) -> bool:
    """Whether weights built with ``entry_kwargs`` take this data's inputs: graphs need the same
    node and edge feature sizes (a molecule model, not a triangle counter, for molecules)."""
    if data.kind != "graphs":
        return True
    return all(entry_kwargs.get(k) == kwargs.get(k) for k in ("in_channels", "edge_dim"))


def resolved_name(name: str) -> Any:
    """What NAME is (`resolve`), or None when it names nothing: `load_for_data` says so, after the data."""
    try:
        return resolve(name)
    except (ZooError, OSError):
        return None


def open_run_data(
    data: str | os.PathLike | Dataset, options: FinetuneOptions, name: str, resolved: Any = None
) -> DataSource:
    """`open_data` with the options' text length, molecule reading and shards' shuffle buffer;
    when NAME (``resolved``) reads graphs, a .csv/.jsonl can only be molecules (the reader says so)."""
    molecules = options.molecules
    if reads_graphs(resolved):
        molecules = dataclasses.replace(molecules or MoleculeOptions(), graph_model=name)
    return open_data(
        data, max_length=options.max_length, molecules=molecules, shuffle_buffer=options.shuffle_buffer,
        images=options.images,
    )  # fmt: skip


def finetune_with_config(
    name: str,
    data: str | os.PathLike | Dataset,
    out: str | os.PathLike,
    options: FinetuneOptions | None = None,
    *,
    config: TrainConfig | None = None,
    step_fn: StepFn | None = None,
    given: Collection[str] | None = None,
    callbacks: Sequence[Callback] | None = None,
) -> FinetuneResult:
    """Fine-tune NAME on ``data`` and save the best epoch's model to ``out`` (see the module
    docstring): ``options`` say which weights train, on what data, with what teacher and
    what is written after training (`FinetuneOptions`); ``config`` is the training loop's
    (its ``out_dir`` becomes ``out``); ``step_fn`` replaces the loss step (not with a teacher).
    ``out`` must be empty or missing, or hold a run to resume (``config.resume``); with
    ``options.overwrite`` the files an earlier run wrote there are removed first. The config
    fields not in ``given`` take the data's own defaults where it has some (molecules:
    `zoo.training.finetune.defaults`); ``given`` is every field when a ``config`` is passed
    without it, none without a ``config``. ``callbacks`` are the Trainer's (`zoo.training.loop.callbacks`)."""
    options, clock = options or FinetuneOptions(), card.WallClock()
    given = ({f.name for f in dataclasses.fields(TrainConfig)} if config else set()) if given is None else given
    config, out = _run_config(config, out), Path(out)
    resolved = resolved_name(name)
    source = open_run_data(data, options, name, resolved)  # read before out changes
    val_source = _open_validation(data, source, options, name, resolved)
    torch.manual_seed(config.seed)  # the new head's initialisation
    model, base = load_for_data(name, source, options.pretrained, options.model_kwargs, resolved)  # before out changes
    classes = base is not None and source.target is None and not source.multi_label  # weights' head, or fresh
    fresh, head_note = match_head(model, source.class_names) if classes else (False, None)
    main_process = int(os.environ.get("RANK", "0")) == 0  # under torchrun, one process checks and clears
    files = prepare_output(out, resume=bool(config.resume), overwrite=options.overwrite) if main_process else None
    tracking = finetune_tracking(config, out, name, data, source.description, options, main_process)
    with files.sealing() if files is not None else contextlib.nullcontext(), tracking as tracker, on_changed_data(out):
        head = (fresh and step_fn is None, head_note)
        say = main_process and config.progress
        train_set, val_set, config, recipe = _prepared(
            model, source, val_source, options, config, given, head, say, clock
        )
        trainable = apply_mode(model, options.mode, options.stages)
        trainer = _trainer(model, source, options, config, step_fn, callbacks)
        history = clock.timed(trainer.fit, train_set, val_set)
        model, metrics = _best_model(model, trainer, history)
        if trainer.is_main:
            labels = (
                saved_thresholds(model, val_set, source.collate_fn, config.batch_size) if source.multi_label else None
            )
            _record_data(model, source, base, labels[0] if labels else None, options)
            model.requires_grad_(True)  # the returned model trains whole again
            zoo.save(model, out, overwrite=True)  # prepare_output let only a run's own files (a resumed run's) stay
            ran = options.post_training and val_set is not None and source.target is None and not source.multi_label
            after = evaluate_and_export(model, val_set, source, config, options.compression) if ran else None
            details = card.run_details(name, base, source, options, trainer, (train_set, val_set), trainable, recipe)
            details["epochs_run"], details["thresholds"] = len(history), labels[1] if labels else None
            details["tracking"] = tracker.describe() if tracker is not None else None
            details["wall_time"] = clock.split(history, trainer)
            card.write_card(out, model, details, metrics, after, config, options.command)
    return FinetuneResult(model, out, metrics, history, tracker.run_id if tracker is not None else None)


def _run_config(config: TrainConfig | None, out: str | os.PathLike) -> TrainConfig:
    """``config`` writing to ``out``, resuming under torchrun --max-restarts (from last.pt), its
    MLflow store checked (installed, answering) before anything is read or trained."""
    config = dataclasses.replace(config or TrainConfig(), out_dir=str(out))
    config.resume = config.resume or elastic_resume(out)
    check_tracking(config.track)
    return config


def _prepared(
    model: nn.Module,
    source: DataSource,
    val_source: DataSource | None,
    options: FinetuneOptions,
    config: TrainConfig,
    given: Collection[str],
    head: tuple[bool, str | None],
    say: bool,
    clock: card.WallClock,
) -> tuple[Dataset, Dataset | None, TrainConfig, list[str]]:
    """The training and validation sets, ``config`` with the data's defaults, and the lines of
    the run's recipe (the defaults, the head, its phase, the augmentation), after the head
    phase ran: ``head`` is whether the head is fresh (and no custom step replaces the loss), and
    the line saying so; ``clock`` takes the head phase's time. With ``say``, the data's line and the recipe's are printed first."""
    if say:
        print(f"data: {source.description}; {source.describe_classes()}")
    train_set, val_set, augment = _datasets(model, source, val_source, options, config.seed)
    fresh, head_note = head
    config, defaults = with_data_defaults(config, source, train_set, given)
    alone = fresh and not config.resume and options.mode != "linear-probe"
    began = time.perf_counter()
    epochs = head_epochs(source, options.head_epochs)
    phase = train_head(model, train_set, config, epochs, source.collate_fn) if alone else None
    clock.head_s = time.perf_counter() - began if phase else 0.0
    if alone and epochs == 0 and options.head_epochs is None:
        phase = "head phase: none (molecules: the fresh head trains with the body from the first step; --head-epochs N)"
    if options.head_epochs and not alone:  # a head phase is for a fresh class head on pretrained weights
        warnings.warn(f"--head-epochs {options.head_epochs:g}: no head phase runs: {NO_HEAD_PHASE}", stacklevel=2)
    augmented = f"augmentation: {augment}" if augment is not None else None
    recipe = [line for line in (defaults, head_note, phase, augmented) if line]
    if say and recipe:
        print(*recipe, sep="\n")
    return train_set, val_set, config, recipe


def _datasets(
    model: nn.Module, source: DataSource, val_source: DataSource | None, options: FinetuneOptions, seed: int
) -> tuple[Dataset, Dataset | None, Augment | None]:
    """The training and validation sets: the seeded hold-out of ``source`` or the separate
    validation data, images transformed for ``model`` (augmented for training: as asked, or
    by default for small images, `default_augment`; the model's ``pretrained_cfg`` records
    the preprocessing); and the images' augmentation."""
    train_tf = eval_tf = augment = None
    if source.kind == "images":
        preprocess, in_chans = image_preprocess(model, source.in_chans, source.image_size, options.image_size)
        eval_tf = image_transforms(preprocess, source.image_size, None, in_chans)
        augment = options.augment if options.augment is not None else default_augment(preprocess, source.image_size)
        train_tf = image_transforms(preprocess, source.image_size, augment, in_chans)
        update_config(model, preprocess=preprocess)
    elif options.augment not in (None, Augment()):  # --no-augment (Augment()) says nothing to refuse
        raise InvalidArgumentError(f"augmentation applies to images, and the data is {source.kind}")
    val_fraction = options.val_fraction if val_source is None else 0.0
    train_set, val_set = source.split(val_fraction, seed, train_tf, eval_tf, options.limit)
    if val_source is not None:
        val_set = val_source.full(eval_tf)
    return train_set, val_set, augment


def _open_validation(
    data: str | os.PathLike | Dataset, source: DataSource, options: FinetuneOptions, name: str, resolved: Any
) -> DataSource | None:
    """The separate validation data (``options.val_data``), with the training data's classes (a
    multi-label's: a subset of its labels); shards it shares with the training data are warned about by name."""
    if options.val_data is None:
        return None
    if isinstance(data, (str, os.PathLike)):
        warn_shared_shards(data, options.val_data)
    val_source = open_run_data(options.val_data, options, name, resolved)
    if source.multi_label and val_source.multi_label and source.class_names:  # a subset, mapped as zoo eval maps
        return val_source.over_labels(source.class_names, f"--val-data {options.val_data}")
    if val_source.class_names != source.class_names:
        said = [f"{len(s.class_names)} classes ({shown_names(s.class_names)})" if s.class_names else "numbers (a "
                "regression)" for s in (val_source, source)]  # fmt: skip
        raise DataError(f"--val-data {options.val_data}: its labels are {said[0]}, the training data's {said[1]}; "
                        "give both files the same classes (or both numbers)")  # fmt: skip
    return val_source


def _trainer(
    model: nn.Module,
    source: DataSource,
    options: FinetuneOptions,
    config: TrainConfig,
    step_fn: StepFn | None,
    callbacks: Sequence[Callback] | None = None,
) -> Trainer:
    """The Trainer of the run: layer-wise lr decay, and the teacher's step when distilling."""
    lr_scale = layer_decay_scale(model, options.layer_decay) if options.layer_decay is not None else None
    if source.target is None and options.loss != "mse":
        raise InvalidArgumentError(
            f"--loss {options.loss} is a regression loss, and {source.description} holds classes"
        )
    eval_step_fn = None
    if (source.target is not None or source.multi_label) and options.distill is not None:
        raise InvalidArgumentError("distillation (--teacher) is for single-label classifiers; this data is not")
    if source.target is not None:
        if step_fn is None:
            step_fn = RegressionStep(source.target["mean"], source.target["std"], options.loss)
    elif source.multi_label:
        if step_fn is None:
            step_fn, eval_step_fn = MultiLabelStep(), MultiLabelStep(keep_scores=True)
    elif options.distill is not None:
        if step_fn is not None:
            raise InvalidArgumentError("pass a custom step_fn or a distill teacher, not both")
        step_fn = distillation_step(options.distill, source, model, config.label_smoothing)
    return Trainer(
        model.train(), config, step_fn=step_fn, eval_step_fn=eval_step_fn, lr_scale=lr_scale,
        collate_fn=source.collate_fn, callbacks=callbacks,
    )  # fmt: skip


def _best_model(
    model: nn.Module, trainer: Trainer, history: list[dict[str, float]]
) -> tuple[nn.Module, dict[str, float]]:
    """``model`` with the best epoch's weights, on CPU in eval mode, and that epoch's metrics."""
    best = trainer.best_state_dict()
    if best is not None:
        model.load_state_dict(best)
    model = model.cpu().to(memory_format=torch.contiguous_format).eval()
    best_row = next((row for row in history if row["epoch"] == trainer.state.best_epoch), history[-1])
    metrics = {k: v for k, v in best_row.items() if k.startswith(("train_", "val_")) and not k.endswith("_per_s")}
    metrics["epoch"] = best_row.get("epoch")
    return model, metrics


def _record_data(
    model: nn.Module, source: DataSource, base: str | None, thresholds: list[float] | None, options: FinetuneOptions
) -> None:
    """Record in the model's configuration where it started, its classes, a regression's target
    statistics, a multi-label's names and decision ``thresholds``, the molecule featurizer
    (predictions take SMILES), the label column it was given and a text model's tokens per row
    (so ``zoo eval --data`` and ``zoo predict`` read a file as training did). A regression's
    standardisation is folded into the head where float32 holds it exactly, else recorded as
    ``target.standardised`` and undone by what reads the outputs (`OutputMeaning.values`)."""
    target = source.target  # None for classes (a regression's start loses its own)
    if target is not None and not fold_standardisation(model, target["mean"], target["std"]):
        target = {**target, "standardised": True}
    extra: dict[str, Any] = {"target": target}
    extra["multi_label"] = {"names": source.class_names, "thresholds": thresholds} if source.multi_label else None
    extra["label_field"] = options.molecules.label_field if options.molecules is not None else None
    extra["max_length"] = options.max_length if source.kind == "text" else None
    if isinstance(source, MoleculeSource):
        extra["input_format"] = source.input_format
    update_config(model, weights=None, finetuned_from=base, class_names=source.class_names, **extra)


# ---------------------------------------------------------------------------------------------
# Command line

_SHOWN = ("val_acc", "val_loss", "val_mae", "val_rmse", "val_r2", "val_map", "val_f1_micro", "val_f1_macro")


def run(args: argparse.Namespace, command: str | None = None) -> FinetuneResult:
    """Fine-tune from parsed `add_arguments` options and print where the result went."""
    config = config_from_args(args, out_dir=args.out)
    options = options_from_args(args, command)
    result = finetune_with_config(args.name, args.data, args.out, options, config=config, given=given_options(args))
    shown = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items() if k in _SHOWN)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, only the process that saved
        print(f"saved {result.out} (best epoch {result.metrics.get('epoch')}{': ' + shown if shown else ''})")
        if (run_id := result.mlflow_run_id) is not None:
            print(f"MLflow run {run_id} (--track {args.track}); its model: runs:/{run_id}/model")
    return result


_COMMAND_OF_MODULE = {"zoo.training.finetune": "zoo finetune"}  # the module a zoo command also runs as


def module_main(
    module: str, doc: str, action: Callable[[argparse.Namespace, str], object], argv: Sequence[str] | None = None
) -> int:
    """``python -m MODULE`` for the commands that take the `finetune` options (finetune,
    transfer): parse ``argv``, run ``action(args, command)`` with the command line recorded,
    errors as one line and an exit code (`zoo.errors.run_command`). A module that runs a zoo
    command (torchrun starts ``-m zoo.training.finetune``) is named as that command in its
    usage, error and warning lines."""
    prog = _COMMAND_OF_MODULE.get(module, f"python -m {module}")
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    add_arguments(parser)
    show_defaults(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "-m", module, *argv])

    def job() -> int:
        action(args, command)
        return 0

    return run_command(job, prog=parser.prog)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zoo.training.finetune``: the options of ``zoo finetune``."""
    return module_main("zoo.training.finetune", __doc__, run, argv)
