"""Tracking in MLflow (``--track URI``, issue 51): a tiny real fine-tune logged to a local folder
and read back through MLflow's own client (params, each epoch's metrics at step = epoch, the card
and curves, the model that `mlflow.pyfunc.load_model` predicts with as `zoo.load` does); a real
``mlflow server`` on 127.0.0.1 (SQLite behind it) with a fine-tune logged as a nested run; runs
that fail or are interrupted end FAILED or KILLED, and a resumed one goes on in its MLflow run;
an unreachable server, a missing extra and a bad URI are one line and exit code 2 before
anything trains, and importing zoo imports no mlflow.

The server starts when the module does (it takes 10-30 s) and is waited for by its test, last."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from torch.utils.data import TensorDataset

import zoo
from zoo import cli
from zoo.training.finetune.mlflow_run import RUN_FILE
from zoo.training.loop.records.tracking import TrackingError, parent_run, store_uri
from zoo.training.loop.trainer import TrainConfig, Trainer

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:.*bare architecture")]
ROOT = Path(__file__).resolve().parent.parent
QUICK = ["--epochs", "2", "--batch-size", "4", "--val-fraction", "0.25", "--no-progress", "--no-tensorboard"]
QUICK += ["--no-post-training", "--precision", "fp32", "--num-workers", "0"]
QUICK_KEYWORDS = dict(epochs=2, batch_size=4, val_fraction=0.25, progress=False, tensorboard=False)
QUICK_KEYWORDS |= dict(post_training=False, precision="fp32", num_workers=0)  # zoo.finetune's keywords for QUICK
SERVER_WAIT_S = 90  # a loaded 2-core machine starts MLflow's server in 10-30 s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen]]:
    """``mlflow server`` on a free port of 127.0.0.1 with a SQLite store, started now (its test
    waits for it) and always stopped, its whole process group."""
    root, port = tmp_path_factory.mktemp("mlflow-server"), free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--default-artifact-root"]
    command += [str(root / "artifacts"), "--workers", "1"]
    with open(root / "server.log", "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        with_group(server, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        with_group(server, signal.SIGKILL)  # its workers and job consumers too, whatever SIGTERM left
        server.wait()


def with_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One local store (a folder) for the module's runs: its SQLite database is made once."""
    return tmp_path_factory.mktemp("store") / "mlruns"


@pytest.fixture(autouse=True, scope="module")
def _server_starts_early(mlflow_server: tuple[str, subprocess.Popen]) -> None:
    """Start the server before the other tests, so that it is up when its test comes."""


def wait_until_up(url: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + SERVER_WAIT_S
    while time.monotonic() < deadline:
        assert server.poll() is None, f"mlflow server exited with {server.returncode}"
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1).close()
            return
        except OSError:
            time.sleep(0.25)
    pytest.fail(f"mlflow server at {url} did not answer in {SERVER_WAIT_S} s")


def gray_images(root: Path, per_class: int = 4) -> Path:
    """Two classes of 16x16 gray images, one darker than the other."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("dark", "light")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 120, (16, 16), dtype=np.uint8) + 120 * c
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    return root


def test_a_tracked_finetune_reads_back_through_mlflow(
    tmp_path: Path, store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, out = gray_images(tmp_path / "images"), tmp_path / "ants-v1"
    argv = ["finetune", "resnet20", "--data", str(data), "--out", str(out), *QUICK, "--track", str(store)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    record = json.loads((out / RUN_FILE).read_text())
    run_id = record["run_id"]
    assert f"MLflow run {run_id}" in printed and run_id in (out / "README.md").read_text()
    assert record["store"] == store_uri(str(store))[0] == f"sqlite:///{store / 'mlflow.db'}"

    client = mlflow.MlflowClient(record["store"])
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "ants-v1"
    assert client.get_experiment(run.info.experiment_id).name == "zoo"
    params = run.data.params
    assert params["model"] == "resnet20" and params["data"] == str(data) and params["mode"] == "full"
    assert params["epochs"] == "2" and params["lr"] == "0.001" and params["batch_size"] == "4"
    history = json.loads((out / "metrics.json").read_text())["history"]
    for key in set(history[0]) - {"epoch"}:  # every metric of every epoch, at step = the epoch
        logged = client.get_metric_history(run_id, key)
        assert [(m.step, m.value) for m in logged] == [(row["epoch"], pytest.approx(row[key])) for row in history]
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"README.md", "curves.png", "metrics.json", "model"} <= artifacts
    assert {"model/MLmodel", "model/artifacts"} <= {a.path for a in client.list_artifacts(run_id, "model")}

    monkeypatch.setenv("MLFLOW_TRACKING_URI", record["store"])  # what runs:/ resolves against
    logged_model = mlflow.pyfunc.load_model(record["model"])
    model = zoo.load(out)
    x = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        expected = model(x).softmax(-1).numpy()
    predicted = logged_model.predict(x.numpy())
    assert list(predicted.columns) == ["dark", "light"]
    np.testing.assert_allclose(predicted.to_numpy(), expected, rtol=1e-5, atol=1e-6)
    files = sorted(str(p) for p in (data / "light").iterdir())[:2]
    with torch.no_grad():
        from_files = model(torch.stack([zoo.transforms(model)(Image.open(f)) for f in files])).softmax(-1).numpy()
    np.testing.assert_allclose(logged_model.predict(pd.DataFrame({"image": files})).to_numpy(), from_files, atol=1e-6)
    pixels = np.stack([np.asarray(Image.open(f)) for f in files])  # uint8 images: preprocessed as the weights were
    np.testing.assert_allclose(logged_model.predict(pixels).to_numpy(), from_files, atol=1e-6)


def tiny_trainer(tmp_path: Path, callbacks: list | None = None, **config) -> tuple[Trainer, TensorDataset]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    data = TensorDataset(torch.randn(16, 4), torch.arange(16) % 2)
    settings = dict(epochs=3, batch_size=8, progress=False, tensorboard=False, precision="fp32", num_workers=0)
    return Trainer(model, TrainConfig(**(settings | config)), callbacks=callbacks), data


@pytest.mark.parametrize("stop", [RuntimeError("a bug"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_a_run_that_fails_or_is_interrupted_is_not_left_running(
    tmp_path: Path, store: Path, stop: BaseException
) -> None:
    def fail_at_epoch_2(trainer: Trainer, metrics: dict[str, float]) -> None:
        if metrics["epoch"] == 2:
            raise stop

    experiment = f"stopped-{type(stop).__name__}"
    trainer, data = tiny_trainer(
        tmp_path, [fail_at_epoch_2], track=str(store), track_experiment=experiment, out_dir=str(tmp_path / "run")
    )
    with pytest.raises(type(stop)):
        trainer.fit(data, data)
    client = mlflow.MlflowClient(store_uri(str(store))[0])
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert run.info.status == ("KILLED" if isinstance(stop, KeyboardInterrupt) else "FAILED")
    assert run.info.run_name == "run" and run.data.params["epochs"] == "3"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_acc")] == [1]  # epoch 2 stopped first


def test_a_parent_run_nests_the_runs_inside_it(tmp_path: Path, store: Path) -> None:
    """What `zoo tune` does: each trial a child of the study's run, in its experiment."""
    with parent_run(str(store), experiment="search", run_name="study") as parent:
        for trial in range(2):
            trainer, data = tiny_trainer(tmp_path, track=str(store), epochs=1, out_dir=str(tmp_path / f"trial-{trial}"))
            trainer.fit(data, data)
    client = mlflow.MlflowClient(store_uri(str(store))[0])
    runs = client.search_runs([parent.experiment_id], order_by=["attributes.start_time"])
    assert [r.info.run_name for r in runs] == ["study", "trial-0", "trial-1"]
    assert [r.data.tags.get("mlflow.parentRunId") for r in runs[1:]] == [parent.run_id] * 2
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert {a.path for a in client.list_artifacts(runs[1].info.run_id)} == {"curves.png", "metrics.json"}


def test_not_on_the_processes_of_a_torchrun_group_but_the_first(tmp_path: Path) -> None:
    trainer, data = tiny_trainer(tmp_path, track=str(tmp_path / "mlruns"), epochs=1)
    trainer.is_main = False  # rank 1: its callbacks still run (the group all-reduces their stop), it logs nothing
    trainer.fit(data, data)
    assert not (tmp_path / "mlruns").exists()


def run_without_mlflow(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``zoo ARGV`` in a fresh process where mlflow cannot be imported; first it prints whether
    importing zoo, its training and its API imported mlflow (it must not: mlflow is slow to import)."""
    code = "import sys, zoo, zoo.training.finetune; zoo.Trainer, zoo.TrainConfig; print('mlflow' in sys.modules); "
    code += f"sys.modules['mlflow'] = None; from zoo.cli import main; sys.exit(main({argv!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_without_mlflow_or_a_server_it_is_one_line_before_training_and_zoo_imports_it_lazily(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = gray_images(tmp_path / "images"), tmp_path / "run"
    argv = ["finetune", "resnet20", "--data", str(data), "--out", str(out), *QUICK]
    missing = run_without_mlflow([*argv, "--track", str(tmp_path / "mlruns")])
    assert missing.stdout.strip() == "False"  # import zoo, its training and its API: no mlflow until a run is tracked
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.strip().splitlines() == [
        "zoo: error: --track logs to MLflow, which is not installed: pip install 'zoo[track]'"
    ]
    unreachable = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    assert cli.main([*argv, "--track", unreachable]) == 2
    # at once, not after MLflow's retries (minutes); the first call imports zoo's training (9 s of
    # it beside two busy loops on 2 cores: a bound of 10 s was nearly met)
    assert time.monotonic() - started < 60
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"zoo: error: TrainConfig.track (--track) '{unreachable}': no MLflow tracking server answers"
    )
    assert cli.main([*argv, "--track", "htp://127.0.0.1:5000"]) == 2  # a typo'd scheme: named with the ones read
    assert "MLflow reads no htp: URIs; give a folder (./mlruns)" in capsys.readouterr().err
    assert cli.main([*argv, "--track-experiment", "team"]) == 2  # an experiment without --track: not ignored
    assert "add --track URI" in capsys.readouterr().err
    assert not out.exists()  # nothing trained, nothing written


def test_a_real_tracking_server(tmp_path: Path, mlflow_server: tuple[str, subprocess.Popen]) -> None:
    url, server = mlflow_server
    wait_until_up(url, server)
    data, out = gray_images(tmp_path / "images"), tmp_path / "trial-0"
    with parent_run(url, experiment="team", run_name="study") as parent:
        result = zoo.finetune("resnet20", data, out, **QUICK_KEYWORDS, track=url)
    client = mlflow.MlflowClient(url)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "trial-0"
    assert run.data.tags["mlflow.parentRunId"] == parent.run_id
    assert client.get_experiment(run.info.experiment_id).name == "team"
    assert run.data.params["model"] == "resnet20" and run.data.params["track"] == url
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == [1, 2]
    assert {"README.md", "curves.png", "model"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    assert json.loads((out / RUN_FILE).read_text())["store"] == url


def test_the_mlflow_model_reads_texts_and_vectors_as_zoo_does(tmp_path: Path) -> None:
    from zoo.tokenizer import ByteTokenizer
    from zoo.training.finetune.mlflow_model import predict_table

    tiny = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
    torch.manual_seed(0)
    texts = zoo.load("moe_encoder", pretrained=False, num_classes=3, **tiny).eval()
    texts.pretrained_cfg["class_names"] = ["bad", "fine", "great"]
    folder = zoo.save(texts, tmp_path / "texts")
    ids, mask = ByteTokenizer()(["so bad", "great!"], max_length=512)
    with torch.no_grad():
        expected = texts(ids, mask).softmax(-1).numpy()
    for given in (["so bad", "great!"], pd.DataFrame({"text": ["so bad", "great!"], "id": [1, 2]})):
        table = predict_table(folder, given)
        assert list(table.columns) == ["bad", "fine", "great"]
        np.testing.assert_allclose(table.to_numpy(), expected, atol=1e-5)
    vectors = zoo.save(zoo.load("dbn", pretrained=False, num_classes=2, sizes=(16, 8)).eval(), tmp_path / "dbn")
    rows = np.random.default_rng(0).random((3, 16), dtype=np.float32)
    with torch.no_grad():
        expected = zoo.load(vectors)(torch.from_numpy(rows)).softmax(-1).numpy()
    np.testing.assert_allclose(predict_table(vectors, pd.DataFrame(rows)).to_numpy(), expected, atol=1e-6)
    with pytest.raises(zoo.ZooError, match=r"inputs\[0\] is of type int; this model reads texts as strings"):
        predict_table(folder, [1, 2])


def test_a_resumed_run_goes_on_in_the_mlflow_run_its_folder_names(tmp_path: Path, store: Path) -> None:
    from zoo.training.finetune import FinetuneOptions
    from zoo.training.finetune.mlflow_run import finetune_tracking

    out = tmp_path / "run"
    out.mkdir()

    def tracking(**config):
        settings = TrainConfig(track=str(store), track_experiment="resumed", out_dir=str(out), **config)
        return finetune_tracking(settings, out, "resnet20", "images/", "3 classes", FinetuneOptions(), main=True)

    with pytest.raises(KeyboardInterrupt), tracking() as first:
        first.log_metrics({"val_acc": 0.5}, step=1)
        raise KeyboardInterrupt
    client = mlflow.MlflowClient(first.store)
    assert client.get_run(first.run_id).info.status == "KILLED"
    with tracking(resume=True) as again:
        assert again.run_id == first.run_id and client.get_run(first.run_id).info.status == "RUNNING"
        again.log_metrics({"val_acc": 0.75}, step=2)
    assert client.get_run(first.run_id).info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(first.run_id, "val_acc")] == [1, 2]
    with tracking(resume=False) as fresh:  # a new run (--overwrite) is a new MLflow run
        assert fresh.run_id != first.run_id


def test_a_folder_holding_a_database_zoo_did_not_make_is_refused_unless_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--track .`` where ./mlflow.db is someone else's (MLflow 3's default store in the working
    folder): one line naming the file and the URI that logs into it, and the file untouched;
    a folder zoo made its store in is used again; the database named itself is used."""
    monkeypatch.chdir(tmp_path)
    mlflow.MlflowClient("sqlite:///mlflow.db").create_experiment("theirs")  # a store zoo did not make
    theirs = (tmp_path / "mlflow.db").read_bytes()
    data, out = gray_images(tmp_path / "images"), tmp_path / "run"
    argv = ["finetune", "resnet20", "--data", str(data), "--out", str(out), *QUICK]
    assert cli.main([*argv, "--track", "."]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("20")]  # not MLflow's INFO
    database = tmp_path / "mlflow.db"
    assert line == (
        f"zoo: error: TrainConfig.track (--track) '.': {database} is there already and zoo did not make it; zoo "
        f"writes into a database you name only: --track sqlite:///{database} to log into it, or name another folder"
    )
    assert (tmp_path / "mlflow.db").read_bytes() == theirs and not out.exists()
    ours = tmp_path / "ours"
    assert store_uri(str(ours))[0] == f"sqlite:///{ours / 'mlflow.db'}"  # made by zoo: marked as its own
    mlflow.MlflowClient(store_uri(str(ours))[0]).search_experiments()  # the database is made
    assert store_uri(str(ours))[0] == f"sqlite:///{ours / 'mlflow.db'}"  # and used again
    mlflow.MlflowClient(f"sqlite:///{ours / 'mlflow.db'}").create_experiment("zoo", (ours / "artifacts").as_uri())
    (ours / "zoo_store.json").unlink()  # a store zoo made before it marked them: its experiments' artifacts beside
    assert store_uri(str(ours))[0] == f"sqlite:///{ours / 'mlflow.db'}" and (ours / "zoo_store.json").is_file()
    assert store_uri(f"sqlite:///{database}")[0] == f"sqlite:///{database}"  # named: used as it is


@pytest.mark.parametrize("link", ["mlflow.db", "zoo_store.json", "artifacts"])
def test_a_link_in_the_folder_is_refused_before_anything_is_written_through_it(tmp_path: Path, link: str) -> None:
    """A --track folder whose mlflow.db (or mark, or artifacts) is a link, even one to nothing:
    MLflow would make its database where the link points, outside the folder (it did)."""
    folder, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    folder.mkdir()
    (folder / link).symlink_to(elsewhere)
    with pytest.raises(TrackingError, match=rf"{link} is a link \(to {elsewhere}\), which zoo did not make"):
        store_uri(str(folder))
    assert not elsewhere.exists() and sorted(p.name for p in folder.iterdir()) == [link]
