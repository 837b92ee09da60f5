"""Files zoo reads and folders it writes, as a careless or hostile user hands them over (issue 40,
the file half): every file goes through one reader per kind that names it in a ZooError, an output
folder is held while a run writes it, a named class list fits the head, zoo.save refuses a file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from zoo.cli import main
from zoo.errors import CheckpointError, InvalidArgumentError, WeightsError, WeightsNotFoundError
from zoo.store.download import fetch_state_dict
from zoo.store.files import LOCK_FILE, write_bytes_atomic
from zoo.training.finetune.run_folder import Output, prepare, prepare_output
from zoo.training.loop.records.checkpoint import read_best_weights, read_checkpoint, write_best_weights

pytestmark = pytest.mark.usefixtures("one_thread")
QUIET = ["--no-post-training", "--no-progress", "--no-tensorboard", "--max-steps", "1", "--batch-size", "4"]


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


# ---------------------------------------------------------------------------------------------
# One reader per kind of file: torch checkpoints


def not_checkpoints(tmp_path: Path) -> dict[str, Path]:
    """Files that are no torch checkpoint: text, a link to a text file, a system file, a folder."""
    (tmp_path / "hello.pt").write_text("hello")
    (tmp_path / "notes.txt").write_text("my notes\n" * 10)
    (tmp_path / "link.pt").symlink_to(tmp_path / "notes.txt")
    (tmp_path / "folder.pt").mkdir()
    return {"text": tmp_path / "hello.pt", "link": tmp_path / "link.pt", "system": Path("/etc/passwd"),
            "folder": tmp_path / "folder.pt"}  # fmt: skip


def test_weights_that_are_no_checkpoint_are_a_zoo_error_naming_the_file(tmp_path: Path) -> None:
    """Was a raw KeyError (``hello``) and IndexError (/etc/passwd) from inside torch.load."""
    for kind, path in not_checkpoints(tmp_path).items():
        if kind == "folder":  # refused before it is read: "a folder without config.json"
            continue
        with pytest.raises(WeightsError, match="not a readable checkpoint") as refused:
            zoo.load("resnet20", weights=path)
        assert str(path) in str(refused.value), kind


def test_a_training_checkpoint_that_is_no_checkpoint_is_a_checkpoint_error(tmp_path: Path) -> None:
    budget = {"epochs": 1, "max_steps": None}
    for path in not_checkpoints(tmp_path).values():
        with pytest.raises(CheckpointError, match=str(path)):
            read_checkpoint(path, None, budget)
        with pytest.raises(CheckpointError, match=str(path)):
            read_best_weights(path)


@pytest.mark.parametrize("kind", ["text", "link", "folder"])
def test_resuming_from_a_last_pt_that_is_no_checkpoint_is_one_line(kind: str, pngs, tmp_path, capsys) -> None:
    """``--resume`` with checkpoints/last.pt holding ``hello``, linking to a text file, or a
    folder (which used to train from scratch and then fail): exit 2, one line naming it."""
    out = tmp_path / "out"
    last = out / "checkpoints" / "last.pt"
    last.parent.mkdir(parents=True)
    if kind == "text":
        last.write_text("hello")
    elif kind == "link":
        (tmp_path / "notes.txt").write_text("my notes")
        last.symlink_to(tmp_path / "notes.txt")
    else:
        last.mkdir()
    argv = ["finetune", "resnet20", "--data", str(pngs), "--out", str(out), "--resume", *QUIET]
    with pytest.warns(UserWarning):  # the tiny data set's hold-out
        assert main(argv) == 2
    line = one_error_line(capsys)
    assert str(last) in line and ("not a readable checkpoint" in line or "not a checkpoint file" in line), line
    assert not (out / "model.safetensors").exists()


# ---------------------------------------------------------------------------------------------
# Named class lists, zoo.save's folder


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return zoo.save(zoo.load("resnet20.fmnist"), tmp_path / "saved")


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({k: v for k, v in (config | changes).items() if v is not None}))


def test_a_named_class_list_must_fit_the_head(saved: Path, tmp_path: Path, capsys) -> None:
    """A 10-class folder saying ``"categories": "imagenet"`` used to predict ImageNet's ostrich."""
    edit_config(saved, categories="imagenet", class_names=None)
    problem = "field 'categories' names 'imagenet', a list of 1000 classes, but num_classes is 10"
    with pytest.raises(WeightsError, match=problem) as refused:
        zoo.load(saved)
    assert str(saved / "config.json") in str(refused.value)
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((28, 28), dtype=np.uint8)).save(image)
    assert main(["predict", str(saved), str(image)]) == 2
    assert problem in one_error_line(capsys)
    edit_config(saved, categories="no_such_list")
    with pytest.raises(WeightsError, match=r"config\.json: field 'categories' names no class list shipped with zoo"):
        zoo.load(saved)
    edit_config(saved, categories="fashion-mnist")  # ten names: loads
    assert zoo.load(saved).num_classes == 10


def test_zoo_save_into_a_file_is_refused_by_name(saved: Path, tmp_path: Path) -> None:
    """Was a raw FileExistsError (NotADirectoryError below a file)."""
    model = zoo.load(saved)
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(InvalidArgumentError, match="zoo.save writes a folder, and .*a_file is a file"):
        zoo.save(model, tmp_path / "a_file")
    with pytest.raises(InvalidArgumentError, match="is inside .*a_file, a file"):
        zoo.save(model, tmp_path / "a_file" / "below")
    assert (tmp_path / "a_file").read_text() == "mine"


def test_zoo_save_does_not_silently_replace_a_dangling_link(saved: Path, tmp_path: Path) -> None:
    folder = tmp_path / "new"
    folder.mkdir()
    (folder / "README.md").symlink_to(tmp_path / "nowhere.md")
    with pytest.raises(InvalidArgumentError, match="already holds README.md"):
        zoo.save(zoo.load(saved), folder)


# ---------------------------------------------------------------------------------------------
# Hugging Face checkpoints: the index and its shards


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = zoo.load("moe_lm", pretrained=False, hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=1,
                     intermediate_size=8, num_experts=2, top_k=1)  # fmt: skip
    return zoo.export_hf(model, tmp_path_factory.mktemp("hf") / "checkpoint", max_shard_size=4000)


def copy_checkpoint(checkpoint: Path, folder: Path) -> tuple[Path, list[Path]]:
    shutil.copytree(checkpoint, folder)
    return folder, sorted(folder.glob("*.safetensors"))


def test_an_index_naming_a_missing_shard_is_named(checkpoint: Path, tmp_path: Path) -> None:
    """Was a raw FileNotFoundError."""
    folder, shards = copy_checkpoint(checkpoint, tmp_path / "m")
    shards[2].unlink()
    problem = f"model.safetensors.index.json: field 'weight_map' names the shard '{shards[2].name}', which is missing"
    with pytest.raises(WeightsNotFoundError, match=problem):
        zoo.load("moe_lm", weights=folder)


@pytest.mark.parametrize("target", ["/etc/passwd", "config.json", "/dev/zero"])
def test_a_shard_linking_to_another_kind_of_file_is_named(target: str, checkpoint: Path, tmp_path: Path) -> None:
    """Was a raw SafetensorError: header too large."""
    folder, shards = copy_checkpoint(checkpoint, tmp_path / "m")
    shards[1].unlink()
    shards[1].symlink_to(target if target.startswith("/") else folder / target)
    with pytest.raises(WeightsError) as refused:
        zoo.load("moe_lm", weights=folder)
    assert shards[1].name in str(refused.value) and "is not a" in str(refused.value), refused.value


# ---------------------------------------------------------------------------------------------
# An output folder is held while a run writes it

OUTPUTS = (Output("model.safetensors"), Output("checkpoints", folder=True, writes=("last.pt",)))
HOLDER = """
import sys, time
from pathlib import Path
from zoo.training.finetune.run_folder import Output, prepare, prepare_output
files = prepare(Path(sys.argv[1]), (Output("model.safetensors"),), resume=False, overwrite=True)
with files.sealing():
    print("holding", flush=True)
    for _ in range(600):  # until the test says go, a minute at most
        if Path(sys.argv[2]).exists():
            break
        time.sleep(0.1)
"""


def start_holder(out: Path, go: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), str(go)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_a_second_run_on_a_folder_in_use_is_refused_naming_the_holder(pngs, tmp_path, capsys) -> None:
    """Two ``zoo finetune --out same --overwrite`` at once used to both say saved: the second one
    is now refused before it writes, naming the folder and the first one's pid."""
    out, go = tmp_path / "same", tmp_path / "go"
    holder = start_holder(out, go)
    try:
        argv = ["finetune", "resnet20", "--data", str(pngs), "--out", str(out), "--overwrite", *QUIET]
        with pytest.warns(UserWarning):
            assert main(argv) == 2
        line = one_error_line(capsys)
        assert f"--out {out} is in use: another run (pid {holder.pid}) is writing it" in line, line
        assert not (out / "model.safetensors").exists()
    finally:
        go.touch()
        assert holder.wait(timeout=60) == 0
    assert not (out / LOCK_FILE).exists()  # released when the holder ended
    with prepare(out, OUTPUTS, resume=False, overwrite=True).sealing():
        pass


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    out, go = tmp_path / "out", tmp_path / "go"
    holder = start_holder(out, go)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    assert (out / LOCK_FILE).read_text().strip() == str(holder.pid)  # the dead run's, left behind
    with prepare(out, OUTPUTS, resume=False, overwrite=True).sealing():
        assert (out / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert not (out / LOCK_FILE).exists()


def test_two_threads_racing_for_a_folder_one_wins(tmp_path: Path) -> None:
    out = tmp_path / "out"
    start, results, files = threading.Barrier(2), [], []

    def race() -> None:
        start.wait(timeout=30)
        try:
            files.append(prepare(out, OUTPUTS, resume=False, overwrite=True))
            results.append("won")
        except InvalidArgumentError as refused:
            results.append(str(refused))

    threads = [threading.Thread(target=race) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results)[-1] == "won" and "is in use: another run" in sorted(results)[0], results
    with files[0].sealing():
        pass


def test_the_folder_is_freed_on_errors_and_ctrl_c(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    with pytest.raises(InvalidArgumentError, match="is not empty"):
        prepare(out, OUTPUTS, resume=False, overwrite=False)  # refused: the folder is freed
    with pytest.raises(KeyboardInterrupt):
        with prepare(out, OUTPUTS, resume=False, overwrite=True).sealing():
            raise KeyboardInterrupt
    deadline = time.monotonic() + 5
    with prepare(out, OUTPUTS, resume=False, overwrite=True).sealing():
        assert time.monotonic() < deadline
    assert not (out / LOCK_FILE).exists() and (out / "mine.txt").read_text() == "the user's"


def test_a_planted_lock_link_is_not_followed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "precious").write_text("keep")
    (out / LOCK_FILE).symlink_to(tmp_path / "precious")
    with pytest.raises(InvalidArgumentError, match="cannot create its lock file"):
        prepare(out, OUTPUTS, resume=False, overwrite=True)
    assert (tmp_path / "precious").read_text() == "keep"


def test_the_checkpoint_reader_still_reads_checkpoints(tmp_path: Path) -> None:
    write_best_weights(tmp_path / "best.pt", {"w": torch.ones(2)}, 1, "val_loss", 0.5)
    assert torch.equal(read_best_weights(tmp_path / "best.pt")["w"], torch.ones(2))


# ---------------------------------------------------------------------------------------------
# Smaller cases: a resume with nothing to resume, a killed writer's leftovers, a moved cache,
# warnings on the command line


def test_resume_before_the_first_checkpoint_is_an_error(tmp_path: Path) -> None:
    """Ctrl-C before the first checkpoint leaves a run's files: ``--resume`` used to start over quietly."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.log").write_text("epoch 1 ...")
    with pytest.raises(InvalidArgumentError, match="no checkpoints/last.pt: its run stopped before its first"):
        prepare_output(out, resume=True, overwrite=False)


def test_a_killed_writers_part_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """kill -9 skips atomic_path's cleanup: a resumed run used to leave ``.last.pt.<pid>.<hex>.part``."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".last.pt.{dead.stdout.strip()}.0badc0de.part"
    fresh = tmp_path / f".last.pt.{dead.stdout.strip()}.0000beef.part"  # changed a moment ago: maybe still written
    mine = tmp_path / f".other.pt.{dead.stdout.strip()}.0badc0de.part"  # another file's
    for part in (stale, fresh, mine):
        part.write_bytes(b"x" * 1000)
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    os.utime(mine, (time.time() - 3600, time.time() - 3600))
    write_bytes_atomic(tmp_path / "last.pt", b"new")
    assert not stale.exists() and fresh.exists() and mine.exists()


def test_a_weight_cache_copied_elsewhere_keeps_its_converted_weights(http_server, tmp_path, monkeypatch) -> None:
    """Records named files by absolute path: a cache copied or mounted elsewhere (a container
    image) refused its URL-converted weights offline."""
    buffer = tmp_path / "net.pth"
    torch.save({"w": torch.arange(4.0)}, buffer)
    blob = buffer.read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    url = http_server.add("net.pth", blob)
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "home"))
    first = fetch_state_dict(url, sha256=digest, progress=False)
    shutil.copytree(tmp_path / "home", tmp_path / "elsewhere")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    moved = fetch_state_dict(url, sha256=digest, progress=False)
    assert moved == tmp_path / "elsewhere" / first.relative_to(tmp_path / "home")


def test_the_command_line_says_a_warning_in_one_line() -> None:
    """Warnings used to print the warning code's file, line number and source line."""
    code = (
        "import sys, warnings; from zoo.cli import parser; "
        "parser.COMMANDS['list'] = parser.Command('h', lambda p: None, lambda a: warnings.warn('two\\n lines') or 0); "
        "sys.exit(parser.main(['list']))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stderr == "zoo: warning: two lines\n", run.stderr


def test_zoo_export_does_not_silently_replace_a_dangling_link(tmp_path: Path) -> None:
    from zoo.deploy.exporter import check_destination

    (tmp_path / "m.onnx").symlink_to(tmp_path / "nowhere.onnx")
    with pytest.raises(InvalidArgumentError, match="m.onnx already exists"):
        check_destination(tmp_path / "m.onnx", "onnx")


def test_the_module_entry_points_say_a_warning_in_one_line(tmp_path: Path) -> None:
    """``python -m zoo.training.finetune`` (what torchrun starts) printed the warning code's file
    and source line: warnings are one line in every entry point that goes through run_command."""
    code = (
        "import sys, warnings; from zoo.errors import run_command; "
        "sys.exit(run_command(lambda: warnings.warn('two\\n lines') or 0, prog='python -m x'))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stderr == "python -m x: warning: two lines\n", run.stderr
