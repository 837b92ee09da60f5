"""`TrainConfig`: everything that decides how a model trains, and the command-line options it
makes.

The fields the command line sets carry their option in their metadata (`option`: the help
section, the help text, a flag when the option is not named after the field, a metavar).
`add_config_options` and `config_from_args` walk ``dataclasses.fields(TrainConfig)``, so a
field declared with an `option` is on ``zoo finetune`` with its default, and with the values of
its ``Literal`` type as choices; fields without one (``betas``, ``log_every``, ...) are set from
Python only.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

OptionGroup = Any  # an argparse parser or argument group: what add_argument is called on


def option(
    section: str, help: str | None = None, *, flag: str | None = None, metavar: str | None = None
) -> dict[str, Any]:
    """A field's metadata making it the command-line option ``flag`` (default ``--field-name``)
    in the help ``section``. A bool field is a switch: ``--flag`` sets True, or, for a field
    that defaults to True, a ``--no-...`` flag sets False."""
    return {"option": {"section": section, "help": help, "flag": flag, "metavar": metavar}}


@dataclass
class TrainConfig:
    """Everything that decides how a model trains. ``batch_size`` is per process and per
    micro-batch: one optimizer step sees ``batch_size * accum_steps * world_size`` samples.
    Within each help section the options appear in field order."""

    epochs: int = field(default=10, metadata=option("optimisation"))
    # stop after this many optimizer steps (overrides epochs)
    max_steps: int | None = field(default=None, metadata=option("optimisation"))
    batch_size: int = field(default=64, metadata=option("optimisation", "per process and micro-batch"))
    accum_steps: int = field(default=1, metadata=option("optimisation"))
    # optimizer
    optimizer: Literal["adamw", "sgd"] = field(default="adamw", metadata=option("optimisation"))
    lr: float = field(default=1e-3, metadata=option("optimisation"))
    # never applied to biases and normalisation weights
    weight_decay: float = field(default=0.05, metadata=option("optimisation"))
    momentum: float = field(default=0.9, metadata=option("optimisation"))  # SGD
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW
    # schedule
    scheduler: Literal["none", "cosine", "onecycle", "step", "plateau"] = field(
        default="cosine", metadata=option("optimisation")
    )
    # linear warmup (cosine), or the rising part (onecycle)
    warmup_epochs: float = field(default=0.0, metadata=option("optimisation"))
    min_lr: float = field(default=0.0, metadata=option("optimisation"))  # cosine floor
    step_epochs: float = 30.0  # "step": multiply the lr by `gamma` every this many epochs
    gamma: float = 0.1  # "step" and "plateau" factor
    plateau_patience: int = 2  # "plateau": epochs without improvement before lowering the lr
    # loss and gradients
    label_smoothing: float = field(default=0.0, metadata=option("optimisation"))
    clip_grad_norm: float | None = field(
        default=None, metadata=option("optimisation", "clip the gradient norm to this", flag="--clip-grad")
    )
    # weights averaging, selection, stopping
    ema_decay: float | None = field(  # keep an EMA of the weights; it is evaluated and saved
        default=None,
        metadata=option(
            "optimisation", "evaluate and save an EMA of the weights, e.g. 0.999", flag="--ema", metavar="DECAY"
        ),
    )
    early_stopping_patience: int | None = field(  # epochs without improvement of `monitor`
        default=None,
        metadata=option(
            "optimisation", "stop after this many epochs without gain", flag="--early-stopping", metavar="PATIENCE"
        ),
    )
    # metric that picks the best epoch; default val_acc/val_loss/train_loss
    monitor: str | None = field(
        default=None, metadata=option("optimisation", "metric that picks the best epoch (default val_acc)")
    )
    # speed and memory
    # fp16 (with a GradScaler) needs CUDA
    precision: Literal["fp32", "bf16", "fp16"] = field(default="fp32", metadata=option("hardware"))
    channels_last: bool = field(default=False, metadata=option("hardware"))  # NHWC memory format for CNNs
    # through the model's set_grad_checkpointing
    grad_checkpointing: bool = field(default=False, metadata=option("hardware"))
    compile: bool = field(default=False, metadata=option("hardware", "torch.compile the model"))
    compile_backend: str = "inductor"  # torch.compile backend ("eager", "aot_eager" to debug)
    # devices and processes
    # default: this process's GPU under torchrun, else cuda, else cpu
    device: str | None = field(default=None, metadata=option("hardware", "default: cuda if available, else cpu"))
    # auto: DDP when torchrun starts >1 process
    distributed: Literal["auto", "ddp", "fsdp"] = field(default="auto", metadata=option("hardware", "torchrun"))
    find_unused_parameters: bool = False  # DDP, for models that skip parameters (MoE experts)
    # run: seed, checkpoints, resume
    seed: int = field(default=0, metadata=option("run"))
    out_dir: str | None = None  # metrics, logs, plots, checkpoints/
    checkpoint_every: int | None = field(  # optimizer steps between mid-epoch checkpoints
        default=None, metadata=option("run", "also checkpoint every this many steps", metavar="STEPS")
    )
    # True: out_dir/checkpoints/last.pt if there; or a checkpoint path
    resume: bool | str = field(default=False, metadata=option("run", "continue from OUT/checkpoints/last.pt"))
    # observability
    # torch.profiler trace of a few steps into out_dir/profile
    profile: bool = field(default=False, metadata=option("run", "torch.profiler trace into OUT/profile"))
    tensorboard: bool = field(default=True, metadata=option("run"))
    progress: bool = field(default=True, metadata=option("run"))
    log_every: int = 20  # optimizer steps between TensorBoard points
    plot: bool = True
    # data loading
    num_workers: int = field(default=0, metadata=option("data"))
    pin_memory: bool | None = None  # default: on with CUDA
    persistent_workers: bool = True  # with num_workers > 0

    def __post_init__(self) -> None:
        self._check_counts()
        for name, allowed in _choices().items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"TrainConfig.{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")
        if self.lr <= 0:
            raise ValueError(f"TrainConfig.lr must be > 0, got {self.lr}")
        if self.ema_decay is not None and not 0.0 < self.ema_decay < 1.0:
            raise ValueError(f"TrainConfig.ema_decay must be in (0, 1), e.g. 0.999; got {self.ema_decay}")
        if (self.profile or self.checkpoint_every or self.resume) and self.out_dir is None:
            raise ValueError(
                "profile, checkpoint_every and resume write to or read from out_dir: set TrainConfig.out_dir"
            )

    def _check_counts(self) -> None:
        """Counts are positive integers (the optional ones positive or None)."""
        for name in ("epochs", "batch_size", "accum_steps", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive integer, got {value!r}")
        for name in ("max_steps", "checkpoint_every", "early_stopping_patience"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"TrainConfig.{name} must be a positive integer or None, got {value!r}")


@functools.cache
def _hints() -> dict[str, Any]:
    """TrainConfig's field types, resolved (the annotations are strings in this module)."""
    return typing.get_type_hints(TrainConfig)


@functools.cache
def _choices() -> dict[str, tuple[str, ...]]:
    """The values each ``Literal`` field allows: the checks of `TrainConfig` and the options' choices."""
    return {name: typing.get_args(hint) for name, hint in _hints().items() if typing.get_origin(hint) is Literal}


SCHEDULERS = _choices()["scheduler"]


def option_fields(section: str | None = None) -> list[dataclasses.Field]:
    """The fields of TrainConfig that are command-line options (of one help ``section``), in field order."""
    return [
        f
        for f in dataclasses.fields(TrainConfig)
        if "option" in f.metadata and section in (None, f.metadata["option"]["section"])
    ]


def _option_type(hint: Any) -> Any:
    """The one non-None type of an optional hint (``int | None`` -> int); other hints as they are."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kinds = [t for t in typing.get_args(hint) if t is not type(None)]
        return bool if bool in kinds else kinds[0]
    return hint


def _argument(f: dataclasses.Field) -> tuple[str, dict[str, Any]]:
    """The flag and ``add_argument`` keywords of the option of field ``f``."""
    spec, hint = f.metadata["option"], _hints()[f.name]
    own_flag = "--" + f.name.replace("_", "-")
    flag = spec["flag"] or (f"--no-{f.name.replace('_', '-')}" if f.default is True else own_flag)
    kwargs: dict[str, Any] = {"dest": f.name, "default": f.default}
    if spec["help"]:
        kwargs["help"] = spec["help"]
    kind = _option_type(hint)
    if kind is bool:
        kwargs["action"] = "store_false" if f.default is True else "store_true"
        return flag, kwargs
    if typing.get_origin(kind) is Literal:
        kwargs["choices"] = typing.get_args(kind)
    elif kind in (int, float):
        kwargs["type"] = kind
    if spec["metavar"] or flag != own_flag:
        kwargs["metavar"] = spec["metavar"] or flag.lstrip("-").replace("-", "_").upper()
    return flag, kwargs


def add_config_options(
    group: OptionGroup, section: str, after: Mapping[str, Callable[[OptionGroup], None]] | None = None
) -> None:
    """Add the options of the TrainConfig fields of help ``section`` to ``group``, in field
    order; ``after[name](group)`` adds a caller's own options right after field ``name``'s."""
    for f in option_fields(section):
        flag, kwargs = _argument(f)
        group.add_argument(flag, **kwargs)
        if after and f.name in after:
            after[f.name](group)


def config_from_args(args: argparse.Namespace, **fields: Any) -> TrainConfig:
    """The TrainConfig of parsed options (`add_config_options`), with ``fields`` set on top."""
    return TrainConfig(**{f.name: getattr(args, f.name) for f in option_fields()}, **fields)
