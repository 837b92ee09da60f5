"""Runs logged to MLflow: ``TrainConfig.track`` (``zoo finetune --track URI``, ``zoo.finetune(...,
track=URI)``, ``Trainer(model, TrainConfig(track=URI))``). MLflow is the optional extra
``zoo[track]`` and is imported only when a run is tracked; without it, one line names the extra.

Where (``URI``): ``http://HOST:PORT`` or ``https://...``, a tracking server (``mlflow server``),
checked before anything trains (`CONNECT_TIMEOUT_S`); a database MLflow reads
(``sqlite:///runs.db``, ``postgresql://...``); or a folder (``./mlruns``, ``file:///...``), which
holds MLflow's local store: a SQLite database ``mlflow.db`` with the artifacts in ``artifacts/``
(``mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db`` browses it), marked as zoo's by
`STORE_MARK`; a folder whose ``mlflow.db`` zoo did not make (MLflow 3's default store is one in
the working folder) is refused, naming the ``sqlite:///`` URI that logs into it, so zoo never
writes into a database the user did not name; a folder that already is an MLflow file store
(MLflow 2's ``mlruns`` layout) is used as one. The experiment is
``TrainConfig.track_experiment`` (default `DEFAULT_EXPERIMENT`).

What a run logs: its `TrainConfig` as params; after each epoch's validation every metric of the
epoch's row (``train_loss``, ``val_acc``, ``lr``, ...) with step = the epoch (`EpochLogger`, a
`zoo.training.loop.callbacks` callback); a Trainer's own run adds curves.png and metrics.json at
its end. ``zoo finetune`` opens the run itself around the Trainer (`zoo.training.finetune.mlflow_run`)
and adds the model, the data, the card and the model as an MLflow model. A run ends FINISHED,
FAILED (an error) or KILLED (Ctrl-C), never left RUNNING. Under torchrun only rank 0 logs.
TensorBoard is written as before.

Nested runs (a search, ``zoo tune``): inside `parent_run` every run tracked to the same URI is
its child (tag ``mlflow.parentRunId``), in the parent's experiment unless it names its own::

    from zoo.training.loop.records.tracking import parent_run

    with parent_run("http://127.0.0.1:5000", experiment="zoo-tune", run_name="study") as parent:
        for trial in range(10):
            zoo.finetune(name, data, f"runs/trial-{trial}", track="http://127.0.0.1:5000")
    print(parent.run_id)

or explicitly: ``tracking_run(uri, run_name=..., parent_run_id=parent.run_id)``, a context manager
that yields the `Tracker` and ends the run as the block ends. The parent is a context variable:
a thread started inside the block (Optuna's ``n_jobs``) sees it when it runs in a copy of the
block's context (``contextvars.copy_context().run(fn)``). A fine-tuning run's id is
``FinetuneResult.mlflow_run_id``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import os
import sqlite3
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from zoo.errors import ZooError
from zoo.store.files import folder_problem

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DEFAULT_EXPERIMENT",
    "INSTALL_HINT",
    "EpochLogger",
    "Tracker",
    "TrackingError",
    "check_tracking",
    "parent_run",
    "require_mlflow",
    "store_uri",
    "tracked",
    "tracking_run",
]

INSTALL_HINT = "pip install 'zoo[track]'"
DEFAULT_EXPERIMENT = "zoo"
CONNECT_TIMEOUT_S = 5.0  # a tracking server that does not answer /health in this long is reported unreachable
MAX_PARAM_CHARS = 6000  # MLflow's longest param value
BATCH = 100  # params (and metrics) per log_batch call: MLflow's limit for params
PARENT_TAG = "mlflow.parentRunId"
STORE_MARK = "zoo_store.json"  # beside the mlflow.db zoo made in a --track folder: zoo uses only such a one
SQLITE_ARTIFACTS = "mlartifacts"  # beside a sqlite:///PATH database: its experiments' artifacts (mlflow server's name)
SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks", "databricks-uc", "uc")


class TrackingError(ZooError, RuntimeError):
    """MLflow is not installed, or the tracking URI cannot be used (a server that does not
    answer, a store MLflow refuses): said before training starts."""


def _flag(uri: str) -> str:
    return f"TrainConfig.track (--track) {uri!r}"


def require_mlflow() -> Any:
    """The ``mlflow`` module, or a `TrackingError` naming the extra to install."""
    try:
        import mlflow
    except ImportError:
        raise TrackingError(f"--track logs to MLflow, which is not installed: {INSTALL_HINT}") from None
    return mlflow


def _is_file_store(folder: Path) -> bool:
    """Whether ``folder`` is an MLflow file store (MLflow 2's ``mlruns``: experiments with a meta.yaml)."""
    return folder.is_dir() and (any(folder.glob("*/meta.yaml")) or (folder / ".trash").is_dir())


def store_uri(uri: str) -> tuple[str, str | None]:
    """(the tracking URI MLflow is given, the artifact location of the experiments it creates):
    a folder (a path or ``file:`` URI) holds a SQLite store and its artifacts, unless it is an
    MLflow file store already; other URIs go to MLflow as they are."""
    parts = urlsplit(uri)
    if parts.scheme not in ("", "file") and not (len(parts.scheme) == 1 and uri[1:3] in (":\\", ":/")):
        if parts.scheme.split("+")[0] not in SCHEMES:  # a drive letter is a path; postgresql+psycopg2 a driver
            raise TrackingError(
                f"{_flag(uri)}: MLflow reads no {parts.scheme}: URIs; give a folder (./mlruns), file:, "
                "http(s)://HOST:PORT (a tracking server) or a database (sqlite:///runs.db, postgresql://...)"
            )
        return uri, _beside_database(uri)
    folder = Path(url2pathname(parts.path) if parts.scheme == "file" else uri).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise TrackingError(f"{_flag(uri)} is a file, not a folder: name a folder for the runs, or sqlite:///FILE.db")
    if problem := folder_problem(folder):
        raise TrackingError(f"{_flag(uri)}: {problem}; name a folder you can write")
    if _is_file_store(folder):
        return folder.as_uri(), None
    database, mark = folder / "mlflow.db", folder / STORE_MARK
    linked = next((path for path in (database, mark, folder / "artifacts") if path.is_symlink()), None)
    if linked is not None:  # zoo makes none: through one, MLflow or zoo would write outside the folder
        raise TrackingError(
            f"{_flag(uri)}: {linked} is a link (to {os.readlink(linked)}), which zoo did not make; zoo writes only "
            f"into the folder it names: remove the link, name another folder, or --track sqlite:///PATH to log "
            "into a database you name"
        )
    if database.exists() and not mark.is_file() and not _made_before_marks(database, folder / "artifacts"):
        raise TrackingError(
            f"{_flag(uri)}: {database} is there already and zoo did not make it; zoo writes into a database you "
            f"name only: --track sqlite:///{database} to log into it, or name another folder"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not mark.is_file():  # before the database: a second process sees the store as zoo's
            mark.write_text('{"made_by": "zoo", "database": "mlflow.db", "artifacts": "artifacts"}\n')
    except OSError as error:  # what folder_problem could not see (a full disk, a race)
        raise TrackingError(f"{_flag(uri)}: cannot write {folder} ({error.strerror}): name a writable folder") from None
    return f"sqlite:///{database}", (folder / "artifacts").as_uri()


def _beside_database(uri: str) -> str | None:
    """Where the experiments zoo creates in a ``sqlite:///PATH`` store keep their artifacts:
    ``mlartifacts`` beside the database (as ``mlflow server --backend-store-uri sqlite:///PATH``
    keeps them beside it), not MLflow's ``./mlruns`` in whatever folder the command ran in.
    Other URIs: None (the store's own default; a server's ``--default-artifact-root``)."""
    parts = urlsplit(uri)
    path = url2pathname(parts.path[1:]) if parts.scheme.split("+")[0] == "sqlite" else ""
    if not path or path == ":memory:":
        return None
    return (Path(path).expanduser().absolute().parent / SQLITE_ARTIFACTS).as_uri()


def _made_before_marks(database: Path, artifacts: Path) -> bool:
    """Whether ``database`` is a store zoo made before it marked them (read only): its experiments
    but MLflow's Default keep their artifacts in ``artifacts`` beside it, as zoo creates them."""
    try:
        with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT artifact_location FROM experiments WHERE experiment_id != 0").fetchall()
    except sqlite3.Error:
        return False
    return bool(rows) and all(str(location).startswith(artifacts.as_uri()) for (location,) in rows)


def _check_server(uri: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, in one line, an http(s) tracking URI where no server answers within ``timeout``
    seconds (MLflow's own client would retry for minutes, after the training)."""
    base = uri.rstrip("/")
    try:
        urllib.request.urlopen(f"{base}/health", timeout=timeout).close()
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):  # it answers; MLflow sends the credentials
            return
        if error.code == 404:
            try:
                urllib.request.urlopen(f"{base}/api/2.0/mlflow/experiments/search?max_results=1", timeout=timeout)
            except urllib.error.HTTPError as inner:
                if inner.code != 404:
                    return
            else:
                return
        raise TrackingError(
            f"{_flag(uri)} answers HTTP {error.code} at {base}/health: is it an MLflow tracking server? "
            "check the address (mlflow server --host 127.0.0.1 --port PORT starts one); nothing was trained"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise TrackingError(
            f"{_flag(uri)}: no MLflow tracking server answers ({reason}); start one (mlflow server --host "
            "127.0.0.1 --port PORT) or check the address; nothing was trained"
        ) from None


_CHECKED: set[str] = set()


def check_tracking(uri: str | None) -> None:
    """Before anything trains: MLflow importable, a tracking server's URI answering, another
    store opening (a folder's SQLite database is made here), once per URI; under torchrun by the
    first process only (the one that logs: the others would race it making the database)."""
    if uri is None or uri in _CHECKED or int(os.environ.get("RANK", "0")) != 0:
        return
    mlflow = require_mlflow()
    if urlsplit(uri).scheme in ("http", "https"):
        _check_server(uri)
    else:
        with _mlflow_errors(uri):
            mlflow.MlflowClient(tracking_uri=store_uri(uri)[0]).search_experiments(max_results=1)
    _CHECKED.add(uri)


@contextlib.contextmanager
def _mlflow_errors(uri: str) -> Iterator[None]:
    """Any error while opening a store or a run (a scheme MLflow does not know, a database
    driver missing, a database that does not answer) as one `TrackingError`."""
    try:
        yield
    except TrackingError:
        raise
    except Exception as error:  # noqa: BLE001 (whatever the store raised: one line, before training)
        text = " ".join(str(getattr(error, "message", error)).split())[:400]
        raise TrackingError(f"{_flag(uri)}: MLflow cannot use it ({type(error).__name__}: {text})") from None


def _param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


@dataclass
class Tracker:
    """One open MLflow run, written through an `mlflow.MlflowClient` (the process's active run
    and tracking URI are left as they are): params, metrics, artifacts, and its end."""

    client: Any
    uri: str  # as the user gave it
    store: str  # as MLflow got it (`store_uri`)
    experiment: str
    experiment_id: str
    run_id: str
    broken: bool = False  # a logging call failed mid-run: the rest of the run is not logged

    def describe(self) -> str:
        """Where to find the run: its id, experiment and store."""
        return f"run {self.run_id} in experiment {self.experiment!r} at {self.store}"

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        """A logging call; a failure (a server gone mid-run) is warned about once, and training goes on."""
        if self.broken:
            return
        try:
            fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 (any failure of the store: the run's own files stay)
            self.broken = True
            warnings.warn(
                f"MLflow: {what} failed ({' '.join(str(error).split())[:200]}); the run goes on without MLflow, "
                f"its files are in its output folder ({self.describe()})",
                stacklevel=3,
            )

    def log_params(self, params: Mapping[str, Any]) -> None:
        """``params`` as strings; on a run resumed, only the ones it does not hold yet (MLflow keeps a param's first value)."""
        from mlflow.entities import Param

        held: dict[str, str] = {}
        self._call("reading the run's params", lambda: held.update(self.client.get_run(self.run_id).data.params))
        items = [Param(str(k), _param_value(v)) for k, v in params.items() if str(k) not in held]
        for start in range(0, len(items), BATCH):
            self._call("logging params", self.client.log_batch, self.run_id, params=items[start : start + BATCH])

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """The numbers of ``metrics`` at ``step``."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(str(k), float(v), now, step)
            for k, v in metrics.items()
            if isinstance(v, int | float) and not math.isnan(float(v))
        ]
        for start in range(0, len(items), BATCH):
            self._call("logging metrics", self.client.log_batch, self.run_id, metrics=items[start : start + BATCH])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """A file or folder that exists, into the run's artifacts (under ``artifact_path``)."""
        path = Path(path)
        if path.is_dir():
            self._call(f"logging {path.name}", self.client.log_artifacts, self.run_id, str(path), artifact_path)
        elif path.is_file():
            self._call(f"logging {path.name}", self.client.log_artifact, self.run_id, str(path), artifact_path)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self._call("setting tags", self.client.set_tag, self.run_id, str(key), _param_value(value))

    def end(self, status: str = "FINISHED") -> None:
        """End the run: FINISHED, FAILED or KILLED."""
        self.broken = False  # one more try: the run should not stay RUNNING
        self._call(f"ending the run as {status}", self.client.set_terminated, self.run_id, status)


@dataclass(frozen=True)
class _Parent:
    uri: str
    experiment: str
    run_id: str


_CURRENT: contextvars.ContextVar[Tracker | None] = contextvars.ContextVar("zoo_tracking_run", default=None)
_PARENT: contextvars.ContextVar[_Parent | None] = contextvars.ContextVar("zoo_tracking_parent", default=None)


def current_run() -> Tracker | None:
    """The run `tracking_run` opened around this code (a Trainer inside ``zoo finetune`` logs to it)."""
    return _CURRENT.get()


def _experiment_id(client: Any, name: str, artifact_location: str | None) -> str:
    """The id of experiment ``name``, created when missing (another process creating it at once is fine)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage == "deleted":
            raise TrackingError(
                f"the MLflow experiment {name!r} is deleted: restore it (mlflow experiments restore) or pick another "
                "with --track-experiment"
            )
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except Exception:  # noqa: BLE001 (created meanwhile by another process: read it back)
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def _open(
    uri: str,
    experiment: str | None,
    run_name: str | None,
    tags: Mapping[str, Any],
    parent_run_id: str | None,
    run_id: str | None,
) -> Tracker:
    """Create the run (or reopen ``run_id``, a run resumed) in ``experiment``, a child of the parent run."""
    mlflow = require_mlflow()
    check_tracking(uri)
    store, artifacts = store_uri(uri)
    parent = _PARENT.get()
    if parent is not None and parent.uri == uri and parent_run_id is None:
        parent_run_id, experiment = parent.run_id, experiment or parent.experiment
    experiment = experiment or DEFAULT_EXPERIMENT
    with _mlflow_errors(uri):
        client = mlflow.MlflowClient(tracking_uri=store)
        experiment_id = _experiment_id(client, experiment, artifacts)
        if run_id is not None:
            run_id = _reopened(client, run_id)
        if run_id is None:
            all_tags = {**_context_tags(), **tags, **({PARENT_TAG: parent_run_id} if parent_run_id else {})}
            all_tags = {str(k): _param_value(v) for k, v in all_tags.items()}
            run_id = client.create_run(experiment_id, run_name=run_name, tags=all_tags).info.run_id
    return Tracker(client, uri, store, experiment, experiment_id, run_id)


def _reopened(client: Any, run_id: str) -> str | None:
    """``run_id`` set RUNNING again (a run resumed), or None, warned about, when the store has it no more."""
    try:
        client.update_run(run_id, status="RUNNING")
    except Exception as error:  # noqa: BLE001 (deleted, or another store's: a new run takes its place)
        warnings.warn(
            f"MLflow run {run_id} cannot be reopened ({type(error).__name__}): logging to a new run", stacklevel=4
        )
        return None
    return run_id


def _context_tags() -> dict[str, str]:
    """The tags MLflow's own start_run sets (user, source, git commit), where it can tell them."""
    try:
        from mlflow.tracking.context.registry import resolve_tags

        return dict(resolve_tags())
    except Exception:  # noqa: BLE001 (only descriptive)
        return {}


@contextlib.contextmanager
def tracking_run(
    uri: str,
    *,
    experiment: str | None = None,
    run_name: str | None = None,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, Any] | None = None,
    parent_run_id: str | None = None,
    run_id: str | None = None,
) -> Iterator[Tracker]:
    """An MLflow run at ``uri`` for the block (``run_id``: reopen that run, e.g. a run resumed),
    with ``params`` and ``tags``; a child of ``parent_run_id`` (or of the `parent_run` around
    it). It ends FINISHED when the block does, FAILED on an error, KILLED on Ctrl-C."""
    tracker = _open(uri, experiment, run_name, tags or {}, parent_run_id, run_id)
    token = _CURRENT.set(tracker)
    status = "FAILED"
    try:
        tracker.log_params(params or {})
        yield tracker
        status = "FINISHED"
    except (KeyboardInterrupt, SystemExit):
        status = "KILLED"
        raise
    finally:
        _CURRENT.reset(token)
        tracker.end(status)


@contextlib.contextmanager
def parent_run(
    uri: str, *, experiment: str | None = None, run_name: str | None = None, params: Mapping[str, Any] | None = None
) -> Iterator[Tracker]:
    """A parent run (a search, its study) for the block: each run tracked to ``uri`` inside it
    is its child, in its experiment unless the child names another."""
    with tracking_run(uri, experiment=experiment, run_name=run_name, params=params) as tracker:
        token = _PARENT.set(_Parent(uri, tracker.experiment, tracker.run_id))
        token_run = _CURRENT.set(None)  # the children open their own runs
        try:
            yield tracker
        finally:
            _CURRENT.reset(token_run)
            _PARENT.reset(token)


def config_params(config: Any) -> dict[str, Any]:
    """A TrainConfig as params: every field, as it is."""
    return dataclasses.asdict(config)


class EpochLogger:
    """The callback that logs each epoch's metrics at step = the epoch (on rank 0; other
    processes of a torchrun group run it as a no-op, so they all run the same callbacks)."""

    def __init__(self, tracker: Tracker | None) -> None:
        self.tracker = tracker

    def __call__(self, trainer: Any, metrics: dict[str, float]) -> None:
        if self.tracker is not None:
            self.tracker.log_metrics({k: v for k, v in metrics.items() if k != "epoch"}, int(metrics["epoch"]))


@contextlib.contextmanager
def tracked(trainer: Any) -> Iterator[None]:
    """`Trainer.fit`'s epochs with ``config.track`` set: the run `tracking_run` opened around it
    (``zoo finetune``'s), else one of its own named after the output folder, which ends with the
    block, logging curves.png and metrics.json first; the config as params, the epochs' metrics."""
    config = trainer.config
    if config.track is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        tracker = current_run() if trainer.is_main else None
        own = trainer.is_main and tracker is None
        if own:
            name = Path(config.out_dir).name if config.out_dir else None
            tracker = stack.enter_context(tracking_run(config.track, experiment=config.track_experiment, run_name=name))
        if tracker is not None:
            tracker.log_params(config_params(config))
            trainer.logs.logger.info("MLflow: %s", tracker.describe())
        callback = EpochLogger(tracker)
        trainer.callbacks.append(callback)
        try:
            yield
        finally:
            trainer.callbacks.remove(callback)
        if own and config.out_dir is not None:
            for name in ("curves.png", "metrics.json"):
                tracker.log_artifact(Path(config.out_dir) / name)
