"""``zoo tune NAME --data D --out O --trials N`` (``zoo.tune`` from Python): an Optuna search over
the settings of ``zoo finetune`` (`zoo.training.tuning.tune_space`), each trial one run of
`zoo.finetune` with the trial's keywords, bad trials pruned after their early epochs.

The objective is the best epoch's validation metric of a run, the metric ``zoo finetune`` picks
its best epoch by for the task: ``val_acc`` maximised for classes, ``val_loss`` minimised for a
regression, ``val_map`` maximised for multi-label (``monitor=`` another, as zoo finetune's
``--monitor``; each trial picks its best epoch by it too). Each epoch reports the
run's best value so far to the pruner (Optuna's median pruner, or successive halving), and a
trial it prunes stops after that epoch and is recorded PRUNED. Every trial trains with the same
seed (``seed=``, default 0): the same validation hold-out, and two trials differ by their settings
only; the sampler (TPE) is seeded too, so a study is reproducible. The first trial is zoo
finetune's defaults. The settings given as keywords (``epochs=5``) are fixed, not searched.

OUT holds ``study.db`` (Optuna's SQLite storage: the same call again continues the study, up to
``trials`` finished trials in all), ``trials/NNN/`` (each trial's run folder, as zoo finetune
writes it), ``best/`` (a copy of the best trial's folder: ``zoo.load(OUT/best)``), ``trials.png``
(`zoo.training.tuning.tune_report`) and ``tune.json`` (the best trial, its settings and value).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import inspect
import json
import os
import shutil
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from torch.utils.data import Dataset

from zoo.bounds import Bounds, add_renamed, count
from zoo.errors import InvalidArgumentError, ZooError
from zoo.store import download
from zoo.store.files import check_folder
from zoo.training import finetune as finetune_package
from zoo.training.finetune import finetuning
from zoo.training.finetune import keywords as finetune_keywords
from zoo.training.finetune.options import json_object
from zoo.training.finetune.stages import parameter_levels
from zoo.training.loop.records.tracking import check_tracking
from zoo.training.loop.steps import higher_is_better
from zoo.training.loop.train_config import GIVEN, TrainConfig
from zoo.training.tuning import tune_report, tune_study
from zoo.training.tuning.tune_space import Param, active_space, default_params, sample, trial_keywords
from zoo.training.tuning.tune_study import STUDY_NAME, StudyFileError, changes, check_storage, plain, setup

__all__ = ["INSTALL_HINT", "PRUNERS", "TuneResult", "add_arguments", "run", "tune"]

INSTALL_HINT = "pip install 'zoo[tune]'"
STUDY_FILE, BEST_DIR = "study.db", "best"
PRUNERS = ("median", "halving", "none")
TRIALS = count(1, 100_000)
TIMEOUT = Bounds(0, 10 * 365 * 86_400, low_open=True)  # seconds
TUNE_OWNS = ("out", "overwrite", "resume")  # what tune sets for each trial itself


class TuneExtraMissingError(ZooError, ImportError):
    """zoo tune needs Optuna, the optional extra ``zoo[tune]``."""


@dataclass
class TuneResult:
    """A study's outcome: the best trial's settings (searched ones), its value of ``metric``, its
    run folder (``out/best``, a copy of ``out/trials/NNN``) and the Optuna study itself."""

    best_params: dict[str, Any]
    best_value: float
    metric: str
    direction: str
    best_out: Path
    best_trial: int
    out: Path
    study: Any


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise TuneExtraMissingError(f"zoo tune searches with Optuna, which is not installed: {INSTALL_HINT}") from None
    return optuna


def tune(
    name: str,
    data: str | os.PathLike | Dataset,
    out: str | os.PathLike,
    trials: int = 20,
    timeout: float | None = None,
    *,
    pruner: str = "median",
    metric: str | None = None,
    first: Mapping[str, Any] | None = None,
    **fixed: Any,
) -> TuneResult:
    """Search zoo finetune's settings for NAME on ``data`` (see the module docstring): at most
    ``trials`` finished trials in the study at ``out`` (a new or empty folder, or a study this
    wrote: it continues), no new trial after ``timeout`` seconds; ``pruner`` "median", "halving"
    or "none"; ``metric`` a validation metric (default: the task's); ``first`` the first trial's
    settings (searched ones, e.g. ``{"lr": 3e-3, "epochs": 30}``; the others zoo finetune's
    defaults); ``fixed`` are `zoo.finetune` keywords every trial gets, not searched."""
    optuna = _optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is zoo tune's own
    trials, timeout = _checked_budget(trials, timeout)
    if pruner not in PRUNERS:
        raise InvalidArgumentError(f"pruner (--pruner) must be one of {', '.join(PRUNERS)}, got {pruner!r}")
    _check_fixed(fixed)
    out = Path(out)
    _check_out(out)
    check_tracking(fixed.get("track"))  # MLflow there, its server answering: before the study is written
    task = _task(name, data, fixed, _the_metric(metric, fixed))
    seed = int(fixed.get("seed", 0))
    identity = setup(name, data, fixed, task["metric"], pruner)
    space = active_space(fixed, task["images"], task["stages"])
    start = default_params(space, fixed, first)  # checked before the study is written
    with _study_lock(out):  # one zoo tune at a time on a study
        study, resumed = _open_study(optuna, out, identity, task["direction"], trials, pruner, seed)
        if resumed:
            tune_study.check_best(
                study, out, out / BEST_DIR
            )  # rebuilt at the end: from trials/NNN, which must be there
        if space and not tune_study.first_ran(study):  # new, or its first trial cut off (Ctrl-C, an error)
            study.enqueue_trial(start, user_attrs={"default": "first" if first else "defaults"})
        runner = _Trials(optuna, name, data, out, space, fixed, task, seed)
        done = _finished(optuna, study)
        _say_start(out, study, resumed, done, trials, task, space, fixed)
        if trials > done:
            with _tracking(name, fixed, identity) as parent, _quiet(optuna):
                study.optimize(runner, n_trials=trials - done, timeout=timeout, callbacks=[runner.after_trial])
                return _finish(study, out, task, parent)
        if resumed:
            print(f"zoo tune: the study has {done} finished trials already (--trials {trials}): pass more to go on")
        return _finish(study, out, task, None)


@contextlib.contextmanager
def _study_lock(out: Path) -> Iterator[None]:
    """Hold OUT's study for this process: a second zoo tune on it is refused, naming the first
    (two would mark each other's running trials as failed). The lock lives in zoo's cache, keyed
    by OUT's resolved path, so OUT holds only the study's own files."""
    key = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:32]
    locks = download._subdir("locks", "tune")
    lock, holder = FileLock(locks / f"{key}.lock", timeout=0), locks / f"{key}.pid"
    try:
        lock.acquire()
    except Timeout:
        pid = holder.read_text(errors="replace").strip()[:20] if holder.is_file() else "?"
        raise InvalidArgumentError(
            f"--out {out} is in use by another zoo tune (process {pid}): wait for it to end, or pass another --out"
        ) from None
    try:
        holder.write_text(str(os.getpid()))
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()


def _checked_budget(trials: Any, timeout: Any) -> tuple[int, float | None]:
    """``trials`` and ``timeout`` checked by their bounds (the CLI's ``type=`` checks them as parsed)."""
    if problem := TRIALS.problem(trials):
        raise InvalidArgumentError(f"zoo tune: trials (--trials) {problem}, got {trials!r}")
    if timeout is not None and (problem := TIMEOUT.problem(timeout)):
        raise InvalidArgumentError(f"zoo tune: timeout (--timeout, seconds) {problem}, got {timeout!r}")
    return int(trials), None if timeout is None else float(timeout)


def _check_fixed(fixed: Mapping[str, Any]) -> None:
    """Refuse, before anything runs, a fixed keyword zoo.finetune does not take (by name, with the
    close ones), one tune sets itself, or a value zoo.finetune would refuse."""
    for key in fixed:
        if key in TUNE_OWNS:
            raise InvalidArgumentError(
                f"zoo tune writes each trial's folder under OUT/{tune_report.TRIALS_DIR} itself: drop {key}= (--{key})"
            )
        if key not in finetune_keywords.KEYWORDS:
            close = difflib.get_close_matches(key, sorted(finetune_keywords.KEYWORDS), n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(f'{c}=' for c in close)}? " if close else ""
            raise InvalidArgumentError(
                f"zoo.tune() got an unknown keyword {key}=: {hint}(its fixed settings are zoo.finetune's keywords, "
                "zoo finetune's long flags with _ for -; `zoo tune --help` lists them)"
            )
    fields = finetune_keywords._by_field(fixed)  # the values zoo.finetune would refuse, refused now
    TrainConfig(**{k: v for k, v in fields.items() if k in finetune_keywords.TRAIN_FIELDS})
    finetune_keywords._options(fields)


def _check_out(out: Path) -> None:
    """OUT is new, empty, or a study zoo tune wrote (its study.db), and writable: never another
    folder's files."""
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"--out {out} is a file: zoo tune writes a folder there; pass a new folder")
    check_folder(out)
    if out.is_dir() and any(out.iterdir()) and not (out / STUDY_FILE).is_file():
        raise InvalidArgumentError(
            f"--out {out} holds files and no zoo tune study ({STUDY_FILE}): pass a new or empty folder "
            "(zoo tune continues only its own studies and removes nothing)"
        )


def _the_metric(metric: str | None, fixed: Mapping[str, Any]) -> str | None:
    """The one metric of a study: ``metric`` (``--metric``, an older name) or the ``monitor``
    fixed for every trial (``--monitor``, zoo finetune's name); both, and different, is refused."""
    monitor = fixed.get("monitor")
    if metric is not None and monitor is not None and metric != monitor:
        raise InvalidArgumentError(
            f"--metric {metric} and --monitor {monitor} name one thing in zoo tune (the metric each run picks its "
            "best epoch by, and trials are compared on): pass --monitor alone"
        )
    return metric or monitor


def _task(name: str, data: Any, fixed: Mapping[str, Any], metric: str | None) -> dict[str, Any]:
    """What the data asks of the search, read as zoo.finetune reads it: the metric and its
    direction, whether it holds images, the model's stage count (the most partial mode frees)."""
    fields = finetune_keywords._by_field(fixed)
    options = finetune_keywords._options(fields)
    resolved = finetuning.resolved_name(name)
    source = finetuning.open_run_data(data, options, name, resolved)
    if options.val_data is None and options.val_fraction == 0:
        raise InvalidArgumentError("zoo tune compares trials on validation data: drop val_fraction=0 (--val-fraction)")
    partial, model = "mode" not in fixed or fixed["mode"] == "partial", None
    if partial or metric == tune_study.AUX_METRIC:  # its stages; whether it reports an auxiliary loss
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a bare architecture's warning: the trials say it
            model, _ = finetune_package.load_for_data(name, source, False, options.model_kwargs, resolved)
    kind = "regression" if source.target is not None else "multi-label" if source.multi_label else "classification"
    aux = model is not None and "return_aux" in inspect.signature(model.forward).parameters
    metric = tune_study.check_metric(metric, kind, aux)  # before any trial or folder: a typo leaves nothing behind
    stages = None
    if partial:
        try:
            stages = parameter_levels(model)[1]
        except ZooError:
            stages = 1
    direction = "maximize" if higher_is_better(metric) else "minimize"
    return {"metric": metric, "direction": direction, "images": source.kind == "images", "stages": stages}


def _open_study(
    optuna: Any, out: Path, identity: dict[str, Any], direction: str, trials: int, pruner: str, seed: int
) -> tuple[Any, bool]:
    """The study in OUT/study.db (created, or loaded when there: then the same setup is asked
    for); a trial a stopped run left RUNNING is marked failed."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / STUDY_FILE
    resumed = path.is_file()
    if resumed:
        check_storage(path)  # read-only: another file is refused before Optuna writes to it
    try:
        study = optuna.create_study(
            study_name=STUDY_NAME, storage=f"sqlite:///{path.resolve()}", direction=direction, load_if_exists=True
        )
    except Exception as error:  # sqlalchemy's, Optuna's: a storage it cannot use
        first = (str(error).strip().splitlines() or [""])[0][:200]
        raise StudyFileError(
            f"{path}: Optuna cannot open it as a study ({type(error).__name__}: {first}); pass another --out"
        ) from None
    if resumed and (changed := changes(study.user_attrs.get("setup"), identity)):
        raise InvalidArgumentError(
            f"--out {out} holds a study of another setup ({changed}): continue it with the same command, "
            "or pass another --out"
        )
    if not resumed:
        study.set_user_attr("setup", identity)
    for stale in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(stale.number, state=optuna.trial.TrialState.FAIL)
        print(f"zoo tune: trial {stale.number} was cut off by a stopped run: marked failed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # multivariate, group
        study.sampler = optuna.samplers.TPESampler(
            n_startup_trials=max(3, min(10, trials // 3)),
            seed=seed * 10_007 + len(study.trials),  # a continued study draws new settings
            multivariate=True,
            group=True,
        )
    study.pruner = _pruner(optuna, pruner)
    return study, resumed


@contextlib.contextmanager
def _quiet(optuna: Any) -> Any:
    """Optuna's log at ERROR while trials run: a trial Ctrl-C or an error stops is marked failed
    (the next run resumes), and said once by zoo, without Optuna's warning and traceback."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


def _pruner(optuna: Any, pruner: str) -> Any:
    """Median: below the median of earlier trials at the same epoch, from epoch 3 on, once 3
    trials finished; halving: successive halving from epoch 3, a third kept at each rung."""
    if pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=3)
    if pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=3, reduction_factor=3)
    return optuna.pruners.NopPruner()


def _finished(optuna: Any, study: Any) -> int:
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def _say_start(
    out: Path, study: Any, resumed: bool, done: int, trials: int, task: dict[str, Any], space: Any, fixed: Any
) -> None:
    """The first lines: a new or continued study, its objective, what is searched and fixed."""
    verb = f"continuing the study in {out / STUDY_FILE} ({done} trials finished)" if resumed else "new study"
    goal = "maximise" if task["direction"] == "maximize" else "minimise"
    print(f"zoo tune: {verb}; {trials} trials in all; objective: {goal} {task['metric']} (best epoch, validation)")
    searched = ", ".join(p.name for p in space) or "nothing (every setting fixed)"
    kept = ", ".join(f"{k}={plain(v)}" for k, v in fixed.items()) or "none"
    print(f"zoo tune: searching {searched}; fixed: {kept}")


class _Pruning:
    """The Trainer callback of a trial: report the run's best value so far after each epoch;
    when the pruner says so, stop the run after this epoch (then the trial is PRUNED)."""

    def __init__(self, trial: Any, metric: str, maximise: bool) -> None:
        self.trial, self.metric, self.maximise = trial, metric, maximise
        self.best: float | None = None
        self.pruned_at: int | None = None

    def __call__(self, trainer: Any, metrics: dict[str, float]) -> None:
        if self.metric not in metrics:
            shown = ", ".join(k for k in metrics if k.startswith("val_"))
            raise InvalidArgumentError(f"--monitor {self.metric}: the runs report {shown}; pass one of them")
        value = float(metrics[self.metric])
        if self.best is None or (value > self.best if self.maximise else value < self.best):
            self.best = value
        epoch = int(metrics["epoch"])
        self.trial.report(self.best, epoch)
        if self.trial.should_prune():
            self.pruned_at, trainer.should_stop = epoch, True


class _Trials:
    """The objective: one zoo.finetune run per trial into OUT/trials/NNN; after each trial, its
    progress line and, for a new best, OUT/best."""

    def __init__(self, optuna: Any, name: str, data: Any, out: Path, space: tuple[Param, ...], fixed: Any, task: Any,
                 seed: int) -> None:  # fmt: skip
        self.optuna, self.name, self.data, self.out, self.space = optuna, name, data, out, space
        self.fixed, self.task, self.seed = dict(fixed), task, seed
        self.started = time.perf_counter()

    def keywords(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's zoo.finetune keywords: quiet, no post-training, the study's seed and metric as
        its monitor, unless fixed."""
        quiet = {"progress": False, "post_training": False, "seed": self.seed, "monitor": self.task["metric"]}
        taken = {finetune_keywords.RENAMED.get(k, (k, False))[0] for k in self.fixed}
        return {**{k: v for k, v in quiet.items() if k not in taken}, **self.fixed, **trial_keywords(params)}

    def __call__(self, trial: Any) -> float:
        params = sample(trial, self.space, self.fixed)
        folder = tune_report.trial_folder(self.out, trial.number)
        pruning = _Pruning(trial, self.task["metric"], self.task["direction"] == "maximize")
        trial.set_user_attr("out", folder.relative_to(self.out).as_posix())  # shown only: the number finds it
        trial.set_user_attr("seed", self.seed)
        start = time.perf_counter()
        result = finetune_keywords.finetune(self.name, self.data, folder, callbacks=[pruning], **self.keywords(params))
        trial.set_user_attr("seconds", round(time.perf_counter() - start, 1))
        trial.set_user_attr("best_epoch", result.metrics.get("epoch"))
        if pruning.pruned_at is not None:
            trial.set_user_attr("pruned_at", pruning.pruned_at)
            raise self.optuna.TrialPruned(f"pruned after epoch {pruning.pruned_at}")
        return float(result.metrics[self.task["metric"]])

    def after_trial(self, study: Any, trial: Any) -> None:
        """The trial's progress line; OUT/best follows a new best trial."""
        if trial.state == self.optuna.trial.TrialState.COMPLETE and _best(study) is not None:
            if _best(study).number == trial.number:
                _save_best(self.out, trial)
        print(tune_report.trial_line(study, trial, self.task["metric"]), flush=True)


def _best(study: Any) -> Any:
    try:
        return study.best_trial
    except ValueError:  # no trial completed
        return None


def _save_best(out: Path, trial: Any) -> None:
    """OUT/best: a copy of the trial's run folder (written aside, then put in place)."""
    fresh, best = out / f".{BEST_DIR}.new", out / BEST_DIR
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(tune_report.trial_folder(out, trial.number), fresh, symlinks=True)
    shutil.rmtree(best, ignore_errors=True)
    fresh.rename(best)
    tune_report.write_summary(out, trial)


def _tracking(name: str, fixed: Mapping[str, Any], identity: dict[str, Any]) -> Any:
    """With ``track=``: the study as an MLflow parent run, each trial's run its child."""
    if fixed.get("track") is None:
        return contextlib.nullcontext()
    from zoo.training.loop.records.tracking import parent_run

    params = {"zoo_tune": json.dumps(identity)}
    return parent_run(fixed["track"], experiment=fixed.get("track_experiment"), run_name=f"zoo tune {name}",
                      params=params)  # fmt: skip


def _finish(study: Any, out: Path, task: dict[str, Any], parent: Any) -> TuneResult:
    """The plot, the best folder in place, the closing line and the result; with a ``parent``
    MLflow run, the best trial's value and settings and the plot logged to it."""
    best = _best(study)
    plot = tune_report.plot_trials(study, out / tune_report.PLOT_FILE, task["metric"])
    if parent is not None and best is not None:
        parent.log_params({f"best_{k}": v for k, v in best.params.items()} | {"best_trial": best.number})
        parent.log_metrics({f"best_{task['metric']}": best.value, "trials": len(study.trials)}, best.number)
        parent.log_artifact(plot)
    if best is None:
        raise InvalidArgumentError(
            f"zoo tune: no trial of the study in {out} completed (each was pruned or failed): run it again with "
            "more --trials or --timeout"
        )
    if not (out / BEST_DIR).is_dir() or tune_report.summary_trial(out) != best.number:
        _save_best(out, best)
    print(
        f"zoo tune: best trial {best.number}: {task['metric']} {best.value:.4f} with "
        f"{tune_report.settings(best.params)}; model in {out / BEST_DIR} (zoo.load('{out / BEST_DIR}')); plot {plot}"
    )
    return TuneResult(
        dict(best.params), float(best.value), task["metric"], task["direction"], out / BEST_DIR, best.number, out,
        study,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Command line

SEARCH_OPTIONS = ("trials", "timeout", "pruner", "first")
OWN = ("name", "data", "out", *SEARCH_OPTIONS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``zoo tune``'s options: the search's own, and zoo finetune's, each one given fixed for
    every trial (not searched); none of those has a default here: only what is typed counts."""
    parser.description = (
        "Search zoo finetune's settings (lr, epochs, batch size, mode and stages, layer decay, augmentation) "
        "with Optuna. Each zoo finetune flag given here is fixed for every trial, not searched. OUT holds "
        "study.db (the same command again continues it), trials/NNN, best/ (zoo.load it) and trials.png."
    )
    finetune_package.add_arguments(parser)
    g = parser.add_argument_group("search")
    g.add_argument("--trials", type=TRIALS.parse, default=20, help="finished trials in the study, in all (default 20)")
    g.add_argument("--timeout", type=TIMEOUT.parse, metavar="SECONDS", help="start no trial after this long")
    g.add_argument("--pruner", choices=PRUNERS, default="median", help="stop bad trials after their early epochs")
    monitor = next(action for action in parser._actions if action.dest == "monitor")
    add_renamed(g, "--metric", monitor)  # --monitor's older name in zoo tune, kept for a release
    g.add_argument(
        "--first",
        type=json_object('{"lr": 0.003}'),
        metavar="JSON",
        help="the first trial's settings, e.g. '{\"lr\": 0.003, \"epochs\": 30}' (default: zoo finetune's defaults)",
    )
    for action in parser._actions:  # argparse has no public way to list them; set_defaults would type-convert
        if action.dest not in (*OWN, "help"):
            action.default = argparse.SUPPRESS


def fixed_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The zoo finetune flags a parsed zoo tune command line typed, as zoo.finetune keywords."""
    skipped = {*OWN, "command", "command_line", GIVEN}
    return {dest: value for dest, value in vars(args).items() if dest not in skipped}


def run(args: argparse.Namespace) -> TuneResult:
    """zoo tune from parsed `add_arguments` options: the finetune flags typed are fixed keywords."""
    fixed = fixed_from_args(args)
    return tune(args.name, args.data, args.out, args.trials, args.timeout, pruner=args.pruner, first=args.first,
                **fixed)  # fmt: skip
