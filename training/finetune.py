"""Fine-tune a zoo model on your data: ``zoo finetune NAME --data PATH --out DIR`` (also
``python -m zoo.training.finetune``), or `finetune` from Python.

NAME is a weight name (``resnet50.tv_in1k``), a directory written by `zoo.save`, or a bare
architecture (``resnet20``), which trains from scratch with a warning. The head gets one
output per class of the data and image models take its channel count. Modes:

- ``linear-probe``: only the classifier trains; the body is frozen (BatchNorm in eval mode);
- ``partial``: the last ``stages`` stages of the body (its ``feature_info`` levels, or its
  blocks) and the head;
- ``full``: everything; ``layer_decay`` scales each stage's learning rate by decay^(depth from the top).

OUT receives the best model as `zoo.save` writes it (``zoo.load(OUT)`` restores it) with a
model card, the metrics (CSV, JSON), loss/accuracy curves, TensorBoard logs and checkpoints.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import os
import shlex
import shutil
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn as nn
from torch.utils.data import Dataset, SequentialSampler

import zoo
from zoo.training import post_training as after_training
from zoo.training.data import Augment, build_loader, default_preprocess, image_transforms
from zoo.training.sources import DataSource, open_data
from zoo.training.config import TrainConfig, add_config_options, config_from_args
from zoo.training.engine import Trainer
from zoo.training.steps import DistillationStep, StepFn, split_batch
from zoo.store.files import write_bytes_atomic
from zoo.store import registry
from zoo.architectures import ARCHS
from zoo.loading.resolve import Registered, SavedFolder, architecture, resolve
from zoo.loading.saved import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE, read_saved_config
from zoo.errors import DataError, InvalidArgumentError, run_command
from zoo.training.checkpoint import LAST_CHECKPOINT

MODES = ("linear-probe", "partial", "full")
CALIBRATION_BATCHES = 4  # validation batches static int8 calibrates on


def _fitting_example(kind: str) -> str:
    """A name that fine-tunes on data of ``kind``, from the family specs."""
    return next(s.finetune_example for s in ARCHS.values() if s.inputs == kind and s.finetune_example)


def _check_fits(name: str, arch: str, data: DataSource) -> None:
    """Refuse, before anything is built, data of a kind the architecture does not read."""
    holds = data.kind if data.kind != "tensors" else "images" if data.image_size else "vectors"
    reads = registry.input_kind(arch)
    if reads != holds:
        raise DataError(
            f"{name} reads {reads}, but {data.description} holds {holds}: fine-tune a model that reads "
            f"{holds}, e.g. {_fitting_example(holds)}"
        )


# ---------------------------------------------------------------------------------------------
# Stages: which parameters belong to which depth of the body


def parameter_levels(model: nn.Module) -> tuple[dict[str, int], int]:
    """Each parameter's depth: stage 0 (the input side) to L-1, or L for the head, and L.

    The stages are the ``feature_info`` levels of vision models (each ends at its module), or
    else item i of every top-level ModuleList (transformer blocks, graph layers with their
    norms, RBMs). A parameter inside a stage's module belongs to it; the classifier to the
    head; the input side (the ``first_conv`` module, embeddings, parameters of the model
    itself such as position embeddings) to stage 0; anything else to the first stage that ends
    after it in module order (a stem, a transition), or to the head when none does (final norm,
    readout)."""
    info = getattr(model, "feature_info", None)
    if info:
        stages = [[level["module"]] for level in info]
    else:
        lists = [name for name, child in model.named_children() if isinstance(child, nn.ModuleList) and len(child)]
        if not lists:
            raise ValueError(
                f"{type(model).__name__} has no stages (feature_info or a list of blocks); "
                "use mode 'full' or 'linear-probe', without layer decay"
            )
        depth = max(len(getattr(model, name)) for name in lists)
        stages = [[f"{name}.{i}" for name in lists if i < len(getattr(model, name))] for i in range(depth)]
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    missing = [m for stage in stages for m in stage if m not in order]
    if missing:
        raise ValueError(f"{type(model).__name__}: feature_info names modules that do not exist: {missing}")

    def within(owner: str, module: str) -> bool:
        return owner == module or owner.startswith(module + ".")

    ends = [max(pos for name, pos in order.items() if any(within(name, m) for m in stage)) for stage in stages]
    num_levels = len(stages)
    classifier = {id(p) for p in model.get_classifier().parameters()} if hasattr(model, "get_classifier") else set()
    input_side = {id(p) for p in model.parameters(recurse=False)}
    input_side |= {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    first_conv = getattr(model, "first_conv", None)
    if isinstance(first_conv, str) and first_conv in order:
        input_side |= {id(p) for p in model.get_submodule(first_conv).parameters()}

    def level_of(name: str, param: nn.Parameter) -> int:
        if id(param) in classifier:
            return num_levels
        owner = name.rpartition(".")[0]
        for level, stage in enumerate(stages):
            if any(within(owner, m) for m in stage):
                return level
        if id(param) in input_side:
            return 0
        return next((level for level, end in enumerate(ends) if order[owner] <= end), num_levels)

    return {name: level_of(name, param) for name, param in model.named_parameters()}, num_levels


def apply_mode(model: nn.Module, mode: str, stages: int = 1) -> int:
    """Set requires_grad for a fine-tuning mode; returns the number of trainable parameters."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if mode == "full":
        model.requires_grad_(True)
    elif mode == "linear-probe":
        classifier = model.get_classifier()
        if not any(True for _ in classifier.parameters()):
            raise ValueError("linear-probe trains the classifier, and this model has none (num_classes=0)")
        model.requires_grad_(False)
        classifier.requires_grad_(True)
    else:
        levels, num_levels = parameter_levels(model)
        if not 1 <= stages <= num_levels:
            raise ValueError(
                f"partial mode unfreezes 1..{num_levels} stages of {type(model).__name__}; got stages={stages}"
            )
        for name, param in model.named_parameters():
            param.requires_grad_(levels[name] >= num_levels - stages)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def layer_decay_scale(model: nn.Module, decay: float) -> Callable[[str], float]:
    """Layer-wise learning-rate decay (Clark et al., 2020; BEiT): the head keeps the base lr,
    the stage below it ``decay`` times it, the next ``decay**2``, down to the stem."""
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"layer_decay must be in (0, 1], e.g. 0.75; got {decay}")
    levels, num_levels = parameter_levels(model)
    return lambda name: decay ** (num_levels - levels[name])


# ---------------------------------------------------------------------------------------------
# Fine-tuning


@dataclass(frozen=True)
class Distillation:
    """A frozen teacher that `finetune` learns from as well as from the labels
    (`zoo.training.steps.DistillationStep`): a weight name or a `zoo.save` folder that predicts the
    data's classes. Images are renormalised from the student's preprocessing to the teacher's;
    ``bf16`` runs the teacher under bfloat16 autocast (faster where the CPU has native bf16)."""

    teacher: str
    alpha: float = 0.5
    kind: Literal["hard", "soft"] = "hard"
    temperature: float = 1.0
    bf16: bool = False

    def __str__(self) -> str:
        labels = "hard labels" if self.kind == "hard" else f"soft labels at temperature {self.temperature:g}"
        return f"{labels} of {self.teacher}" + (" (run in bf16)" if self.bf16 else "") + f", weight {self.alpha:g}"


def distillation_step(
    spec: Distillation, source: DataSource, student: nn.Module, label_smoothing: float = 0.0
) -> DistillationStep:
    """The `DistillationStep` of ``spec`` for ``student`` on data from ``source`` (images
    normalised by the student's ``pretrained_cfg["preprocess"]``)."""
    teacher = zoo.load(spec.teacher)
    names = teacher.pretrained_cfg.get("class_names")
    if teacher.num_classes != source.num_classes or (names and source.class_names and names != source.class_names):
        raise ValueError(
            f"the teacher {spec.teacher} predicts {teacher.num_classes} classes and {source.description} has "
            f"{source.num_classes}{'' if not names else f' ({names} against {source.class_names})'}: a teacher "
            "must predict the data's classes; fine-tune one on it first (zoo finetune NAME --data ...) and pass "
            "its output folder"
        )
    teacher_input = None
    if source.kind == "images":
        in_chans, student_chans = getattr(teacher, "in_chans", None), getattr(student, "in_chans", None)
        if None not in (in_chans, student_chans) and in_chans != student_chans:
            raise ValueError(
                f"the teacher {spec.teacher} takes {in_chans}-channel images and the student {student_chans}-channel "
                "ones; pick a teacher with the student's channel count"
            )
        preprocess = teacher.pretrained_cfg.get("preprocess") or default_preprocess(in_chans or source.in_chans)
        teacher_input = _renormalize(student.pretrained_cfg.get("preprocess") or {}, preprocess)
    return DistillationStep(
        teacher=teacher, alpha=spec.alpha, kind=spec.kind, temperature=spec.temperature,
        label_smoothing=label_smoothing, teacher_input=teacher_input,
        teacher_dtype=torch.bfloat16 if spec.bf16 else None,
    )


def _renormalize(student: Mapping[str, Any], teacher: Mapping[str, Any]) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Images normalised as ``student`` says, normalised as ``teacher`` says instead (None when
    the two agree): x * s_std / t_std + (s_mean - t_mean) / t_std, per channel."""
    mean_s, std_s = torch.tensor(student.get("mean", [0.0])), torch.tensor(student.get("std", [1.0]))
    mean_t, std_t = torch.tensor(teacher.get("mean", [0.0])), torch.tensor(teacher.get("std", [1.0]))
    if mean_s.shape == mean_t.shape and torch.equal(mean_s, mean_t) and torch.equal(std_s, std_t):
        return None
    scale, shift = (std_s / std_t)[:, None, None], ((mean_s - mean_t) / std_t)[:, None, None]
    return lambda x: x * scale.to(x) + shift.to(x)


@dataclass
class FinetuneResult:
    """The fine-tuned model (best epoch, on CPU), its metrics and where it was saved."""

    model: nn.Module
    out: Path
    metrics: dict[str, float]
    history: list[dict[str, float]]


def load_for_data(
    name: str, data: DataSource, pretrained: bool = True, model_kwargs: Mapping[str, Any] | None = None
) -> tuple[nn.Module, str | None]:
    """The model NAME with a head of ``data.num_classes`` outputs (and for images, the data's
    channel count when it comes from the registry; text and graph data pick the
    sequence/graph classification head; ``model_kwargs`` go to the builder), and the weights it
    starts from (None: random initialisation)."""
    if data.num_classes is None:
        raise ValueError(
            f"{data.description} has no labels; fine-tuning a classifier needs them (use Trainer with a custom step)"
        )
    source = resolve(name)  # once: zoo.load takes the source as it is
    if isinstance(source, SavedFolder):
        saved = read_saved_config(source.path)
        _check_fits(name, saved["architecture"], data)
        if pretrained:
            if model_kwargs:
                raise ValueError(f"{source.path} is a saved model with fixed options; drop model_kwargs {dict(model_kwargs)}")
            channels = {"in_chans": data.in_chans} if data.kind == "images" else {}  # colour data, gray model: adapt
            return zoo.load(source, num_classes=data.num_classes, **channels), str(source.path)
        arch, kwargs = saved["architecture"], {**saved["model_kwargs"], **(model_kwargs or {})}
        return zoo.load(architecture(arch), pretrained=False, num_classes=data.num_classes, **kwargs), None
    if not isinstance(source, Registered):
        raise ValueError(f"{name!r}: fine-tuning starts from registered weights, an architecture or a folder "
                         "written by zoo.save; download a Hub model with zoo.load and zoo.save it first")
    arch = source.arch
    kwargs: dict[str, Any] = dict(model_kwargs or {})
    if data.kind == "images":
        kwargs.setdefault("in_chans", data.in_chans)
    elif data.kind == "graphs":
        kwargs.setdefault("in_channels", data.in_chans)
    head = registry.arch_spec(arch).finetune_head
    if head is not None and head in registry.supported_heads(arch):
        kwargs.setdefault("head", head)
    _check_fits(name, arch, data)
    if "." not in name:
        if pretrained:
            tags = [w.name for w in registry.weights_for(arch)]
            hint = f" For pretrained weights name them, e.g. {tags[0]}." if tags else ""
            message = f"{name!r} is a bare architecture: training it from scratch (random weights).{hint}"
            warnings.warn(message, stacklevel=3)
        return zoo.load(source, pretrained=False, num_classes=data.num_classes, **kwargs), None
    model = zoo.load(source, pretrained=pretrained, num_classes=data.num_classes, **kwargs)
    return model, name if pretrained else None


def finetune(
    name: str,
    data: str | os.PathLike | Dataset,
    out: str | os.PathLike,
    *,
    mode: str = "full",
    stages: int = 1,
    layer_decay: float | None = None,
    pretrained: bool = True,
    model_kwargs: Mapping[str, Any] | None = None,
    val_data: str | os.PathLike | None = None,
    val_fraction: float = 0.1,
    limit: int | None = None,
    image_size: int | None = None,
    augment: Augment | None = None,
    config: TrainConfig | None = None,
    step_fn: StepFn | None = None,
    distill: Distillation | None = None,
    max_length: int = 512,
    post_training: bool = True,
    overwrite: bool = False,
    command: str | None = None,
) -> FinetuneResult:
    """Fine-tune NAME on ``data`` and save the best epoch's model to ``out`` (see the module
    docstring). ``pretrained=False`` starts the same architecture from random weights;
    ``model_kwargs`` are architecture options (e.g. ``{"sizes": [64, 32, 16]}`` for a DBN);
    ``val_data`` replaces the fixed-seed hold-out of ``val_fraction``; ``limit`` keeps that
    many training samples; ``image_size`` resizes images (the model's own size otherwise);
    ``distill`` adds a teacher's predictions to the loss (instead of a custom ``step_fn``).
    ``post_training`` adds the evaluation report (confusion matrix), TorchScript, torch.export
    and ONNX files, int8 quantization and pruning results of `zoo.training.post_training`.
    ``out`` must be empty or missing, or hold a run to resume (``config.resume``); with
    ``overwrite`` the files an earlier run wrote there are removed first."""
    config = dataclasses.replace(config or TrainConfig(), out_dir=str(out))
    out = Path(out)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, one process checks and clears
        prepare_output(out, resume=bool(config.resume), overwrite=overwrite)
    source = open_data(data, max_length=max_length)
    if int(os.environ.get("RANK", "0")) == 0 and config.progress:
        print(f"data: {source.description}; {source.describe_classes()}")
    torch.manual_seed(config.seed)  # the new head's initialisation
    model, base = load_for_data(name, source, pretrained, model_kwargs)
    train_tf = eval_tf = None
    if source.kind == "images":
        preprocess, in_chans = _image_preprocess(model, source, image_size)
        eval_tf = image_transforms(preprocess, source.image_size, None, in_chans)
        train_tf = image_transforms(preprocess, source.image_size, augment or Augment(), in_chans)
        model.pretrained_cfg = {**model.pretrained_cfg, "preprocess": preprocess}
    elif augment is not None:
        raise ValueError(f"augmentation applies to images, and the data is {source.kind}")
    train_set, val_set = source.split(val_fraction if val_data is None else 0.0, config.seed, train_tf, eval_tf, limit)
    if val_data is not None:
        val_source = open_data(val_data, max_length=max_length)
        if val_source.class_names != source.class_names:
            raise ValueError(
                f"the validation data's classes {val_source.class_names} differ from the training data's "
                f"{source.class_names}"
            )
        val_set = val_source.full(eval_tf)

    trainable = apply_mode(model, mode, stages)
    lr_scale = layer_decay_scale(model, layer_decay) if layer_decay is not None else None
    if distill is not None:
        if step_fn is not None:
            raise ValueError("pass a custom step_fn or a distill teacher, not both")
        step_fn = distillation_step(distill, source, model, config.label_smoothing)
    trainer = Trainer(model.train(), config, step_fn=step_fn, lr_scale=lr_scale, collate_fn=source.collate_fn)
    history = trainer.fit(train_set, val_set)

    best = trainer.best_state_dict()
    if best is not None:
        model.load_state_dict(best)
    model = model.cpu().to(memory_format=torch.contiguous_format).eval()
    best_row = next((row for row in history if row["epoch"] == trainer.state.best_epoch), history[-1])
    metrics = {k: v for k, v in best_row.items() if k.startswith(("train_", "val_")) and not k.endswith("_per_s")}
    metrics["epoch"] = best_row.get("epoch")
    if trainer.is_main:
        model.pretrained_cfg = {
            **model.pretrained_cfg, "weights": None, "finetuned_from": base, "class_names": source.class_names,
        }
        model.requires_grad_(True)  # the returned model trains whole again
        zoo.save(model, out, overwrite=True)  # out was checked: empty, resumed, or --overwrite
        after = _post_training(model, val_set, source, config) if post_training and val_set is not None else None
        details = {
            "name": name, "base": base, "data": source.description, "mode": mode,
            "stages": stages if mode == "partial" else None, "layer_decay": layer_decay, "trainable": trainable,
            "train_samples": len(train_set),
            "val_samples": len(val_set) if val_set is not None else 0, "monitor": trainer.monitor,
            "stopped_early": trainer.state.stopped_early, "epochs_run": len(history),
            "distillation": str(distill) if distill else None,
        }
        _write_card(out, model, details, metrics, after, config, command)
    return FinetuneResult(model, out, metrics, history)


def _post_training(model: nn.Module, val_set: Dataset, source: DataSource, config: TrainConfig) -> dict[str, Any]:
    """`zoo.training.post_training.post_training` on the validation set: report, exports, int8, pruning."""
    if config.progress:
        print(f"after training: evaluating, exporting and quantizing on {len(val_set)} validation samples "
              "(--no-post-training skips it)", flush=True)
    loader = build_loader(val_set, config.batch_size, sampler=SequentialSampler(val_set), collate_fn=source.collate_fn)
    calibration = [_positional(split_batch(batch)[0]) for batch in itertools.islice(loader, CALIBRATION_BATCHES)]
    return after_training.post_training(
        model, loader, config.out_dir, calibration[0], class_names=source.class_names,
        dynamic_batch=source.kind != "graphs", calibration=calibration, progress=config.progress,
    )


def _positional(inputs: Any) -> Any:
    """A batch's inputs as a model call's positional arguments (a tensor, or a tuple)."""
    if isinstance(inputs, Mapping):
        return tuple(inputs.values())  # in the model's order (input_ids, attention_mask)
    return inputs if isinstance(inputs, torch.Tensor) else (inputs,)


RUN_OUTPUTS = (
    CONFIG_FILE, WEIGHTS_FILE, CARD_FILE, "metrics.csv", "metrics.json", "curves.png", "train.log", "tensorboard",
    "checkpoints", "profile", after_training.TORCHSCRIPT_FILE, after_training.EXPORTED_PROGRAM_FILE, after_training.ONNX_FILE, after_training.REPORT_FILE,
    after_training.CONFUSION_FILE, after_training.SUMMARY_FILE,
)


def prepare_output(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse an output folder that holds anything but a run to resume, unless ``overwrite``;
    then remove what a run writes there (and nothing else), so runs never mix. A resume
    needs a run's folder (a run killed before its first checkpoint starts over) and removes nothing."""
    if resume:
        run_files = [p.name for p in out.iterdir() if p.name in RUN_OUTPUTS] if out.is_dir() else []
        if not run_files:
            raise InvalidArgumentError(
                f"--resume: {out} holds no run to resume (no {Path('checkpoints') / LAST_CHECKPOINT}); "
                "check --out, or drop --resume to start a new run"
            )
        return
    if not out.exists():
        return
    if not out.is_dir():
        raise InvalidArgumentError(f"--out {out} is a file, not a folder: choose a folder for the run")
    present = sorted(p.name for p in out.iterdir())
    if not present:
        return
    if not overwrite:
        shown = ", ".join(present[:5]) + (f" and {len(present) - 5} more" if len(present) > 5 else "")
        raise InvalidArgumentError(
            f"--out {out} is not empty ({shown}): choose a new folder, pass --resume to continue the run in it, "
            "or --overwrite to replace an earlier run's files"
        )
    for name in RUN_OUTPUTS:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _image_preprocess(model: nn.Module, source: DataSource, image_size: int | None) -> tuple[dict[str, Any], int]:
    """The preprocessing images get: the weights' own (or [-1, 1] scaling for random
    weights), resized to ``image_size`` if asked, for the model's channel count."""
    in_chans = getattr(model, "in_chans", source.in_chans)
    preprocess = dict(model.pretrained_cfg.get("preprocess") or default_preprocess(in_chans))
    if image_size is not None:
        if "crop" in preprocess and "resize" in preprocess:
            ratio = preprocess["resize"] / preprocess["crop"]
            preprocess |= {"resize": round(image_size * ratio), "crop": image_size}
        else:
            preprocess |= {"resize": image_size, "crop": image_size}
    elif "resize" not in preprocess and "crop" not in preprocess:  # one size for a folder of mixed sizes
        preprocess |= {"resize": list(source.image_size)}
    if in_chans == 1:
        preprocess["channels"] = 1
    size = preprocess.get("crop") or preprocess.get("resize") or min(source.image_size)
    minimum = getattr(model, "min_input_size", 1)
    if isinstance(size, int) and size < minimum:
        raise ValueError(
            f"{model.pretrained_cfg.get('architecture')} needs images of at least {minimum}px and these are "
            f"{size}px: pass --image-size {minimum} or more"
        )
    return preprocess, in_chans


def _write_card(
    out: Path,
    model: nn.Module,
    details: dict[str, Any],
    metrics: dict[str, float],
    after: dict[str, Any] | None,
    config: TrainConfig,
    command: str | None,
) -> None:
    """README.md: what was trained on what, how, and how well."""
    arch = model.pretrained_cfg["architecture"]
    lines = [
        f"# {arch} fine-tuned on {details['data'].split(' (')[0]}",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"- starting weights: {details['base'] or 'none (trained from scratch)'}",
        f"- command: `{command}`" if command else "- command: (Python API)",
        "",
        "## Data",
        "",
        f"- {details['data']}",
        f"- training samples: {details['train_samples']}, validation samples: {details['val_samples']}",
        f"- classes ({model.num_classes}): {', '.join(model.pretrained_cfg.get('class_names') or [])}",
        f"- preprocessing: `{json.dumps(model.pretrained_cfg.get('preprocess') or {})}`",
        "",
        "## Training",
        "",
        f"- mode: {details['mode']}" + (f" (last {details['stages']} stages)" if details["stages"] else "")
        + (f", layer-wise lr decay {details['layer_decay']}" if details["layer_decay"] else ""),
        f"- trainable parameters: {details['trainable']:,} of {sum(p.numel() for p in model.parameters()):,}",
        f"- {config.optimizer}, lr {config.lr}, weight decay {config.weight_decay}, schedule {config.scheduler}, "
        f"batch {config.batch_size} x {config.accum_steps} accumulation, precision {config.precision}"
        + (f", EMA {config.ema_decay}" if config.ema_decay else ""),
        *([f"- distillation: {details['distillation']}"] if details["distillation"] else []),
        f"- epochs run: {details['epochs_run']}" + (" (stopped early)" if details["stopped_early"] else ""),
        "",
        "## Metrics (best epoch by " + details["monitor"] + ")",
        "",
        "| metric | value |",
        "| --- | --- |",
        *(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in metrics.items()),
        "",
        *_post_training_lines(after),
        "Load it with `zoo.load(\"<this directory>\")`; `zoo.transforms(model)` gives its preprocessing.",
        "",
    ]
    write_bytes_atomic(out / CARD_FILE, "\n".join(lines).encode())


def _post_training_lines(after: dict[str, Any] | None) -> list[str]:
    """The card's section on the evaluation report, exports, quantization and pruning."""
    if after is None:
        return []
    evaluation = after["evaluation"]
    lines = [
        "## After training (validation set)",
        "",
        f"- accuracy {evaluation['accuracy']:.4f}, macro-F1 {evaluation['macro_f1']:.4f} on "
        f"{evaluation['num_samples']} samples (eval_report.json, confusion_matrix.png)",
    ]
    for key, label in (("torchscript", "TorchScript"), ("torch_export", "torch.export"), ("onnx", "ONNX")):
        result = after.get(key, {})
        if "error" in result:
            lines.append(f"- {label}: failed ({result['error']})")
        elif "skipped" in result:
            lines.append(f"- {label}: skipped ({result['skipped']})")
        elif result:
            lines.append(f"- {label}: {Path(result['path']).name}, {result['size_bytes'] / 2**20:.2f} MiB, "
                         f"max difference to eager {result['max_abs_diff']:.2g}")
    quantization = after.get("quantization", {})
    label = f"int8 quantization, {quantization['method']}" if "method" in quantization else "int8 quantization"
    if "error" in quantization:
        lines.append(f"- {label}: failed ({quantization['error']})")
    elif "skipped" in quantization:
        lines.append(f"- {label}: skipped ({quantization['skipped']})")
    elif "speedup_over_fp32_eager" in quantization:
        lines.append(f"- {label}: accuracy {quantization['accuracy']:.4f}, top-1 agreement with fp32 "
                     f"{quantization['agreement']:.4f}, {quantization['speedup_over_fp32_eager']:.2f}x fp32 eager "
                     f"on this CPU, calibrated on {quantization['calibration_samples']} validation samples")
    else:
        sizes = f"{quantization['size_bytes_before'] / 2**20:.2f} -> {quantization['size_bytes_after'] / 2**20:.2f} MiB"
        lines.append(f"- {label}: accuracy {quantization['accuracy']:.4f}, {sizes}")
    pruning = after.get("pruning", [])
    if isinstance(pruning, dict):
        lines.append(f"- magnitude pruning: failed ({pruning['error']})")
    else:
        lines += [
            f"- magnitude pruning {row['amount']:.0%} (sparsity {row['sparsity']:.2f}): accuracy {row['accuracy']:.4f}"
            for row in pruning
        ]
    return [*lines, ""]


# ---------------------------------------------------------------------------------------------
# Command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `finetune` options (shared by ``zoo finetune`` and ``python -m zoo.training.finetune``)."""
    parser.add_argument(
        "name", help="weight name (arch.tag), a directory written by zoo.save, or a bare architecture (from scratch)"
    )
    parser.add_argument(
        "--data", required=True, help="image folder, .csv/.jsonl of text,label, .pt/.npz tensors, or fashion-mnist"
    )
    parser.add_argument("--out", required=True, help="output directory: model, card, metrics, plots, logs, checkpoints")
    g = parser.add_argument_group("transfer")
    g.add_argument("--mode", choices=MODES, default="full")
    g.add_argument("--stages", type=int, default=1, help="partial mode: how many of the last stages train")
    g.add_argument("--layer-decay", type=float, help="layer-wise lr decay factor, e.g. 0.75")
    g.add_argument("--scratch", action="store_true", help="random weights for NAME's architecture")
    g.add_argument(
        "--model-kwargs", type=json.loads, metavar="JSON", help='architecture options, e.g. \'{"sizes": [64, 32, 16]}\''
    )
    g = parser.add_argument_group("data")
    g.add_argument("--val-data", help="separate validation data (default: a fixed-seed hold-out)")
    g.add_argument("--val-fraction", type=float, default=0.1)
    g.add_argument("--limit", type=int, help="use only this many training samples")
    g.add_argument("--image-size", type=int, help="resize images to this size")
    g.add_argument("--max-length", type=int, default=512, help="text: tokens kept per row")
    g.add_argument("--hflip", action="store_true", help="random horizontal flips")
    g.add_argument("--crop-padding", type=int, default=0, help="pad by this and random-crop back")
    g.add_argument("--random-resized-crop", type=float, metavar="MIN_SCALE", help="RandomResizedCrop down to this area")
    g.add_argument("--color-jitter", type=float, default=0.0)
    g.add_argument("--trivial-augment", action="store_true")
    g.add_argument("--random-erasing", type=float, default=0.0, metavar="P")
    add_config_options(g, "data")
    g = parser.add_argument_group("distillation")
    g.add_argument("--teacher", help="also learn from this model's predictions (a weight name or a fine-tuned folder)")
    g.add_argument("--distill-alpha", type=float, default=0.5, help="the teacher's share of the loss")
    g.add_argument("--distill-kind", choices=("hard", "soft"), default="hard",
                   help="the teacher's argmax labels (DeiT) or its softened distribution (Hinton)")
    g.add_argument("--distill-temperature", type=float, default=1.0, help="soft: the softmax temperature")
    g.add_argument("--teacher-bf16", action="store_true", help="run the teacher under bfloat16 autocast")
    for section in ("optimisation", "hardware"):
        add_config_options(parser.add_argument_group(section), section)
    add_config_options(parser.add_argument_group("run"), "run", after={
        "resume": lambda g: g.add_argument(
            "--overwrite", action="store_true",
            help="OUT may hold an earlier run: remove the files it wrote first (other files stay)"),
        "profile": lambda g: g.add_argument(
            "--no-post-training", action="store_true", help="skip the report, exports, int8 and pruning"),
    })


def augment_from_args(args: argparse.Namespace) -> Augment | None:
    augment = Augment(
        hflip=args.hflip, crop_padding=args.crop_padding, random_resized_crop=args.random_resized_crop,
        color_jitter=args.color_jitter, trivial_augment=args.trivial_augment, random_erasing=args.random_erasing,
    )
    return None if augment == Augment() else augment


def distillation_from_args(args: argparse.Namespace) -> Distillation | None:
    if args.teacher is None:
        return None
    return Distillation(args.teacher, args.distill_alpha, args.distill_kind, args.distill_temperature, args.teacher_bf16)


def run(args: argparse.Namespace, command: str | None = None) -> FinetuneResult:
    """Fine-tune from parsed arguments and print where the result went."""
    result = finetune(
        args.name, args.data, args.out, mode=args.mode, stages=args.stages, layer_decay=args.layer_decay,
        pretrained=not args.scratch, model_kwargs=args.model_kwargs, val_data=args.val_data,
        val_fraction=args.val_fraction, limit=args.limit,
        image_size=args.image_size, augment=augment_from_args(args), config=config_from_args(args, out_dir=args.out),
        distill=distillation_from_args(args), max_length=args.max_length, post_training=not args.no_post_training,
        overwrite=args.overwrite, command=command,
    )
    shown = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items() if k in ("val_acc", "val_loss"))
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, only the process that saved
        print(f"saved {result.out} (best epoch {result.metrics.get('epoch')}{': ' + shown if shown else ''})")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.training.finetune", description=__doc__.splitlines()[0])
    add_arguments(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "-m", "zoo.training.finetune", *argv])

    def fine_tune() -> int:
        run(args, command=command)
        return 0

    return run_command(fine_tune, prog=parser.prog)


if __name__ == "__main__":
    sys.exit(main())
