"""One training loop for every model in the zoo: `Trainer` with a `TrainConfig`.

The batch -> loss computation is a small pluggable function (`zoo.training.loop.steps.StepFn`):
`ClassificationStep` by default, `DistillationStep`, or any function returning a `StepOutput`
(e.g. a contrastive-divergence step for DBN pretraining that sets the gradients itself).
Everything else is shared: the epoch loop, mixed precision (measured with ``precision="auto"``:
`zoo.training.loop.speed`), accumulation, clipping, EMA, early stopping, checkpoints with an
exact resume and the best weights. Its parts live beside it in `zoo.training.loop`: config,
optimizers, epochs, loaders, checkpoints, run logs, meter, torchrun's processes (DDP, FSDP2).

    trainer = Trainer(model, TrainConfig(epochs=10, lr=1e-3, precision="bf16", out_dir="run"), callbacks=[fn])
    trainer.fit(train_set, val_set)  # fn(trainer, metrics) after each epoch; trainer.should_stop = True ends it
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.modules.batchnorm import _NormBase
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from zoo.errors import CheckpointError, DataError, InvalidArgumentError
from zoo.training.loop.callbacks import Callback, checked_callbacks, run_callbacks
from zoo.training.loop.distributed import (
    average_gradients,
    gradient_sync,
    init_distributed,
    lost_peer,
    pick_device,
    use_fsdp,
    wrap_model,
)
from zoo.training.loop.epochs import Epochs, plan_epochs
from zoo.training.loop.loaders import ShardSampler, build_loader
from zoo.training.loop.lr_finder import find_lr
from zoo.training.loop.meter import EpochMeter, count_correct, count_samples, take_first_samples
from zoo.training.loop.optim import make_optimizer, make_scheduler, param_groups, start_lr
from zoo.training.loop.records.checkpoint import (
    BEST_CHECKPOINT,
    LAST_CHECKPOINT,
    TrainState,
    checkpoint_dir,
    full_model_state,
    full_optimizer_state,
    read_best_weights,
    read_checkpoint,
    restore_training,
    restoring,
    resume_checkpoint,
    rng_state,
    seed_everything,
    set_rng_state,
    write_best_weights,
    write_checkpoint,
)
from zoo.training.loop.records.run_logs import RunLogs, check_finite, start_profiler
from zoo.training.loop.records.tracking import tracked
from zoo.training.loop.speed import tune, use_setting
from zoo.training.loop.speed_settings import Setting
from zoo.training.loop.steps import (
    ClassificationStep,
    StepFn,
    StepOutput,
    check_manual_step,
    improves,
    monitor_name,
    move_to_device,
)
from zoo.training.loop.train_config import SCHEDULERS, TrainConfig, check_trainer_arguments

__all__ = ["SCHEDULERS", "TrainConfig", "TrainState", "Trainer", "param_groups"]

log = logging.getLogger(__name__)


class Trainer:
    """Trains ``model`` with ``config``; ``step_fn(model, batch) -> StepOutput`` computes
    the loss (default: `ClassificationStep`; it receives the model as wrapped for DDP/FSDP),
    ``eval_step_fn`` the validation one (default: a plain `ClassificationStep` for classification
    and distillation steps, else ``step_fn`` itself), ``lr_scale(name)`` multiplies each
    parameter's learning rate (see `param_groups`); each of ``callbacks``, ``fn(trainer, metrics)``,
    runs after every epoch's validation; setting ``trainer.should_stop = True`` ends the run there.

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
        callbacks: Sequence[Callback] | None = None,
    ) -> None:
        check_trainer_arguments(model, config)
        self.config = cfg = config or TrainConfig()
        self.callbacks, self.should_stop = checked_callbacks(callbacks), False
        self.step_fn = step_fn or ClassificationStep(label_smoothing=cfg.label_smoothing)
        if eval_step_fn is None and isinstance(self.step_fn, ClassificationStep):  # its subclasses too
            eval_step_fn = ClassificationStep(aux_loss_weight=self.step_fn.aux_loss_weight)
        self.eval_step_fn = eval_step_fn or self.step_fn
        self.collate_fn = collate_fn
        self.rank, self.world_size, local_rank = init_distributed()
        self.device = pick_device(cfg.device, local_rank)
        if cfg.precision == "fp16" and self.device.type != "cuda":
            raise InvalidArgumentError("precision='fp16' needs a CUDA device (it uses a GradScaler); use 'bf16' on CPU")
        self.setting = Setting()  # "auto" starts as fp32, measured when `fit` sees the data
        self.speed_report: Any = None  # what auto measured and chose (an OptimizeReport)
        self.lr_report: Any = None  # what lr="auto" swept and chose (an LRFinderReport)
        self.num_workers = cfg.num_workers or 0  # None: measured by `fit` (`zoo.training.loop.speed`)
        self.loading_note = ""  # how num_workers was chosen
        self.out_dir = Path(cfg.out_dir) if cfg.out_dir else None
        self.is_main = self.rank == 0
        self._place_model(model)
        groups = param_groups(model, start_lr(cfg), cfg.weight_decay, lr_scale)  # after wrapping: FSDP shards them
        self.optimizer = make_optimizer(groups, cfg, fused=self.device.type == "cuda" and not self.fsdp)
        self.scheduler: Any = None
        self.state, self._meter = TrainState(), EpochMeter()
        self._ticked: float | None = None  # perf_counter of the last `_tick`, while `fit` runs
        self._best_state: dict[str, torch.Tensor] | None = None
        self.logs = RunLogs(cfg, self.out_dir, log)
        self.monitor = monitor_name(cfg.monitor, self.eval_step_fn, has_val=False)
        self._data_signature: dict[str, int] | None = None

    # -- setup ---------------------------------------------------------------------------------

    def _place_model(self, model: nn.Module) -> None:
        """Put ``model`` on the device (gradient checkpointing as asked), start its EMA, run it
        under the precision asked (`zoo.training.loop.speed.use_setting`) and wrap it for DDP or FSDP: ``self.model``
        stays the bare module, whose state dict is what checkpoints hold; ``self.wrapped`` is
        what the steps call."""
        cfg = self.config
        model.to(self.device)
        if cfg.grad_checkpointing:
            if not hasattr(model, "set_grad_checkpointing"):
                raise InvalidArgumentError(
                    f"{type(model).__name__} has no set_grad_checkpointing(); turn grad_checkpointing off"
                )
            model.set_grad_checkpointing(True)
        self.model = model
        self.fsdp = use_fsdp(model, cfg.distributed, self.world_size)
        if self.fsdp and cfg.ema_decay is not None:
            raise InvalidArgumentError(
                "ema_decay is not supported with FSDP (the EMA would hold a full copy per process)"
            )
        self.ema = (
            AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema_decay), use_buffers=True)
            if cfg.ema_decay is not None
            else None
        )
        precision = "fp32" if cfg.precision == "auto" else cfg.precision
        use_setting(self, Setting(precision, bool(cfg.channels_last), bool(cfg.compile)))
        self.wrapped = wrap_model(model, self.world_size, self.fsdp, self.device, cfg.find_unused_parameters)

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
                batch, self.device, non_blocking=self._pin_memory(), channels_last=self.setting.channels_last
            )
            with gradient_sync(self.wrapped, last, self.world_size, self.fsdp), self.setting.autocast(self.device):
                out = self.step_fn(self.wrapped, batch)
            if out.loss.requires_grad:
                self.scaler.scale(out.loss / len(micro_batches)).backward()
            else:
                manual = True
            outputs.append(out)
            self._meter.update(out.loss, count_samples(batch), *count_correct(out), out.logs)
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        if manual:  # the step set .grad itself
            check_manual_step(len(micro_batches), self.setting.precision, self.fsdp)
            average_gradients(params, self.world_size)
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

    def fit(self, train_set: Dataset, val_set: Dataset | None = None) -> list[dict[str, float]]:
        """Train for ``config.epochs`` (or ``max_steps``), evaluating ``val_set`` after each
        epoch; returns the history (one dict of metrics per epoch)."""
        cfg = self.config
        if len(train_set) == 0:
            raise DataError("the training set is empty")
        epochs = plan_epochs(train_set, cfg, self.world_size, self.rank, self._loader)
        resumed = resume_checkpoint(cfg.resume, self.out_dir, announce=self.is_main)
        if cfg.precision == "auto" or cfg.num_workers is None:
            tune(self, epochs, train_set)
        self.lr_report = find_lr(self, epochs) if cfg.lr == "auto" and resumed is None else None  # resumed: its own
        self.monitor = monitor_name(cfg.monitor, self.eval_step_fn, val_set is not None)
        self.scheduler = make_scheduler(self.optimizer, cfg, epochs.steps_per_epoch, epochs.total_steps, self.monitor)
        self._data_signature = {"samples": len(train_set), "batch_size": cfg.batch_size, "world_size": self.world_size}
        if resumed is not None:
            self.load_checkpoint(resumed)
        else:
            seed_everything(cfg.seed + self.rank)
        state, self._ticked = self.state, time.perf_counter()
        if self.out_dir is not None and self.is_main:
            self.logs.open(resumed is not None, self.state.global_step)
        notes = {"precision auto": self.speed_report, "data loading": self.loading_note, "lr auto": self.lr_report}
        for name, note in [(name, note) for name, note in notes.items() if note and self.is_main]:
            log.info("%s: %s", name, note)
        profiler = start_profiler(self.out_dir, self.device, self.rank, log) if cfg.profile else None

        try:
            with tracked(self):  # TrainConfig.track: MLflow (zoo.training.loop.records.tracking), ended as the run ends
                while state.epoch < cfg.epochs and state.global_step < epochs.total_steps and not state.stopped_early:
                    elapsed, samples = self._train_epoch(epochs, profiler)
                    self._end_epoch(val_set, elapsed, samples)
        except RuntimeError as error:  # a process of the torchrun group is gone: one line, the checkpoint kept
            raise lost_peer(error, self.world_size, self.out_dir) or error  # noqa: B904 (else re-raised as it was)
        finally:
            self._ticked = None
            if profiler is not None:
                profiler.stop()
            self.logs.close()
        return self.state.history

    def _loader(self, dataset: Dataset, sampler: Any, generator: torch.Generator, **options: Any) -> Any:
        """A loader over ``dataset`` in this run's batch size, collation, workers and memory pinning."""
        cfg = self.config
        return build_loader(
            dataset,
            cfg.batch_size,
            sampler=sampler,
            collate_fn=self.collate_fn,
            num_workers=self.num_workers,
            pin_memory=self._pin_memory(),
            generator=generator,
            **options,
        )

    def _train_epoch(self, epochs: Epochs, profiler: Any) -> tuple[float, int]:
        """Train the current epoch (its rest, after a resume mid-epoch): optimizer steps over
        groups of ``accum_steps`` micro-batches, logged every ``log_every`` steps and
        checkpointed every ``checkpoint_every``; returns its wall time and samples."""
        cfg, epoch, batches = self.config, self.state.epoch, len(epochs.loader)
        epochs.sampler.set_epoch(epoch)
        epochs.sampler.skip = self.state.batches_done * cfg.batch_size
        epochs.generator.manual_seed(cfg.seed + epoch)  # worker seeds: a function of the epoch, not of a resume
        if self.state.batches_done == 0:
            self._meter = EpochMeter()
        self.train_mode()
        start = time.perf_counter()
        samples_before = self._meter.samples
        bar = tqdm(
            total=batches,
            initial=self.state.batches_done,
            desc=f"epoch {epoch + 1}/{cfg.epochs}",
            disable=not (cfg.progress and self.is_main),
            leave=False,
            dynamic_ncols=True,
        )
        group: list[Any] = []
        for batch in epochs.loader:
            group.append(batch)
            consumed = self.state.batches_done + len(group)
            if len(group) < cfg.accum_steps and consumed < batches:
                continue
            outputs = self.train_step(group)
            self.state.batches_done = consumed
            bar.update(len(group))
            group = []
            step = self.state.global_step
            if step % cfg.log_every == 0 or step == epochs.total_steps:
                self.logs.step(outputs, bar, step, self.optimizer.param_groups[0]["lr"])
            if profiler is not None:
                profiler.step()
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and consumed < batches:
                self.save_checkpoint()
            if step >= epochs.total_steps:
                break
        bar.close()
        return time.perf_counter() - start, self._meter.samples - samples_before

    def _end_epoch(self, val_set: Dataset | None, elapsed: float, samples: int) -> None:
        """Measure the epoch just trained, judge it by ``monitor`` (best weights, plateau
        schedule, early stopping), print it, run the callbacks, then checkpoint and log it."""
        cfg, state = self.config, self.state
        metrics = self._epoch_metrics(val_set, elapsed, samples)
        value = metrics[self.monitor]
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.scheduler.step(value)
        self._judge_epoch(metrics)
        state.history.append(metrics)
        state.epoch += 1
        state.batches_done = 0
        if cfg.progress and self.is_main:
            self.logs.show_epoch(metrics, state.epoch)
        by_callback = run_callbacks(self, metrics)  # trainer.should_stop: state.stopped_early, said in train.log
        if self.out_dir is not None:
            self.save_checkpoint()
            if self.is_main:
                best = {"best_epoch": state.best_epoch, "best_metric": state.best_metric}
                self.logs.epoch(state.history, {"monitor": self.monitor, **best, "stopped_early": state.stopped_early})
        if state.stopped_early and self.is_main and not by_callback:
            log.info("early stopping: %s did not improve for %d epochs", self.monitor, state.bad_epochs)

    def _epoch_metrics(self, val_set: Dataset | None, elapsed: float, samples: int) -> dict[str, float]:
        """The epoch's row of the history: training loss and accuracy over every process, speed,
        the validation metrics, and the wall time so far; ``monitor`` must be among them."""
        state = self.state
        self._meter.reduce()
        lr = self.optimizer.param_groups[0]["lr"]
        metrics: dict[str, float] = {"epoch": state.epoch + 1, "step": state.global_step, "lr": lr}
        metrics |= self._meter.result("train")
        metrics["train_samples_per_s"] = samples * self.world_size / elapsed if elapsed > 0 else 0.0
        metrics["epoch_time_s"] = elapsed
        if val_set is not None:
            metrics |= {f"val_{k}": v for k, v in self.evaluate(val_set).items()}
        for key, name in (("train_loss", "training loss"), ("val_loss", "validation loss")):
            if key in metrics:
                check_finite(name, metrics[key], f"the end of epoch {state.epoch + 1}")
        self._tick()
        metrics["elapsed_s"] = state.elapsed_s
        if self.monitor not in metrics:
            raise InvalidArgumentError(
                f"monitor {self.monitor!r} is not among the epoch's metrics: {', '.join(sorted(metrics))}"
            )
        return metrics

    def _judge_epoch(self, metrics: dict[str, float]) -> None:
        """The epoch improved on the best by ``monitor`` (`improves`): keep the weights; else count towards early stopping."""
        state, patience = self.state, self.config.early_stopping_patience
        best = next((row for row in state.history if row.get("epoch") == state.best_epoch), None)
        if state.best_metric is None or improves(self.monitor, metrics, best or {self.monitor: state.best_metric}):
            state.best_metric, state.best_epoch, state.bad_epochs = metrics[self.monitor], state.epoch + 1, 0
            self._keep_best(self._eval_model(), self.monitor, metrics[self.monitor])
        else:
            state.bad_epochs += 1
            state.stopped_early = state.stopped_early or (patience is not None and state.bad_epochs >= patience)

    @torch.no_grad()
    def evaluate(self, dataset: Dataset, model: nn.Module | None = None) -> dict[str, float]:
        """Mean loss (and accuracy for classifiers) over ``dataset``; the EMA weights when
        ``ema_decay`` is set, and its wall time (``time_s``). Every process evaluates its shard and the sums are combined."""
        started, model = time.perf_counter(), model or self._eval_model()
        sampler = ShardSampler(dataset, self.world_size, self.rank)
        loader = self._loader(dataset, sampler, torch.Generator().manual_seed(self.config.seed))
        was_training = model.training
        model.eval()
        meter, seen = EpochMeter(), 0
        for batch in loader:
            batch = move_to_device(
                batch, self.device, non_blocking=self._pin_memory(), channels_last=self.setting.channels_last
            )
            with self.setting.autocast(self.device):
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
        return {k[2:]: v for k, v in result.items()} | {"time_s": time.perf_counter() - started}

    # -- checkpoints ---------------------------------------------------------------------------

    def save_checkpoint(self, path: str | os.PathLike | None = None) -> Path:
        """Write everything needed to continue exactly here (model, optimizer, scheduler,
        scaler, EMA, every process's RNG states, epoch and position in it) to ``path``
        (default out_dir/checkpoints/last.pt), atomically: the file is whole or absent."""
        path = Path(path) if path else checkpoint_dir(self.out_dir) / LAST_CHECKPOINT
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
        payload = read_checkpoint(path, self._data_signature, budget)  # its layout checked
        if len(payload["processes"]) <= self.rank:
            raise CheckpointError(
                f"{path} was written by {len(payload['processes'])} processes, and this is rank {self.rank}"
            )
        restore_training(
            path,
            payload,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=self.scaler,
            ema=self.ema,
            sharded=self.fsdp,
        )
        self.state = TrainState(**{f.name: payload["state"][f.name] for f in dataclasses.fields(TrainState)})
        local = payload["processes"][self.rank]
        self._meter = EpochMeter()
        with restoring(path, f"processes[{self.rank}]"):
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
            best = checkpoint_dir(self.out_dir) / BEST_CHECKPOINT
            if best.is_file():
                self._best_state = read_best_weights(best)
        return self._best_state

    def _keep_best(self, eval_model: nn.Module, monitor: str, value: float) -> None:
        """The weights of the epoch just ended are the best so far: keep a CPU copy, and write
        checkpoints/best.pt (what `best_state_dict` reads after a resume)."""
        weights = full_model_state(eval_model, sharded=self.fsdp and eval_model is self.wrapped)
        self._best_state = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
        if self.out_dir is not None and self.is_main:
            path = checkpoint_dir(self.out_dir) / BEST_CHECKPOINT
            write_best_weights(path, self._best_state, self.state.epoch + 1, monitor, value)

    # -- helpers -------------------------------------------------------------------------------

    def _eval_model(self) -> nn.Module:
        """What evaluation runs: the EMA weights when kept, else the (FSDP-wrapped) model."""
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

    def _pin_memory(self) -> bool:
        """Pinned host memory for the loaders: the config's choice, else on with CUDA."""
        return self.config.pin_memory if self.config.pin_memory is not None else self.device.type == "cuda"
