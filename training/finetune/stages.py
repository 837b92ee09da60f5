"""Fine-tuning modes: which parameters of a model train, and when. A model's stages are its
depths (`parameter_levels`); `apply_mode` freezes what a mode leaves out (``linear-probe``: all
but the classifier; ``partial``: all but the last stages and the head; ``full``: nothing), and
`layer_decay_scale` gives deeper stages smaller learning rates.

The head a run starts from: the weights' own only when the data's classes are the weights' own
classes (`match_head`: the same names, in any order), else a fresh one; and a fresh head's phase
alone before the whole network trains (`train_head`), so the body's first updates do not follow
a random head's gradients (fastai's ``fine_tune`` and ULMFiT's gradual unfreezing do the same)."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import Dataset

from zoo.errors import InvalidArgumentError
from zoo.store.model_config import update_config
from zoo.store.weight_entries import load_categories
from zoo.training.finetune.defaults import HEAD_LR_FACTOR, HEAD_SHARE
from zoo.training.loop.optim import start_lr
from zoo.training.loop.train_config import TrainConfig
from zoo.training.loop.trainer import Trainer

MODES = ("linear-probe", "partial", "full")


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
            raise InvalidArgumentError(
                f"{type(model).__name__} has no stages (feature_info or a list of blocks); "
                "use mode 'full' or 'linear-probe', without layer decay"
            )
        depth = max(len(getattr(model, name)) for name in lists)
        stages = [[f"{name}.{i}" for name in lists if i < len(getattr(model, name))] for i in range(depth)]
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    missing = [m for stage in stages for m in stage if m not in order]
    if missing:
        raise InvalidArgumentError(f"{type(model).__name__}: feature_info names modules that do not exist: {missing}")

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
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if mode == "full":
        model.requires_grad_(True)
    elif mode == "linear-probe":
        classifier = model.get_classifier()
        if not any(True for _ in classifier.parameters()):
            raise InvalidArgumentError("linear-probe trains the classifier, and this model has none (num_classes=0)")
        model.requires_grad_(False)
        classifier.requires_grad_(True)
    else:
        levels, num_levels = parameter_levels(model)
        if not 1 <= stages <= num_levels:
            raise InvalidArgumentError(
                f"partial mode unfreezes 1..{num_levels} stages of {type(model).__name__}; got stages={stages}"
            )
        for name, param in model.named_parameters():
            param.requires_grad_(levels[name] >= num_levels - stages)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def layer_decay_scale(model: nn.Module, decay: float) -> Callable[[str], float]:
    """Layer-wise learning-rate decay (Clark et al., 2020; BEiT): the head keeps the base lr,
    the stage below it ``decay`` times it, the next ``decay**2``, down to the stem."""
    if not 0.0 < decay <= 1.0:
        raise InvalidArgumentError(f"layer_decay must be in (0, 1], e.g. 0.75; got {decay}")
    levels, num_levels = parameter_levels(model)
    return lambda name: decay ** (num_levels - levels[name])


def _key(name: str) -> str:
    """A class name as matched: case and everything but letters and digits ignored, so a
    folder ``t-shirt_top`` is the class ``T-shirt/top``."""
    return re.sub(r"[^0-9a-z]+", "", str(name).casefold())


def weight_classes(model: nn.Module) -> list[str] | None:
    """The class names of the model's outputs, as its weights state them (a fine-tuned run's
    ``class_names``, or a weight entry's ``categories``); None when they state none."""
    cfg = getattr(model, "pretrained_cfg", {}) or {}
    names = cfg.get("class_names")
    if names is None and isinstance(cfg.get("categories"), str):
        names = load_categories(cfg["categories"])
    return list(names) if names is not None else None


def match_head(model: nn.Module, class_names: list[str] | None) -> tuple[bool, str]:
    """Keep the model's classifier only when ``class_names`` (the data's) are its weights' own
    classes in some order (its rows are then put in the data's order); otherwise give it a
    fresh one of ``len(class_names)`` outputs (a matching count is not enough: ten digits are
    not ten garments). Returns whether the head is fresh, and the line that says which happened."""
    own = weight_classes(model)
    classifier = model.get_classifier() if hasattr(model, "get_classifier") else None
    if class_names is None or not isinstance(classifier, nn.Linear):
        return False, "head: the model's own"
    wanted = [_key(name) for name in class_names]
    have = [_key(name) for name in own] if own is not None else []
    if len(set(wanted)) == len(wanted) == len(have) and sorted(wanted) == sorted(have):
        order = torch.tensor([have.index(key) for key in wanted])
        with torch.no_grad():
            classifier.weight.copy_(classifier.weight[order])
            if classifier.bias is not None:
                classifier.bias.copy_(classifier.bias[order])
        moved = "" if order.tolist() == list(range(len(order))) else ", its rows put in the data's order"
        kept = f"head: the weights' own, kept (the data's {len(wanted)} classes are the weights' classes{moved})"
        return False, kept
    model.reset_classifier(len(class_names))
    update_config(model, num_classes=len(class_names), categories=None)
    why = "the weights state no class names" if own is None else f"the weights' classes are {_listed(own)}"
    return True, f"head: fresh, {len(class_names)} outputs ({why}; the data's are {_listed(class_names)})"


def _listed(names: list[str], shown: int = 4) -> str:
    """Up to ``shown`` names, and how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(repr(n) for n in names[:shown]) + more


def head_config(config: TrainConfig, epochs: float, steps_per_epoch: int, lr_factor: float) -> TrainConfig:
    """The training loop of a head phase of ``epochs`` (a fraction allowed): the run's own
    device, seed, batch and loader, ``lr_factor`` times its learning rate on a cosine schedule,
    in fp32 unless the run fixed a precision, and nothing written (no folder, logs or checkpoints)."""
    steps = max(1, round(epochs * steps_per_epoch))
    precision = config.precision if config.precision != "auto" else "fp32"
    return dataclasses.replace(
        config, epochs=max(1, math.ceil(epochs)), max_steps=steps, lr=lr_factor * start_lr(config),
        warmup_epochs=0.0, min_lr=0.0, scheduler="cosine", precision=precision, channels_last=None, compile=None,
        out_dir=None, resume=False, checkpoint_every=None, profile=False, tensorboard=False, plot=False,
        track=None, track_experiment=None, ema_decay=None, early_stopping_patience=None, monitor=None,
        progress=False, num_workers=config.num_workers or 0, accum_steps=1,
    )  # fmt: skip


def train_head(
    model: nn.Module,
    train_set: Dataset,
    config: TrainConfig,
    epochs: float | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> str | None:
    """Train only ``model``'s classifier on ``train_set`` for ``epochs`` (None: `HEAD_SHARE` of
    the epochs the run trains, fewer under ``max_steps``) at `HEAD_LR_FACTOR` times the learning
    rate (`head_config`), then leave every parameter trainable again (the caller applies its
    mode); returns the line saying what ran, or None when nothing did (no epochs, or several
    processes under torchrun, where the phase is left out)."""
    steps_per_epoch = max(1, math.ceil(len(train_set) / (config.batch_size * config.accum_steps)))  # type: ignore[arg-type]
    if epochs is None:
        run = config.epochs if config.max_steps is None else min(config.epochs, config.max_steps / steps_per_epoch)
        epochs = HEAD_SHARE * run
    if epochs <= 0 or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return None
    head = head_config(config, epochs, steps_per_epoch, HEAD_LR_FACTOR)
    apply_mode(model, "linear-probe")
    try:
        Trainer(model, head, collate_fn=collate_fn).fit(train_set)
    finally:
        model.requires_grad_(True)
    return (
        f"head phase: the new head trained alone for {head.max_steps} step{'s' if head.max_steps != 1 else ''} "
        f"({epochs:.3g} epochs) at lr {head.lr:.3g}, "
        "the body frozen; then the whole run"
    )
