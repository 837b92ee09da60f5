"""What ``zoo tune`` searches: `SEARCH_SPACE`, the fine-tuning settings as data, stated once.

Each `Param` is one Optuna distribution over one setting of ``zoo finetune`` (its keyword, or a
level that sets several: ``augment``), the keywords that, fixed by the user (``--epochs 5``),
take it out of the search, and when it applies (``stages`` only in partial mode, ``layer_decay``
only in full mode, ``augment`` only on images). `default_params` is zoo finetune's own choice
in the same terms: the study's first trial (or the settings a caller names, ``first``), so the
best trial is never worse than them on validation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from zoo.errors import InvalidArgumentError
from zoo.training.finetune.options import FinetuneOptions
from zoo.training.loop.train_config import TrainConfig

__all__ = ["AUGMENT_LEVELS", "SEARCH_SPACE", "Param", "active_space", "default_params", "sample", "trial_keywords"]

# Augmentation strength, one searched level: the zoo finetune flags each level sets (images only).
AUGMENT_LEVELS: dict[str, dict[str, Any]] = {
    "none": {},
    "light": {"crop_padding": 2},
    "medium": {"crop_padding": 4, "random_erasing": 0.25},
    "strong": {"crop_padding": 4, "random_erasing": 0.25, "trivial_augment": True},
}
AUGMENT_FLAGS = ("augment", "hflip", "crop_padding", "random_resized_crop", "color_jitter", "trivial_augment")
AUGMENT_FLAGS += ("random_erasing",)


@dataclass(frozen=True)
class Param:
    """One searched setting: ``kind`` "log" (log-uniform float), "float", "int" (with ``step``)
    or "choice" (``choices``); ``covers``: the keywords that fix it (default: its name);
    ``when``: whether it applies, given the settings sampled before it; ``images``: images only."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    step: int = 1
    choices: tuple[Any, ...] = ()
    covers: tuple[str, ...] = ()
    when: Callable[[Mapping[str, Any]], bool] | None = None
    images: bool = False

    def fixed_by(self, fixed: Mapping[str, Any]) -> bool:
        """Whether the user's fixed keywords set this setting (then it is not searched)."""
        return any(key in fixed for key in (self.covers or (self.name,)))

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is one this setting can take."""
        if self.kind == "choice":
            return value in self.choices
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and self.low <= value <= self.high and (self.kind != "int" or float(value).is_integer())

    def shown(self) -> str:
        """The range in words: ``one of 16, 32, 64`` or ``[0.0001, 0.01]``."""
        if self.kind == "choice":
            return "one of " + ", ".join(str(c) for c in self.choices)
        return f"[{self.low:g}, {self.high:g}]"

    def suggest(self, trial: Any) -> Any:
        """The trial's value (Optuna's ``suggest_*``)."""
        if self.kind == "log":
            return trial.suggest_float(self.name, self.low, self.high, log=True)
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high)
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=self.step)
        return trial.suggest_categorical(self.name, list(self.choices))


def _mode(*modes: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda chosen: chosen.get("mode", "full") in modes


_DEFAULT_LR = TrainConfig.lr if isinstance(TrainConfig.lr, float) else 1e-3
SEARCH_SPACE: tuple[Param, ...] = (
    Param("lr", "log", _DEFAULT_LR / 10, _DEFAULT_LR * 10),  # a decade either side of the default
    Param("epochs", "int", 5, 40, step=5, covers=("epochs", "max_steps")),
    Param("batch_size", "choice", choices=(16, 32, 64)),
    Param("mode", "choice", choices=("full", "partial", "linear-probe")),
    Param("stages", "int", 1, 3, when=_mode("partial")),  # high: the model's own count
    Param("layer_decay", "float", 0.5, 1.0, when=_mode("full")),  # 1.0: every stage at the same lr
    Param("augment", "choice", choices=tuple(AUGMENT_LEVELS), covers=AUGMENT_FLAGS, images=True),
)


def active_space(fixed: Mapping[str, Any], images: bool, stages: int | None = None) -> tuple[Param, ...]:
    """The settings searched, given the user's ``fixed`` keywords and the data (``images``);
    ``stages`` is the model's stage count (the most partial mode can unfreeze)."""
    space = []
    for param in SEARCH_SPACE:
        if param.fixed_by(fixed) or (param.images and not images):
            continue
        if param.name == "stages":
            if stages is not None and stages < 2:
                continue
            param = Param(**{**param.__dict__, "high": min(param.high, stages or param.high)})
        space.append(param)
    return tuple(space)


def sample(trial: Any, space: tuple[Param, ...], fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's settings, in the space's order (a conditional one only where it applies;
    the fixed mode counts for ``when``)."""
    chosen: dict[str, Any] = {}
    for param in space:
        if param.when is None or param.when({**fixed, **chosen}):
            chosen[param.name] = param.suggest(trial)
    return chosen


def trial_keywords(params: Mapping[str, Any]) -> dict[str, Any]:
    """The `zoo.finetune` keywords of sampled settings: ``augment`` as its flags, a layer decay
    of 1.0 as none."""
    keywords = {k: v for k, v in params.items() if k != "augment"}
    if "augment" in params:
        keywords |= AUGMENT_LEVELS[params["augment"]]
    if keywords.get("layer_decay") == 1.0:
        del keywords["layer_decay"]
    return keywords


def default_params(
    space: tuple[Param, ...], fixed: Mapping[str, Any], first: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """zoo finetune's defaults as settings of ``space`` (its first trial), with ``first``'s values
    over them: a conditional setting left out where it does not apply (with the ``fixed``
    keywords). A setting of ``first`` the space does not search, or outside its range, is refused."""
    config, options, first = TrainConfig(), FinetuneOptions(), dict(first or {})
    defaults: dict[str, Any] = {
        "lr": _DEFAULT_LR,
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "mode": options.mode,
        "stages": options.stages,
        "layer_decay": 1.0,
        "augment": "none",
    }
    by_name = {param.name: param for param in space}
    for key, value in first.items():
        if key not in by_name:
            raise InvalidArgumentError(
                f"first trial (--first): {key!r} is not searched here; it takes {', '.join(by_name) or 'nothing'}"
            )
        if not by_name[key].holds(value):
            raise InvalidArgumentError(f"first trial (--first): {key} {value!r} is outside {by_name[key].shown()}")
    chosen: dict[str, Any] = {}
    for param in space:
        if param.when is None or param.when({**fixed, **chosen}):
            chosen[param.name] = first.get(param.name, defaults[param.name])
    return chosen
