"""The optimizer and learning-rate schedule a `zoo.training.loop.trainer.Trainer` runs, made from its
`TrainConfig`: parameter groups (no weight decay on biases and norms, per-parameter lr scales),
AdamW or SGD (fused on CUDA), and the schedules (cosine with warmup, one-cycle, step, plateau)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from zoo.errors import InvalidArgumentError
from zoo.training.loop.steps import higher_is_better
from zoo.training.loop.train_config import TrainConfig


def param_groups(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    lr_scale: Callable[[str], float] | None = None,
) -> list[dict[str, Any]]:
    """Optimizer groups of the trainable parameters: weight decay only on weights with two or
    more dimensions (no decay on biases, normalisation scales, or names the model lists in
    ``no_weight_decay()``), and the learning rate multiplied by ``lr_scale(name)`` (e.g.
    layer-wise decay). Each group records its ``lr_scale``."""
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    groups: dict[tuple[float, bool], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decay = param.ndim >= 2 and name not in skip
        scale = lr_scale(name) if lr_scale else 1.0
        group = groups.setdefault(
            (scale, decay),
            {"params": [], "lr": lr * scale, "weight_decay": weight_decay if decay else 0.0, "lr_scale": scale},
        )
        group["params"].append(param)
    if not groups:
        raise InvalidArgumentError("the model has no trainable parameters (all have requires_grad=False)")
    return list(groups.values())


def start_lr(cfg: TrainConfig) -> float:
    """The learning rate the optimizer is made with: ``cfg.lr``, or TrainConfig's default while
    ``lr="auto"`` waits for the finder (`zoo.training.loop.lr_finder`) to set it."""
    return TrainConfig.__dataclass_fields__["lr"].default if cfg.lr == "auto" else cfg.lr


def make_optimizer(groups: list[dict[str, Any]], cfg: TrainConfig, fused: bool) -> torch.optim.Optimizer:
    """``cfg.optimizer`` over ``groups``; ``fused`` picks the fused kernels (CUDA without FSDP)."""
    fused_kernel = {"fused": True} if fused else {}
    lr = start_lr(cfg)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            groups,
            lr=lr,
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
            weight_decay=cfg.weight_decay,
            **fused_kernel,
        )
    return torch.optim.AdamW(groups, lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay, **fused_kernel)


def make_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int, total_steps: int, monitor: str
) -> Any:
    """``cfg.scheduler`` for a run of ``total_steps`` optimizer steps (None for "none"); "plateau"
    lowers the lr when ``monitor`` stops improving (falling for losses, rising otherwise)."""
    schedules = torch.optim.lr_scheduler
    warmup = min(round(cfg.warmup_epochs * steps_per_epoch), max(total_steps - 1, 0))
    if cfg.scheduler == "cosine":
        cosine = schedules.CosineAnnealingLR(optimizer, T_max=max(total_steps - warmup, 1), eta_min=cfg.min_lr)
        if not warmup:
            return cosine
        ramp = schedules.LinearLR(optimizer, start_factor=1.0 / (warmup + 1), total_iters=warmup)
        return schedules.SequentialLR(optimizer, [ramp, cosine], milestones=[warmup])
    if cfg.scheduler == "onecycle":
        max_lr = [group["lr"] for group in optimizer.param_groups]
        pct = warmup / total_steps if warmup else 0.3
        return schedules.OneCycleLR(optimizer, max_lr=max_lr, total_steps=max(total_steps, 2), pct_start=pct)
    if cfg.scheduler == "step":
        step_size = max(round(cfg.step_epochs * steps_per_epoch), 1)
        return schedules.StepLR(optimizer, step_size=step_size, gamma=cfg.gamma)
    if cfg.scheduler == "plateau":
        mode = "max" if higher_is_better(monitor) else "min"
        return schedules.ReduceLROnPlateau(optimizer, mode=mode, factor=cfg.gamma, patience=cfg.plateau_patience)
    return None
