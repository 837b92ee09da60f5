"""One training loop for every model in the zoo: `Trainer` with a `TrainConfig`.

The batch -> loss computation is a small pluggable function (`zoo.training.steps.StepFn`):
`ClassificationStep` by default (cross-entropy; a model's routing ``aux_loss`` is added, see
`forward_with_aux`), `DistillationStep` (the same, learning also from a frozen teacher's
predictions), or any function returning a `StepOutput`, e.g. a contrastive-divergence step
for DBN pretraining that sets the gradients itself; all of them live in `zoo.training.steps`.
Everything else is shared, and is here: optimizers with parameter groups (`param_groups`),
schedules, mixed precision, accumulation, clipping, EMA, early stopping, and the run's logs
(train.log, TensorBoard, metrics.csv/json) and plots. Its parts live beside it:
`zoo.training.checkpoint` writes and reads the atomic checkpoints (exact resume, RNG states),
`zoo.training.meter` counts an epoch's loss and accuracy, and `zoo.training.distributed`
joins the processes of torchrun and wraps the model for DDP or FSDP2.

    trainer = Trainer(model, TrainConfig(epochs=10, lr=1e-3, precision="bf16", out_dir="run"))
    trainer.fit(train_set, val_set)
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.modules.batchnorm import _NormBase
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from zoo.store.files import write_bytes_atomic, write_json
from zoo.training.config import SCHEDULERS, TrainConfig
from zoo.training.checkpoint import (
    BEST_CHECKPOINT,
    LAST_CHECKPOINT,
    full_model_state,
    full_optimizer_state,
    load_full_state,
    read_best_weights,
    read_checkpoint,
    rng_state,
    seed_everything,
    set_rng_state,
    to_json_types,
    write_best_weights,
    write_checkpoint,
)
from zoo.training.data import EpochSampler, ShardSampler, build_loader
from zoo.training.distributed import gradient_sync, init_distributed, pick_device, use_fsdp, wrap_model
from zoo.training.meter import EpochMeter, count_correct, count_samples, take_first_samples
from zoo.training.report import plot_curves
from zoo.training.steps import ClassificationStep, StepFn, StepOutput, move_to_device

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Parameter groups


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
        raise ValueError("the model has no trainable parameters (all have requires_grad=False)")
    return list(groups.values())


# ---------------------------------------------------------------------------------------------
# Trainer


@dataclass
class TrainState:
    """Where training stands; saved in every checkpoint."""

    epoch: int = 0  # epochs completed
    batches_done: int = 0  # micro-batches of the current epoch already trained on (per process)
    global_step: int = 0  # optimizer steps
    best_metric: float | None = None
    best_epoch: int | None = None
    bad_epochs: int = 0
    stopped_early: bool = False
    elapsed_s: float = 0.0  # wall time of training so far, summed over the processes a resumed run took
    history: list[dict[str, float]] = field(default_factory=list)


class Trainer:
    """Trains ``model`` with ``config``; ``step_fn(model, batch) -> StepOutput`` computes
    the loss (default: `ClassificationStep`; it receives the model as wrapped for DDP/FSDP),
    ``eval_step_fn`` the validation one (default: a plain `ClassificationStep` for classification
    and distillation steps, else ``step_fn`` itself),
    ``lr_scale(name)`` multiplies each parameter's learning rate (see `param_groups`).

    Frozen normalisation layers (all parameters requires_grad=False) stay in eval mode while
    training, so their running statistics stay those of the pretrained weights.
    Under ``torchrun`` the model is wrapped in DistributedDataParallel (or FSDP2 with
    ``distributed="fsdp"``) and each process reads its shard of every epoch.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig | None = None,
        *,
        step_fn: StepFn | None = None,
        eval_step_fn: StepFn | None = None,
        lr_scale: Callable[[str], float] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.config = cfg = config or TrainConfig()
        self.step_fn = step_fn or ClassificationStep(label_smoothing=cfg.label_smoothing)
        if eval_step_fn is None and isinstance(self.step_fn, ClassificationStep):  # its subclasses too
            eval_step_fn = ClassificationStep(aux_loss_weight=self.step_fn.aux_loss_weight)
        self.eval_step_fn = eval_step_fn or self.step_fn
        self.collate_fn = collate_fn
        self.rank, self.world_size, local_rank = init_distributed()
        self.device = pick_device(cfg.device, local_rank)
        if cfg.precision == "fp16" and self.device.type != "cuda":
            raise ValueError("precision='fp16' needs a CUDA device (it uses a GradScaler); use 'bf16' on CPU")
        self.out_dir = Path(cfg.out_dir) if cfg.out_dir else None
        self.is_main = self.rank == 0

        model.to(self.device)
        if cfg.channels_last:
            model.to(memory_format=torch.channels_last)
        if cfg.grad_checkpointing:
            if not hasattr(model, "set_grad_checkpointing"):
                raise ValueError(f"{type(model).__name__} has no set_grad_checkpointing(); turn grad_checkpointing off")
            model.set_grad_checkpointing(True)
        self.model = model  # the bare module: its state dict is what checkpoints hold
        self.fsdp = use_fsdp(model, cfg.distributed, self.world_size)
        if self.fsdp and cfg.ema_decay is not None:
            raise ValueError("ema_decay is not supported with FSDP (the EMA would hold a full copy per process)")
        self.ema = (
            AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema_decay), use_buffers=True)
            if cfg.ema_decay is not None else None
        )
        if cfg.compile:
            model.compile(backend=cfg.compile_backend)
        self.wrapped = wrap_model(model, self.world_size, self.fsdp, self.device, cfg.find_unused_parameters)
        # after wrapping: FSDP replaces the parameters with sharded ones
        self.optimizer = self._make_optimizer(param_groups(model, cfg.lr, cfg.weight_decay, lr_scale))
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.precision == "fp16")
        self.scheduler: Any = None
        self.state = TrainState()
        self._ticked: float | None = None  # perf_counter of the last `_tick`, while `fit` runs
        self._meter = EpochMeter()
        self._best_state: dict[str, torch.Tensor] | None = None
        self._writer: Any = None
        self._log_handler: logging.Handler | None = None
        self.monitor = self._monitor_name(has_val=False)
        self._data_signature: dict[str, int] | None = None

    # -- setup ---------------------------------------------------------------------------------

    def _make_optimizer(self, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        cfg = self.config
        fused = {"fused": True} if self.device.type == "cuda" and not self.fsdp else {}
        if cfg.optimizer == "sgd":
            return torch.optim.SGD(
                groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=cfg.weight_decay, **fused
            )
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, **fused)

    def _make_scheduler(self, steps_per_epoch: int, total_steps: int) -> Any:
        cfg, opt, schedules = self.config, self.optimizer, torch.optim.lr_scheduler
        warmup = min(round(cfg.warmup_epochs * steps_per_epoch), max(total_steps - 1, 0))
        if cfg.scheduler == "cosine":
            cosine = schedules.CosineAnnealingLR(opt, T_max=max(total_steps - warmup, 1), eta_min=cfg.min_lr)
            if not warmup:
                return cosine
            ramp = schedules.LinearLR(opt, start_factor=1.0 / (warmup + 1), total_iters=warmup)
            return schedules.SequentialLR(opt, [ramp, cosine], milestones=[warmup])
        if cfg.scheduler == "onecycle":
            max_lr = [group["lr"] for group in opt.param_groups]
            pct = warmup / total_steps if warmup else 0.3
            return schedules.OneCycleLR(opt, max_lr=max_lr, total_steps=max(total_steps, 2), pct_start=pct)
        if cfg.scheduler == "step":
            step_size = max(round(cfg.step_epochs * steps_per_epoch), 1)
            return schedules.StepLR(opt, step_size=step_size, gamma=cfg.gamma)
        if cfg.scheduler == "plateau":
            mode = "min" if "loss" in self.monitor else "max"
            return schedules.ReduceLROnPlateau(opt, mode=mode, factor=cfg.gamma, patience=cfg.plateau_patience)
        return None

    def _monitor_name(self, has_val: bool) -> str:
        if self.config.monitor:
            return self.config.monitor
        if not has_val:
            return "train_loss"
        return "val_acc" if isinstance(self.eval_step_fn, ClassificationStep) else "val_loss"

    # -- training ------------------------------------------------------------------------------

    def train_step(self, micro_batches: Sequence[Any]) -> list[StepOutput]:
        """One optimizer step on the gradients accumulated over ``micro_batches`` (each one's
        loss divided by their number, so k micro-batches of n give the gradient of one batch
        of k*n; exactly so when no layer uses batch statistics, i.e. BatchNorm frozen or absent).
        The gradients stay in ``.grad`` until the next step."""
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        outputs = []
        manual = False
        for i, batch in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            batch = move_to_device(
                batch, self.device, non_blocking=self._pin_memory(), channels_last=self.config.channels_last
            )
            with gradient_sync(self.wrapped, last, self.world_size, self.fsdp), self._autocast():
                out = self.step_fn(self.wrapped, batch)
            if out.loss.requires_grad:
                self.scaler.scale(out.loss / len(micro_batches)).backward()
            else:
                manual = True
            outputs.append(out)
            self._meter.update(out.loss, count_samples(batch), *count_correct(out), out.logs)
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        if manual:
            self._check_manual_gradients(len(micro_batches), params)
        if cfg.clip_grad_norm is not None:
            self.scaler.unscale_(self.optimizer)
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_grad_norm)
            outputs[-1].logs["grad_norm"] = norm.detach()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None and not isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.scheduler.step()
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        self.state.global_step += 1
        return outputs

    def _check_manual_gradients(self, num_micro_batches: int, params: list[torch.Tensor]) -> None:
        """Steps that set ``.grad`` themselves: one micro-batch per step (they overwrite, not
        add), no fp16 scaling, and the gradients averaged over DDP processes by hand."""
        if num_micro_batches > 1:
            raise ValueError(
                "this step sets the gradients itself (its loss has no autograd history), so it cannot "
                "accumulate micro-batches: use accum_steps=1"
            )
        if self.config.precision == "fp16" or self.fsdp:
            raise ValueError("a step that sets the gradients itself works in fp32/bf16 and with DDP, not fp16 or FSDP")
        if self.world_size > 1:
            for param in params:
                if param.grad is not None:
                    dist.all_reduce(param.grad)
                    param.grad /= self.world_size

    def fit(self, train_set: Dataset, val_set: Dataset | None = None) -> list[dict[str, float]]:
        """Train for ``config.epochs`` (or ``max_steps``), evaluating ``val_set`` after each
        epoch; returns the history (one dict of metrics per epoch)."""
        cfg = self.config
        if len(train_set) == 0:
            raise ValueError("the training set is empty")
        sampler = EpochSampler(train_set, num_replicas=self.world_size, rank=self.rank, seed=cfg.seed)
        drop_last = len(sampler) >= cfg.batch_size  # avoid tiny last batches (BatchNorm needs >1 sample)
        generator = torch.Generator()
        loader = build_loader(
            train_set, cfg.batch_size, sampler=sampler, collate_fn=self.collate_fn, num_workers=cfg.num_workers,
            pin_memory=self._pin_memory(), persistent_workers=cfg.persistent_workers, generator=generator,
            drop_last=drop_last,
        )
        batches_per_epoch = len(loader)
        steps_per_epoch = math.ceil(batches_per_epoch / cfg.accum_steps)
        total_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
        self.monitor = self._monitor_name(val_set is not None)
        self.scheduler = self._make_scheduler(steps_per_epoch, total_steps)
        self._data_signature = {"samples": len(train_set), "batch_size": cfg.batch_size, "world_size": self.world_size}

        resumed = self._resume_path()
        if resumed is not None:
            self.load_checkpoint(resumed)
        else:
            seed_everything(cfg.seed + self.rank)
        self._ticked = time.perf_counter()
        if self.out_dir is not None and self.is_main:
            self._open_logs(resumed)
        profiler = self._profiler()

        try:
            state = self.state
            while state.epoch < cfg.epochs and state.global_step < total_steps and not state.stopped_early:
                epoch = self.state.epoch
                sampler.set_epoch(epoch)
                sampler.skip = self.state.batches_done * cfg.batch_size
                generator.manual_seed(cfg.seed + epoch)  # worker seeds: a function of the epoch, not of a resume
                if self.state.batches_done == 0:
                    self._meter = EpochMeter()
                self.train_mode()
                start = time.perf_counter()
                samples_before = self._meter.samples
                bar = tqdm(
                    total=batches_per_epoch, initial=self.state.batches_done, desc=f"epoch {epoch + 1}/{cfg.epochs}",
                    disable=not (cfg.progress and self.is_main), leave=False, dynamic_ncols=True,
                )
                group: list[Any] = []
                for batch in loader:
                    group.append(batch)
                    consumed = self.state.batches_done + len(group)
                    if len(group) < cfg.accum_steps and consumed < batches_per_epoch:
                        continue
                    outputs = self.train_step(group)
                    self.state.batches_done = consumed
                    bar.update(len(group))
                    group = []
                    step = self.state.global_step
                    if step % cfg.log_every == 0 or step == total_steps:
                        self._log_step(outputs, bar)
                    if profiler is not None:
                        profiler.step()
                    if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and consumed < batches_per_epoch:
                        self.save_checkpoint()
                    if step >= total_steps:
                        break
                bar.close()
                elapsed = time.perf_counter() - start
                self._end_epoch(val_set, elapsed, self._meter.samples - samples_before)
        finally:
            self._ticked = None
            if profiler is not None:
                profiler.stop()
            self._close_logs()
        return self.state.history

    def _end_epoch(self, val_set: Dataset | None, elapsed: float, samples: int) -> None:
        cfg, state, monitor = self.config, self.state, self.monitor
        self._meter.reduce()
        lr = self.optimizer.param_groups[0]["lr"]
        metrics: dict[str, float] = {"epoch": state.epoch + 1, "step": state.global_step, "lr": lr}
        metrics |= self._meter.result("train")
        metrics["train_samples_per_s"] = samples * self.world_size / elapsed if elapsed > 0 else 0.0
        metrics["epoch_time_s"] = elapsed
        if val_set is not None:
            metrics |= {f"val_{k}": v for k, v in self.evaluate(val_set).items()}
        self._tick()
        metrics["elapsed_s"] = state.elapsed_s
        if monitor not in metrics:
            raise ValueError(f"monitor {monitor!r} is not among the epoch's metrics: {', '.join(sorted(metrics))}")
        value = metrics[monitor]
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.scheduler.step(value)
        minimize = "loss" in monitor
        improved = state.best_metric is None or (value < state.best_metric if minimize else value > state.best_metric)
        if improved:
            state.best_metric, state.best_epoch, state.bad_epochs = value, state.epoch + 1, 0
            eval_model = self._eval_model()
            weights = full_model_state(eval_model, sharded=self.fsdp and eval_model is self.wrapped)
            self._best_state = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
            if self.out_dir is not None and self.is_main:
                path = self._checkpoint_dir() / BEST_CHECKPOINT
                write_best_weights(path, self._best_state, state.epoch + 1, monitor, value)
        else:
            state.bad_epochs += 1
            if cfg.early_stopping_patience is not None and state.bad_epochs >= cfg.early_stopping_patience:
                state.stopped_early = True
        state.history.append(metrics)
        state.epoch += 1
        state.batches_done = 0
        if self.out_dir is not None:
            self.save_checkpoint()
            if self.is_main:
                self._write_epoch_logs(metrics)
        if cfg.progress and self.is_main:
            shown = {k: v for k, v in metrics.items() if k in ("train_loss", "train_acc", "val_loss", "val_acc")}
            summary = "  ".join(f"{k} {v:.4f}" for k, v in shown.items())
            tqdm.write(f"epoch {state.epoch}/{cfg.epochs}  {summary}  {metrics['train_samples_per_s']:.0f} samples/s")
        if state.stopped_early and self.is_main:
            log.info("early stopping: %s did not improve for %d epochs", monitor, state.bad_epochs)

    @torch.no_grad()
    def evaluate(self, dataset: Dataset, model: nn.Module | None = None) -> dict[str, float]:
        """Mean loss (and accuracy for classifiers) over ``dataset``; the EMA weights when
        ``ema_decay`` is set. Every process evaluates its shard and the sums are combined."""
        cfg = self.config
        model = model or self._eval_model()
        sampler = ShardSampler(dataset, self.world_size, self.rank)
        loader = build_loader(
            dataset, cfg.batch_size, sampler=sampler, collate_fn=self.collate_fn, num_workers=cfg.num_workers,
            pin_memory=self._pin_memory(), generator=torch.Generator().manual_seed(cfg.seed),
        )
        was_training = model.training
        model.eval()
        meter, seen = EpochMeter(), 0
        for batch in loader:
            batch = move_to_device(
                batch, self.device, non_blocking=self._pin_memory(), channels_last=self.config.channels_last
            )
            with self._autocast():
                out = self.eval_step_fn(model, batch)
            num = count_samples(batch)
            valid = max(min(num, sampler.num_valid - seen), 0)  # padded repeats at the end don't count
            seen += num
            if valid < num:
                out = take_first_samples(out, valid)
            meter.update(out.loss, valid, *count_correct(out), out.logs)
        meter.reduce()
        if was_training:
            self.train_mode(model)
        result = meter.result("x")
        return {k[2:]: v for k, v in result.items()}

    # -- checkpoints ---------------------------------------------------------------------------

    def save_checkpoint(self, path: str | os.PathLike | None = None) -> Path:
        """Write everything needed to continue exactly here (model, optimizer, scheduler,
        scaler, EMA, every process's RNG states, epoch and position in it) to ``path``
        (default out_dir/checkpoints/last.pt), atomically: the file is whole or absent."""
        path = Path(path) if path else self._checkpoint_dir() / LAST_CHECKPOINT
        self._tick()
        local = {"rng": rng_state(), "meter": self._meter.state_dict()}  # each process has its own
        if self.world_size > 1:
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, local)
        else:
            gathered = [local]
        model_state = full_model_state(self.wrapped, sharded=self.fsdp)
        optim_state = full_optimizer_state(self.wrapped, self.optimizer, sharded=self.fsdp)
        if self.is_main:
            write_checkpoint(
                path,
                model=model_state,
                optimizer=optim_state,
                scheduler=self.scheduler.state_dict() if self.scheduler is not None else None,
                scaler=self.scaler.state_dict(),
                ema=self.ema.state_dict() if self.ema is not None else None,
                processes=gathered,
                state=dataclasses.asdict(self.state),
                data=self._data_signature,
                config=dataclasses.asdict(self.config),
            )
        if self.world_size > 1:
            dist.barrier()
        return path

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a `save_checkpoint` file; training continues where it stopped."""
        budget = {key: getattr(self.config, key) for key in ("epochs", "max_steps")}
        payload = read_checkpoint(path, self._data_signature, budget)
        # under FSDP self.model is the sharded module itself (fully_shard works in place)
        load_full_state(self.model, self.optimizer, payload["model"], payload["optimizer"], sharded=self.fsdp)
        if self.scheduler is not None and payload["scheduler"] is not None:
            self.scheduler.load_state_dict(payload["scheduler"])
        self.scaler.load_state_dict(payload["scaler"])
        if self.ema is not None:
            if payload["ema"] is None:
                raise ValueError(f"{path} holds no EMA weights but ema_decay is set")
            self.ema.load_state_dict(payload["ema"])
        self.state = TrainState(**payload["state"])
        local = payload["processes"][self.rank]
        self._meter = EpochMeter()
        if self.state.batches_done:
            self._meter.load_state_dict(local["meter"])
        set_rng_state(local["rng"])

    def _tick(self) -> None:
        """Add the wall time since the last tick of this `fit` to ``state.elapsed_s``."""
        if self._ticked is not None:
            now = time.perf_counter()
            self.state.elapsed_s += now - self._ticked
            self._ticked = now

    def best_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The weights of the best epoch by ``monitor`` (EMA weights with ``ema_decay``)."""
        if self._best_state is None and self.out_dir is not None:
            best = self._checkpoint_dir() / BEST_CHECKPOINT
            if best.is_file():
                self._best_state = read_best_weights(best)
        return self._best_state

    def _resume_path(self) -> Path | None:
        resume = self.config.resume
        if not resume:
            return None
        if resume is True:
            path = self._checkpoint_dir() / LAST_CHECKPOINT
            if not path.is_file():
                if self.is_main:
                    log.info("no checkpoint at %s: starting a new run", path)
                return None
            return path
        path = Path(resume)
        if not path.is_file():
            raise FileNotFoundError(f"resume checkpoint {path} does not exist")
        return path

    def _checkpoint_dir(self) -> Path:
        if self.out_dir is None:
            raise ValueError("checkpoints need TrainConfig.out_dir (or an explicit path)")
        return self.out_dir / "checkpoints"

    # -- helpers -------------------------------------------------------------------------------

    def _eval_model(self) -> nn.Module:
        if self.ema is not None:
            return self.ema.module
        return self.wrapped if self.fsdp else self.model

    def train_mode(self, model: nn.Module | None = None) -> None:
        """Put the model in training mode, except frozen normalisation layers (eval mode:
        their running statistics don't move). `fit` calls it; call it before `train_step`."""
        model = model or self.model
        model.train()
        for module in model.modules():
            params = list(module.parameters(recurse=False))
            if isinstance(module, _NormBase) and params and not any(p.requires_grad for p in params):
                module.eval()

    def _autocast(self) -> contextlib.AbstractContextManager:
        precision = self.config.precision
        if precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)

    def _pin_memory(self) -> bool:
        return self.config.pin_memory if self.config.pin_memory is not None else self.device.type == "cuda"

    def _profiler(self) -> Any:
        if not self.config.profile:
            return None
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        trace_dir = self.out_dir / "profile"
        profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(trace_dir), worker_name=f"rank{self.rank}"),
            record_shapes=True,
        )
        profiler.start()
        return profiler

    # -- observability -------------------------------------------------------------------------

    def _open_logs(self, resumed: Path | None) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.out_dir / "train.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        self._log_handler = handler
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        config = json.dumps(to_json_types(dataclasses.asdict(self.config)))
        log.info("%s run: %s", "resumed" if resumed else "new", config)
        if self.config.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = self.state.global_step if resumed else None  # drop points logged after the checkpoint
            self._writer = SummaryWriter(str(self.out_dir / "tensorboard"), purge_step=purge)

    def _close_logs(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._log_handler is not None:
            log.removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    def _log_step(self, outputs: list[StepOutput], bar: tqdm) -> None:
        loss = sum(float(o.loss.detach()) for o in outputs) / len(outputs)
        if not math.isfinite(loss):
            raise FloatingPointError(
                f"the loss is {loss} at step {self.state.global_step}; lower the learning rate, "
                "clip gradients (clip_grad_norm) or train in bf16/fp32"
            )
        lr = self.optimizer.param_groups[0]["lr"]
        bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
        if self._writer is not None:
            step = self.state.global_step
            self._writer.add_scalar("step/train_loss", loss, step)
            self._writer.add_scalar("step/lr", lr, step)
            for key, value in outputs[-1].logs.items():
                self._writer.add_scalar(f"step/{key}", float(value), step)

    def _write_epoch_logs(self, metrics: dict[str, float]) -> None:
        history = self.state.history
        extra = {"monitor": self.monitor, "best_epoch": self.state.best_epoch, "best_metric": self.state.best_metric,
                 "stopped_early": self.state.stopped_early}
        write_history(history, self.out_dir, extra)
        if self._writer is not None:
            for key, value in metrics.items():
                if key not in ("epoch", "step"):
                    self._writer.add_scalar(f"epoch/{key}", value, int(metrics["epoch"]))
            self._writer.flush()
        if self.config.plot:
            plot_curves(history, self.out_dir / "curves.png")


def write_history(history: list[dict[str, float]], out_dir: Path, extra: Mapping[str, Any] | None = None) -> None:
    """metrics.csv (one row per epoch) and metrics.json (the history plus ``extra``), atomically."""
    columns = list(dict.fromkeys(k for row in history for k in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(history)
    write_bytes_atomic(out_dir / "metrics.csv", text.getvalue().encode())
    write_json({"history": history, **(extra or {})}, out_dir / "metrics.json")
