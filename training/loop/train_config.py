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
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from zoo.bounds import INT_MAX, SEED_MAX, WORKERS, Bounds, bounded, check_fields, count, field_name
from zoo.errors import InvalidArgumentError

OptionGroup = Any  # an argparse parser or argument group: what add_argument is called on
MAX_WORKERS = WORKERS.high  # data-loading processes at most (zoo.bounds.WORKERS)
MAX_LR = 1e3  # far above any learning rate that trains; a larger one only overflows


def option(
    section: str,
    help: str | None = None,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    bounds: Bounds | None = None,
) -> dict[str, Any]:
    """A field's metadata making it the command-line option ``flag`` (default ``--field-name``)
    in the help ``section``. A bool field is a switch: ``--flag`` sets True, or, for a field
    that defaults to True, a ``--no-...`` flag sets False (both flags for one unset by
    default, None). A number's ``bounds`` are checked
    when the option is parsed and when a TrainConfig is made."""
    return {"option": {"section": section, "help": help, "flag": flag, "metavar": metavar}, "bounds": bounds}


@dataclass
class TrainConfig:
    """Everything that decides how a model trains. ``batch_size`` is per process and per
    micro-batch: one optimizer step sees ``batch_size * accum_steps * world_size`` samples.
    Within each help section the options appear in field order."""

    epochs: int = field(default=10, metadata=option("optimisation", bounds=count()))
    # stop after this many optimizer steps (overrides epochs)
    max_steps: int | None = field(default=None, metadata=option("optimisation", bounds=count()))
    batch_size: int = field(default=64, metadata=option("optimisation", "per process and micro-batch", bounds=count()))
    accum_steps: int = field(default=1, metadata=option("optimisation", bounds=count()))
    # optimizer
    optimizer: Literal["adamw", "sgd"] = field(default="adamw", metadata=option("optimisation"))
    # "auto": a learning-rate range test on the run's first batches picks it (zoo.training.loop.lr_finder)
    lr: float | Literal["auto"] = field(
        default=1e-3,
        metadata=option(
            "optimisation",
            "a number, or auto: a range test on the first batches picks it (curve in OUT/lr_finder.png)",
            bounds=Bounds(0, MAX_LR, low_open=True, words=("auto",)),
        ),
    )
    # never applied to biases and normalisation weights
    weight_decay: float = field(default=0.05, metadata=option("optimisation", bounds=Bounds(0, 100)))
    momentum: float = field(default=0.9, metadata=option("optimisation", bounds=Bounds(0, 1, high_open=True)))  # SGD
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW, each in [0, 1)
    # schedule
    scheduler: Literal["none", "cosine", "onecycle", "step", "plateau"] = field(
        default="cosine", metadata=option("optimisation")
    )
    # linear warmup (cosine), or the rising part (onecycle)
    warmup_epochs: float = field(
        default=0.0, metadata=option("optimisation", bounds=Bounds(0, INT_MAX))
    )  # below epochs
    min_lr: float = field(default=0.0, metadata=option("optimisation", bounds=Bounds(0, MAX_LR)))  # cosine floor, <= lr
    # "step": multiply the lr by `gamma` every this many epochs
    step_epochs: float = field(default=30.0, metadata=bounded(Bounds(0, low_open=True)))
    gamma: float = field(default=0.1, metadata=bounded(Bounds(0, 1, low_open=True)))  # "step" and "plateau" factor
    # "plateau": epochs without improvement before lowering the lr
    plateau_patience: int = field(default=2, metadata=bounded(count(0)))
    # loss and gradients
    label_smoothing: float = field(default=0.0, metadata=option("optimisation", bounds=Bounds(0, 1, high_open=True)))
    clip_grad_norm: float | None = field(
        default=None,
        metadata=option(
            "optimisation", "clip the gradient norm to this", flag="--clip-grad", bounds=Bounds(0, 1e9, low_open=True)
        ),
    )
    # weights averaging, selection, stopping
    ema_decay: float | None = field(  # keep an EMA of the weights; it is evaluated and saved
        default=None,
        metadata=option(
            "optimisation",
            "evaluate and save an EMA of the weights, e.g. 0.999",
            flag="--ema",
            metavar="DECAY",
            bounds=Bounds(0, 1, low_open=True, high_open=True),
        ),
    )
    early_stopping_patience: int | None = field(  # epochs without improvement of `monitor`
        default=None,
        metadata=option(
            "optimisation",
            "stop after this many epochs without gain",
            flag="--early-stopping",
            metavar="PATIENCE",
            bounds=count(),
        ),
    )
    # metric that picks the best epoch; default val_acc/val_loss/train_loss
    monitor: str | None = field(
        default=None,
        metadata=option(
            "optimisation",
            "metric that picks the best epoch (default: val_acc for classes, val_loss for a regression or "
            "other steps, train_loss without validation data)",
        ),
    )
    # speed and memory
    # auto: the fastest of fp32/bf16/fp16 x channels_last x compile, measured at the start of
    # the run (zoo.training.loop.speed); fp16 (with a GradScaler) needs CUDA
    precision: Literal["auto", "fp32", "bf16", "fp16"] = field(
        default="auto",
        metadata=option("hardware", "auto: measure the candidates on the first batches, keep the fastest"),
    )
    # NHWC memory format for CNNs; None: auto measures it, a fixed precision leaves it off
    channels_last: bool | None = field(default=None, metadata=option("hardware"))
    # through the model's set_grad_checkpointing
    grad_checkpointing: bool = field(default=False, metadata=option("hardware"))
    compile: bool | None = field(  # None: as channels_last
        default=None, metadata=option("hardware", "torch.compile the model (default: auto measures it)")
    )
    compile_backend: str = "inductor"  # torch.compile backend ("eager", "aot_eager" to debug)
    # devices and processes
    # default: this process's GPU under torchrun, else cuda, else cpu
    device: str | None = field(  # the help as every zoo command's --device (zoo.cli.parser.DEVICE_HELP)
        default=None,
        metadata=option("hardware", "where the model runs: cpu, cuda or cuda:N (default: cuda if available, else cpu)"),
    )
    # auto: DDP when torchrun starts >1 process
    distributed: Literal["auto", "ddp", "fsdp"] = field(default="auto", metadata=option("hardware", "torchrun"))
    find_unused_parameters: bool = False  # DDP, for models that skip parameters (MoE experts)
    # run: seed, checkpoints, resume
    seed: int = field(default=0, metadata=option("run", bounds=count(0, SEED_MAX)))
    out_dir: str | None = None  # metrics, logs, plots, checkpoints/
    checkpoint_every: int | None = field(  # optimizer steps between mid-epoch checkpoints
        default=None, metadata=option("run", "also checkpoint every this many steps", metavar="STEPS", bounds=count())
    )
    # True: out_dir/checkpoints/last.pt if there; or a checkpoint path
    resume: bool | str = field(default=False, metadata=option("run", "continue from OUT/checkpoints/last.pt"))
    # observability
    # torch.profiler trace of a few steps into out_dir/profile
    profile: bool = field(default=False, metadata=option("run", "torch.profiler trace into OUT/profile"))
    tensorboard: bool = field(default=True, metadata=option("run"))
    # MLflow (zoo[track]): a folder, file: URI or server; params, epoch metrics, curves, card, model
    track: str | None = field(
        default=None,
        metadata=option(
            "run", "log the run to MLflow: a folder (./mlruns), file: URI or http://HOST:PORT", metavar="URI"
        ),
    )
    track_experiment: str | None = field(  # default "zoo"
        default=None, metadata=option("run", "the MLflow experiment of --track (default: zoo)", metavar="NAME")
    )
    progress: bool = field(default=True, metadata=option("run"))
    log_every: int = field(default=20, metadata=bounded(count()))  # optimizer steps between TensorBoard points
    plot: bool = True
    # data loading
    # None: measured at the start of a long enough run (0 unless loading a batch takes a share of a step)
    num_workers: int | None = field(
        default=None,
        metadata=option("data", "data-loading processes (default: measured)", bounds=WORKERS),
    )
    pin_memory: bool | None = None  # default: on with CUDA
    persistent_workers: bool = True  # with num_workers > 0

    def __post_init__(self) -> None:
        check_fields(self, "TrainConfig", _flags())
        for name, allowed in _choices().items():
            if getattr(self, name) not in allowed:
                raise InvalidArgumentError(
                    f"{_named(name)} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}"
                )
        for name, hint in _hints().items():  # a switch is a bool (or None, where unset means "measure")
            value, optional = getattr(self, name), set(typing.get_args(hint)) == {bool, type(None)}
            if (hint is bool or optional) and not (isinstance(value, bool) or (optional and value is None)):
                raise InvalidArgumentError(f"{_named(name)} must be True or False, got {value!r}")
        self._check_together()
        if (self.profile or self.checkpoint_every or self.resume) and self.out_dir is None:
            raise InvalidArgumentError(
                "profile, checkpoint_every and resume write to or read from out_dir: set TrainConfig.out_dir"
            )

    def for_epochs(self, epochs: int) -> TrainConfig:
        """This config over ``epochs`` epochs (a recipe's ``--epochs``): a warmup that would not
        end before the shorter run is cut to the same share of it."""
        warmup = self.warmup_epochs
        if warmup >= epochs:
            warmup *= epochs / self.epochs
        return dataclasses.replace(self, epochs=epochs, warmup_epochs=warmup)

    def _check_together(self) -> None:
        """The rules between fields: the cosine floor at most the learning rate, the warmup
        shorter than the run, AdamW's two betas in [0, 1)."""
        if self.lr != "auto" and self.min_lr > self.lr:  # auto: the finder's value is at least min_lr
            raise InvalidArgumentError(
                f"{_named('min_lr')} must be at most lr ({self.lr:g}), got {self.min_lr:g}: "
                "the schedule would raise the learning rate instead of lowering it"
            )
        if self.warmup_epochs >= self.epochs:
            raise InvalidArgumentError(
                f"{_named('warmup_epochs')} must be below epochs ({self.epochs}), "
                f"got {self.warmup_epochs:g}: the run would end before its learning rate is reached"
            )
        if isinstance(self.track, os.PathLike):  # a folder given as a Path
            self.track = os.fspath(self.track)
        for name in ("track", "track_experiment"):  # the URI's form: zoo.training.loop.records.tracking
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value.strip()):
                raise InvalidArgumentError(f"{_named(name)} must be a non-empty string or None, got {value!r}")
        if self.track_experiment is not None and self.track is None:
            raise InvalidArgumentError(
                f"{_named('track_experiment')} names the MLflow experiment of a tracked run: add --track URI (track=)"
            )
        beta = Bounds(0, 1, high_open=True)
        betas = self.betas if isinstance(self.betas, (tuple, list)) and len(self.betas) == 2 else None
        if betas is None or any(beta.problem(b) for b in betas):
            raise InvalidArgumentError(f"TrainConfig.betas must be two numbers in [0, 1), got {self.betas!r}")


@functools.cache
def _hints() -> dict[str, Any]:
    """TrainConfig's field types, resolved (the annotations are strings in this module)."""
    return typing.get_type_hints(TrainConfig)


@functools.cache
def _choices() -> dict[str, tuple[str, ...]]:
    """The values each ``Literal`` field allows: the checks of `TrainConfig` and the options' choices."""
    return {name: typing.get_args(hint) for name, hint in _hints().items() if typing.get_origin(hint) is Literal}


SCHEDULERS = _choices()["scheduler"]


@functools.cache
def _flags() -> dict[str, str]:
    """The command-line flag of each option field (what messages name besides the field)."""
    return {f.name: _argument(f)[0] for f in option_fields()}


def _named(name: str) -> str:
    """A field as messages name it: ``TrainConfig.lr (--lr)``."""
    return field_name("TrainConfig", name, _flags())


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


GIVEN = "_given_config_options"  # the Namespace attribute that lists the options a command line gave


class _Given(argparse.Action):
    """Stores an option's value (a switch's ``const``) and records that the command line gave
    it, so defaults that depend on the data (`given_options`) never override what a user typed."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        _record(namespace, self.dest)


class _GivenSwitch(argparse.BooleanOptionalAction):
    """``--flag`` / ``--no-flag``, recorded as given like `_Given`."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _record(namespace, self.dest)


def _record(namespace: argparse.Namespace, dest: str) -> None:
    setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {dest})


def given_options(args: argparse.Namespace) -> frozenset[str]:
    """The TrainConfig fields whose options the parsed command line gave explicitly."""
    return getattr(args, GIVEN, frozenset())


def _argument(f: dataclasses.Field) -> tuple[str, dict[str, Any]]:
    """The flag and ``add_argument`` keywords of the option of field ``f``."""
    spec, hint = f.metadata["option"], _hints()[f.name]
    own_flag = "--" + f.name.replace("_", "-")
    flag = spec["flag"] or (f"--no-{f.name.replace('_', '-')}" if f.default is True else own_flag)
    kwargs: dict[str, Any] = {"dest": f.name, "default": f.default, "action": _Given}
    if spec["help"]:
        kwargs["help"] = spec["help"]
    kind = _option_type(hint)
    if kind is bool:  # a switch; one left unset (None) by default has a --no- flag too
        kwargs |= {"nargs": 0, "const": f.default is not True}
        if f.default is None:
            del kwargs["nargs"], kwargs["const"]
            kwargs["action"] = _GivenSwitch
        return flag, kwargs
    if typing.get_origin(kind) is Literal:
        kwargs["choices"] = typing.get_args(kind)
    elif kind in (int, float):
        bounds = f.metadata.get("bounds")
        kwargs["type"] = bounds.parse if bounds is not None else kind
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


def check_trainer_arguments(model: Any, config: Any) -> None:
    """`zoo.training.Trainer`'s model and config, refused by type with what each takes."""
    import torch  # this module is read by the command line before torch is needed

    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(
            f"Trainer takes a model (a torch nn.Module), got {type(model).__name__}: Trainer(zoo.load(NAME), config)"
        )
    if config is not None and not isinstance(config, TrainConfig):
        hint = ": TrainConfig(**that_dict)" if isinstance(config, dict) else ""
        raise InvalidArgumentError(f"Trainer's config must be a TrainConfig, got {type(config).__name__}{hint}")
