"""The output folder of a run: which files in it the run wrote, and what a fine-tuning run does
with it.

Its manifest (`MANIFEST`, ``run_files.json``) lists the files a run wrote, so that ``--overwrite``
removes exactly those and nothing of the user's. A run declares its `Output` s (files, and folders
with what it writes in them). Before it starts, `prepare` (`RunFiles`) looks at what stands where
the run will write: each file there must be one the manifest lists, unchanged since (its sha256),
each folder one the run created (or, for a folder it only adds files to, a real folder); links are
never the run's. Anything else refuses ``--overwrite`` before anything is deleted, naming what is
in the way. Then the run's old files go, and the new run's outputs are claimed in the manifest at
once (a run killed before it ends still owns what it wrote); `RunFiles.seal` records each file's
sha256 when the run ends. Several writers may share a folder (``zoo demo``: the digits, then the
comparison, then each arm in its own subfolder): each prepares and seals only its own outputs'
entries.

``zoo finetune`` writes `RUN_OUTPUTS` (`prepare_output` checks the folder for them, a resume
included), and after training runs `evaluate_and_export` on the validation set (report, exports,
int8, pruning) into the same folder.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import Dataset, SequentialSampler

from zoo.errors import InvalidArgumentError
from zoo.loading.saved import CARD_FILE, CONFIG_FILE, RUN_FILES, WEIGHTS_FILE
from zoo.store.files import LOCK_FILE, FolderLock, lock_folder, read_json, sha256_file, write_json
from zoo.training.data.source import DataChangedError, DataSource
from zoo.training.finetune import post_training as after_training
from zoo.training.finetune.mlflow_run import RUN_FILE as MLFLOW_RUN_FILE
from zoo.training.loop.loaders import build_loader
from zoo.training.loop.lr_finder import PLOT_FILE as LR_FINDER_PLOT
from zoo.training.loop.records.checkpoint import BEST_CHECKPOINT, LAST_CHECKPOINT
from zoo.training.loop.steps import split_batch
from zoo.training.loop.train_config import TrainConfig

MANIFEST = RUN_FILES
PRUNE_AMOUNTS = (0.25, 0.5, 0.75)  # --compression: the sparsities magnitude pruning is measured at
MANIFEST_FORMAT = "zoo-run-files/1"
MAX_MANIFEST_BYTES = 64 << 20  # a run's list of files: 100,000 files take a few MB
PENDING, SEALED = "pending", "sealed"  # a folder the run created: all of it the run's / the files listed


# ---------------------------------------------------------------------------------------------
# Which files a run wrote: the manifest


@dataclass(frozen=True)
class Output:
    """Something a run writes in its folder: a file, or a ``folder``. In a folder the user made
    (not the run), the run writes only the files ``writes`` names (None: it needs the folder to
    itself; ``()``: only new, uniquely named files, as TensorBoard's)."""

    name: str
    folder: bool = False
    writes: tuple[str, ...] | None = None


class RunFiles:
    """The manifest entries of ``outputs`` in the output folder ``out``."""

    def __init__(self, out: Path, outputs: Sequence[Output], lock: FolderLock | None = None) -> None:
        self.out, self.outputs = Path(out), tuple(outputs)
        self._before: dict[str, set[str]] = {}  # files already in the user's folders the run adds to
        self.lock = lock  # the folder, held from `prepare` until `sealing` ends

    # -- the manifest ----------------------------------------------------------------------------

    def _load(self) -> tuple[dict[str, str | None], dict[str, str]]:
        """The manifest's files (path -> sha256, None until sealed) and folders (name -> state)."""
        path = self.out / MANIFEST
        if not path.is_file() or path.is_symlink():
            return {}, {}
        data = read_json(path, MAX_MANIFEST_BYTES, fix="delete it, or choose another --out")
        data = data if isinstance(data, dict) else {}
        files, folders = data.get("files"), data.get("folders")
        if (
            data.get("format") != MANIFEST_FORMAT
            or not isinstance(files, dict)
            or not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in files.items())
            or not isinstance(folders, dict)
            or not all(isinstance(k, str) and v in (PENDING, SEALED) for k, v in folders.items())
        ):
            raise InvalidArgumentError(
                f"{path} is not a run's list of files ({MANIFEST_FORMAT}): delete it, or choose another --out"
            )
        return files, folders

    def _save(self, files: dict[str, str | None], folders: dict[str, str]) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        data = {
            "format": MANIFEST_FORMAT,
            "files": dict(sorted(files.items())),
            "folders": dict(sorted(folders.items())),
        }
        write_json(data, self.out / MANIFEST)

    def _mine(self, relative: str) -> bool:
        """Whether manifest entry ``relative`` belongs to one of this writer's outputs."""
        return relative.split("/", 1)[0] in {o.name for o in self.outputs}

    # -- before the run ----------------------------------------------------------------------------

    def in_the_way(self) -> list[str]:
        """What stands where the run writes and is not the run's own, each with why."""
        files, folders = self._load()
        found = []
        for output in self.outputs:
            path = self.out / output.name
            if not os.path.lexists(path):
                continue
            if path.is_symlink():
                found.append(f"{output.name} (a link, to {os.readlink(path)})")
            elif output.folder != path.is_dir():
                found.append(f"{output.name} (a {'file' if output.folder else 'folder'}, where the run writes a "
                             f"{'folder' if output.folder else 'file'})")  # fmt: skip
            elif output.folder:
                found += self._in_folder(output, files, folders)
            else:
                found += _foreign_file(self.out, output.name, files)
        return found

    def _in_folder(self, output: Output, files: dict[str, str | None], folders: dict[str, str]) -> list[str]:
        """What in ``output``'s folder is in the run's way."""
        if folders.get(output.name) == PENDING:
            return []  # a killed run's: all of it the run's
        recorded = [r for r in files if r.startswith(output.name + "/")]
        found = [
            problem for r in recorded if os.path.lexists(self.out / r) for problem in _foreign_file(self.out, r, files)
        ]
        if output.name in folders:
            return found
        if output.writes is None:
            return [f"{output.name} (a folder the run did not create)"]
        for name in output.writes:
            relative = f"{output.name}/{name}"
            if os.path.lexists(self.out / relative) and relative not in files:
                found.append(f"{relative} (not written by a run)")
        return found

    def remove(self) -> None:
        """Delete this writer's outputs from an earlier run (after `in_the_way` found nothing)."""
        files, folders = self._load()
        for output in self.outputs:
            path = self.out / output.name
            if not os.path.lexists(path) or path.is_symlink():
                continue
            if folders.get(output.name) == PENDING:
                shutil.rmtree(path)  # a real folder the run created (rmtree never follows the links in it)
                continue
            for relative in [r for r in files if r == output.name or r.startswith(output.name + "/")]:
                with contextlib.suppress(FileNotFoundError):
                    (self.out / relative).unlink()
            if output.name in folders:
                _remove_empty_folders(path)
        self._save(
            {k: v for k, v in files.items() if not self._mine(k)},
            {k: v for k, v in folders.items() if not self._mine(k)},
        )

    def claim(self, resume: bool = False) -> None:
        """Record, before the run writes them, the outputs it will create (so that a run killed
        half-way still owns them), and remember what the user's folders held. A resumed run
        rewrites its files: their sha256 is recorded again by `seal`; outputs of a run
        from before manifests are taken as its own."""
        files, folders = self._load()
        files.update({r: None for r in files if self._mine(r)})
        folders.update({r: PENDING for r in folders if self._mine(r)})
        for output in self.outputs:
            path = self.out / output.name
            known = output.name in folders or any(r == output.name or r.startswith(output.name + "/") for r in files)
            if (
                resume
                and not known
                and os.path.lexists(path)
                and not path.is_symlink()
                and output.folder == path.is_dir()
            ):
                (folders if output.folder else files)[output.name] = PENDING if output.folder else None
            if not os.path.lexists(path):
                if output.folder:
                    folders[output.name] = PENDING
                else:
                    files[output.name] = None
            elif output.folder and output.name not in folders and path.is_dir() and not path.is_symlink():
                self._before[output.name] = set(_files_in(self.out, output.name))
                for name in output.writes or ():
                    files.setdefault(f"{output.name}/{name}", None)
        self._save(files, folders)

    # -- after the run -------------------------------------------------------------------------------

    def seal(self) -> None:
        """Record the sha256 of every file this writer's outputs hold now (entries of files the
        run did not write are dropped), so a later change to them is seen."""
        files, folders = self._load()
        for relative in [r for r in files if self._mine(r)]:
            path = self.out / relative
            if path.is_file() and not path.is_symlink():
                files[relative] = sha256_file(path)
            else:
                del files[relative]
        for output in self.outputs:
            if output.name in folders:
                if not (self.out / output.name).is_dir():
                    del folders[output.name]
                    continue
                folders[output.name] = SEALED
                new = _files_in(self.out, output.name)
            else:
                new = set(_files_in(self.out, output.name)) - self._before.get(output.name, set())
            files.update({r: files.get(r) or sha256_file(self.out / r) for r in new})
        self._save(files, folders)

    @contextlib.contextmanager
    def sealing(self) -> Iterator[RunFiles]:
        """`seal` when the block ends, however it ends (an error, Ctrl-C), then free the folder."""
        try:
            yield self
        finally:
            try:
                self.seal()
            finally:
                if self.lock is not None:
                    self.lock.release()


def prepare(out: Path, outputs: Sequence[Output], resume: bool, overwrite: bool, *, flag: str = "--out") -> RunFiles:
    """The `RunFiles` of a run about to write ``outputs`` into ``out``: a new run needs ``out``
    new or empty, or ``overwrite``, which removes an earlier run's outputs after checking that
    nothing in the way is the user's (refusing, before deleting anything, when something is);
    a resumed run keeps them. The outputs are claimed in the manifest before the run writes.
    The folder is held (`lock_folder`) from here until `RunFiles.sealing` ends: a second run
    started on it meanwhile is refused, naming the first one's pid."""
    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise InvalidArgumentError(f"{flag} {out} is a file, not a folder: choose a folder for the run")
    lock = lock_folder(out, flag)  # until the run's files are sealed: a second run on it is refused
    try:
        return _prepare(RunFiles(out, outputs, lock), resume, overwrite, flag)
    except BaseException:
        lock.release()
        raise


def _prepare(files: RunFiles, resume: bool, overwrite: bool, flag: str) -> RunFiles:
    """`prepare`, once the folder is held."""
    out = files.out
    present = sorted(p.name for p in out.iterdir() if p.name not in (MANIFEST, LOCK_FILE))
    if present and not resume:
        if not overwrite:
            shown = ", ".join(present[:5]) + (f" and {len(present) - 5} more" if len(present) > 5 else "")
            raise InvalidArgumentError(
                f"{flag} {out} is not empty ({shown}): choose a new folder, pass --resume to continue the run in "
                "it, or --overwrite to replace an earlier run's files"
            )
        in_the_way = files.in_the_way()
        if in_the_way:
            raise InvalidArgumentError(
                f"--overwrite: {out} holds what this run would replace but no run wrote: {'; '.join(in_the_way)}. "
                "Nothing was deleted: move these away, or choose another --out"
            )
        files.remove()
    files.claim(resume)
    return files


def _foreign_file(out: Path, relative: str, files: dict[str, str | None]) -> list[str]:
    """``[why]`` when the file at ``relative`` is not the run's own (unlisted, a link, or changed since it was sealed)."""
    path = out / relative
    if path.is_symlink():
        return [f"{relative} (a link)"]
    if relative not in files:
        return [f"{relative} (not written by a run)"]
    if files[relative] is not None and (not path.is_file() or sha256_file(path) != files[relative]):
        return [f"{relative} (changed since the run wrote it)"]
    return []


def _files_in(out: Path, name: str) -> list[str]:
    """The files under folder ``out/name`` (links neither followed nor listed), relative to ``out``, with '/'."""
    root = out / name
    if not root.is_dir() or root.is_symlink():
        return []
    found = []
    for folder, _, names in os.walk(root):  # os.walk does not follow links to folders
        for file_name in names:
            path = Path(folder) / file_name
            if path.is_file() and not path.is_symlink():
                found.append(path.relative_to(out).as_posix())
    return found


def _remove_empty_folders(root: Path) -> None:
    """Remove ``root`` and the folders under it that are empty (bottom up); keep the rest."""
    for folder, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def manifest_entries(out: Path) -> dict[str, Any]:
    """The manifest of ``out`` as it is on disk (for tests and tools)."""
    return json.loads((out / MANIFEST).read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# A fine-tuning run's folder


CALIBRATION_BATCHES = 4  # validation batches static int8 calibrates on

RUN_OUTPUTS = (
    Output(CONFIG_FILE),
    Output(WEIGHTS_FILE),
    Output(CARD_FILE),
    Output("metrics.csv"),
    Output("metrics.json"),
    Output("curves.png"),
    Output(LR_FINDER_PLOT),
    Output("train.log"),
    Output("tensorboard", folder=True, writes=()),  # event files with unique names
    Output("checkpoints", folder=True, writes=(LAST_CHECKPOINT, BEST_CHECKPOINT)),
    Output("profile", folder=True, writes=()),
    Output(after_training.TORCHSCRIPT_FILE),
    Output(after_training.EXPORTED_PROGRAM_FILE),
    Output(after_training.ONNX_FILE),
    Output(after_training.REPORT_FILE),
    Output(after_training.CONFUSION_FILE),
    Output(after_training.SUMMARY_FILE),
    Output(MLFLOW_RUN_FILE),
)


def prepare_output(out: Path, resume: bool, overwrite: bool) -> RunFiles:
    """Refuse an output folder that holds anything but a run to resume, unless ``overwrite``;
    then remove what an earlier run wrote there (its manifest lists it) and nothing else,
    refusing before deleting anything when something in the run's way is not a run's own
    (`RunFiles.in_the_way`). A resume needs a run's last checkpoint (a run stopped before its
    first one is started over with ``overwrite``) and removes nothing. Returns the run's
    `RunFiles`: seal them when the run ends."""
    last = Path("checkpoints") / LAST_CHECKPOINT
    if resume and not os.path.lexists(out / last):  # a folder or a broken link there: read_checkpoint names it
        names = {o.name for o in RUN_OUTPUTS}
        if out.is_dir() and any(p.name in names for p in out.iterdir()):
            raise InvalidArgumentError(
                f"--resume: {out} holds no run to resume (no {last}: its run stopped before its first checkpoint); "
                "start it over with --overwrite in place of --resume"
            )
        raise InvalidArgumentError(
            f"--resume: {out} holds no run to resume (no {last}); check --out, or drop --resume to start a new run"
        )
    return prepare(out, RUN_OUTPUTS, resume, overwrite)


@contextlib.contextmanager
def on_changed_data(out: Path) -> Iterator[None]:
    """A run stopped by a file of its data that cannot be read mid-run (`DataChangedError`: it
    was checked before training) ends in one line saying how it goes on: from its last
    checkpoint with --resume once the file is back, or over again when none was written yet."""
    try:
        yield
    except DataChangedError as error:
        last = out / "checkpoints" / LAST_CHECKPOINT
        how = (
            f"the run's last checkpoint {last} is kept: put the file back and continue the run with "
            "`zoo finetune ... --resume` (the same command, plus --resume)"
            if last.is_file()
            else "no checkpoint was written yet: put the file back (or drop it from the data) and start the run "
            "again, with --overwrite"
        )
        raise DataChangedError(f"{error}; {how}") from None


def evaluate_and_export(
    model: nn.Module, val_set: Dataset, source: DataSource, config: TrainConfig, compression: bool = False
) -> dict[str, Any]:
    """`zoo.training.finetune.post_training.post_training` on the validation set: the report and
    exports; with ``compression`` int8 quantization and pruning too (off by default: on a run of
    2,000 images they took 40 of its 68 s after the epochs, and `zoo.optimize` quantizes on demand)."""
    if config.progress:
        also = ", quantizing and pruning" if compression else ""
        print(
            f"after training: evaluating, exporting{also} on {len(val_set)} validation samples "
            "(--no-post-training skips it)",
            flush=True,
        )
    loader = build_loader(val_set, config.batch_size, sampler=SequentialSampler(val_set), collate_fn=source.collate_fn)
    calibration = [_positional(split_batch(batch)[0]) for batch in itertools.islice(loader, CALIBRATION_BATCHES)]
    return after_training.post_training(
        model,
        loader,
        config.out_dir,
        calibration[0],
        class_names=source.class_names,
        dynamic_batch=source.kind != "graphs",
        calibration=calibration,
        quantize=None if compression else False,
        prune_amounts=PRUNE_AMOUNTS if compression else (),
        progress=config.progress,
    )


def _positional(inputs: Any) -> Any:
    """A batch's inputs as a model call's positional arguments (a tensor, or a tuple)."""
    if isinstance(inputs, Mapping):
        return tuple(inputs.values())  # in the model's order (input_ids, attention_mask)
    return inputs if isinstance(inputs, torch.Tensor) else (inputs,)
