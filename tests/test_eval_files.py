"""``zoo eval RUN --data FILE`` (issue 49): a run folder scored on a held-out file of its data
kind, labels mapped by the saved names, the task's metrics (accuracy and macro-F1, top-5;
mAP and F1 at the saved thresholds; MAE, RMSE, R² in the target's units), checked against
the same model's own forward; a class the model does not know, or data of another kind,
refused in one line."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from zoo.cli import main
from zoo.store.model_config import update_config
from zoo.training.data.molecules.molecule_files import MoleculeOptions
from zoo.training.finetune import FinetuneOptions, finetune_with_config
from zoo.training.loop.train_config import TrainConfig
from zoo.training.scoring import score_file

QUIET = TrainConfig(epochs=1, batch_size=8, progress=False, plot=False, tensorboard=False, seed=0)
COLOURS = ("red", "green", "blue")


def image_folder(root: Path, classes: tuple[str, ...], per_class: int, seed: int) -> Path:
    """Small RGB images, each class bright in its own channel."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 100, size=(10, 10, 3), dtype=np.uint8)
            pixels[..., COLOURS.index(name) if name in COLOURS else c % 3] = 250
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def image_run(tmp_path_factory) -> Path:
    """resnet20 fine-tuned one epoch on three classes of an image folder."""
    root = tmp_path_factory.mktemp("img")
    data = image_folder(root / "train", COLOURS, 6, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bare architecture; classes too small for the hold-out
        return finetune_with_config(
            "resnet20", data, root / "run", FinetuneOptions(post_training=False), config=QUIET
        ).out


def by_hand(run: Path, folder: Path) -> tuple[torch.Tensor, list[str]]:
    """The run's logits on every image of a class folder (sorted), and each image's class."""
    model = zoo.load(run)
    paths = sorted(folder.glob("*/*.png"))
    with torch.no_grad():
        logits = model(torch.stack([zoo.transforms(model)(Image.open(p)) for p in paths]))
    return logits, [p.parent.name for p in paths]


def test_an_image_run_scored_on_a_folder_with_classes_by_name(image_run, tmp_path, capsys):
    test = image_folder(tmp_path / "test", ("green", "blue"), 4, seed=1)  # two of the three, numbered 0 and 1 here
    out = tmp_path / "scores.json"
    assert main(["eval", str(image_run), "--data", str(test), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith("8 samples, 3 classes") and printed[1].split()[0] == "accuracy"
    scores = json.loads(out.read_text())
    logits, truth = by_hand(image_run, test)
    names = zoo.load(image_run).pretrained_cfg["class_names"]
    assert names == ["blue", "green", "red"]  # the training folder's order: 'green' is 1 here, 0 in the test folder
    predicted = [names[i] for i in logits.argmax(-1).tolist()]
    assert scores["accuracy"] == pytest.approx(np.mean([p == t for p, t in zip(predicted, truth)]))
    assert {"macro_f1", "per_class"} <= set(scores) and "top5" not in scores  # three classes: no top-5
    assert [row["class"] for row in scores["per_class"]] == names and scores["per_class"][2]["support"] == 0


def test_a_test_file_of_one_class_is_scored(image_run, tmp_path, capsys):
    """Scoring needs no second class (training does): every image is 'red', accuracy is the share
    predicted red; a training folder of one class is still refused."""
    test = image_folder(tmp_path / "test", ("red",), 3, seed=2)
    out = tmp_path / "scores.json"
    assert main(["eval", str(image_run), "--data", str(test), "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("3 samples, 3 classes")
    logits, _ = by_hand(image_run, test)
    names = zoo.load(image_run).pretrained_cfg["class_names"]
    predicted = [names[i] for i in logits.argmax(-1).tolist()]
    assert json.loads(out.read_text())["accuracy"] == pytest.approx(predicted.count("red") / 3)
    code = main(["finetune", "resnet20", "--scratch", "--data", str(test), "--out", str(tmp_path / "run")])
    assert code == 2 and "has 1 class ('red'): a classifier needs at least 2" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: image_folder(d / "t", ("red", "violet"), 2, 0), "class 'violet' is not one of the 3 classes"),
        (lambda d: (d / "t.csv").write_text("text,label\na,red\nb,blue\n") and d / "t.csv", "holds text"),
        (lambda d: d / "missing", "missing does not exist"),
    ],
)
def test_a_file_the_run_cannot_score_is_one_line_and_exit_2(image_run, tmp_path, capsys, make, message):
    assert main(["eval", str(image_run), "--data", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("zoo: error: ") and message in err, err


def test_top5_over_five_classes_from_a_tensor_file(tmp_path):
    torch.manual_seed(0)
    names = [f"c{i}" for i in range(7)]
    model = zoo.load("resnet20", pretrained=False, num_classes=7, in_chans=1)
    update_config(model, class_names=names, preprocess={"mean": [0.5], "std": [0.5]})
    run = zoo.save(model.eval(), tmp_path / "run")
    x, y = torch.randint(0, 256, (21, 12, 12), dtype=torch.uint8), torch.arange(21) % 7
    torch.save({"x": x, "y": y, "classes": names}, tmp_path / "test.pt")
    scores = score_file(str(run), tmp_path / "test.pt", progress=False)
    with torch.no_grad():
        logits = zoo.load(run)(zoo.transforms(zoo.load(run))(x[:, None]))
    assert scores["top5"] == pytest.approx((logits.topk(5).indices == y[:, None]).any(-1).double().mean().item())
    assert scores["accuracy"] == pytest.approx((logits.argmax(-1) == y).double().mean().item())


def test_a_multi_label_run_scored_at_its_saved_thresholds(tmp_path):
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    folder = tmp_path / "test"
    folder.mkdir()
    rows, truth = [], []
    for i in range(12):
        tags = [c for c in COLOURS if rng.random() < 0.5] or ["red"]
        Image.fromarray(rng.integers(0, 255, (10, 10, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        rows.append(f"{i}.png,{' '.join(tags)}")
        truth.append([c in tags for c in ("blue", "green", "red")])
    (folder / "metadata.csv").write_text("file_name,tags\n" + "\n".join(rows) + "\n")
    torch.manual_seed(0)
    model = zoo.load("resnet20", pretrained=False, num_classes=3, in_chans=3)
    labels = {"names": ["blue", "green", "red"], "thresholds": [0.3, 0.5, 0.7]}
    update_config(
        model, class_names=labels["names"], multi_label=labels, preprocess={"mean": [0.5] * 3, "std": [0.5] * 3}
    )
    run = zoo.save(model.eval(), tmp_path / "run")
    scores = score_file(str(run), folder, progress=False)
    with torch.no_grad():
        probs = model(
            torch.stack([zoo.transforms(model)(Image.open(folder / f"{i}.png")) for i in range(12)])
        ).sigmoid()
    truth = np.array(truth)
    decided = probs.numpy() >= np.array(labels["thresholds"])
    assert scores["map"] == pytest.approx(sklearn.average_precision_score(truth, probs.numpy(), average="macro"))
    assert scores["f1_micro"] == pytest.approx(sklearn.f1_score(truth, decided, average="micro"))
    assert scores["f1_macro"] == pytest.approx(sklearn.f1_score(truth, decided, average="macro", zero_division=0))
    assert scores["task"] == "3 labels (multi-label)" and scores["samples"] == 12


def test_a_molecule_regression_run_scored_on_a_csv_in_its_units(tmp_path, capsys):
    rdkit = pytest.importorskip("rdkit")
    from zoo.loading.smiles import predict_molecules

    table = Path(rdkit.__file__).parent / "Data" / "NCI" / "first_5k.tpsa.csv"
    lines = [line.strip() for line in table.read_text().splitlines() if line.strip() and not line.startswith("#")]
    pairs = [line.rsplit(",", 1) for line in lines]

    def write(path: Path, part: list[list[str]]) -> Path:
        with open(path, "w", newline="") as file:
            csv.writer(file).writerows([["smiles", "TPSA", "weight"], *([s, v, "1"] for s, v in part)])
        return path

    train, test = write(tmp_path / "train.csv", pairs[:40]), write(tmp_path / "test.csv", pairs[100:120])
    small = {"hidden_channels": 16, "num_layers": 2}
    options = FinetuneOptions(model_kwargs=small, post_training=False, molecules=MoleculeOptions(label_field="TPSA"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = finetune_with_config("gin3", train, tmp_path / "run", options, config=QUIET).out
    assert (
        main(["eval", str(run), "--data", str(test), "--out", str(tmp_path / "m.json")]) == 0
    )  # TPSA: the target's column
    assert "regression of 'TPSA'" in capsys.readouterr().out.splitlines()[0]
    scores = json.loads((tmp_path / "m.json").read_text())
    predicted = torch.tensor(predict_molecules(zoo.load(run), [s for s, _ in pairs[100:120]]))
    truth = torch.tensor([float(v) for _, v in pairs[100:120]])
    assert scores["mae"] == pytest.approx((predicted - truth).abs().mean().item(), rel=1e-4)
    assert scores["rmse"] == pytest.approx((predicted - truth).square().mean().sqrt().item(), rel=1e-4)
    r2 = 1 - (predicted - truth).square().sum() / (truth - truth.mean()).square().sum()
    assert scores["r2"] == pytest.approx(r2.item(), rel=1e-3, abs=1e-4)


def test_eval_of_a_folder_without_data_points_to_data(image_run, capsys):
    assert main(["eval", str(image_run)]) == 2
    assert "score it on your held-out data with --data FILE" in capsys.readouterr().err
    assert main(["eval", "resnet20.fmnist", "--out", "x.json"]) == 2
    assert "--out go(es) with --data FILE" in capsys.readouterr().err


def test_non_finite_metrics_are_written_as_json_null(tmp_path, capsys, monkeypatch):
    import zoo.training.scoring as scoring

    scores = {"model": "m", "data": "d", "samples": 2, "task": "regression", "r2": float("nan"), "mse": float("inf")}
    monkeypatch.setattr(scoring, "score_file", lambda *args, **kwargs: scores)
    out = tmp_path / "m.json"
    assert main(["eval", "resnet20", "--data", str(tmp_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["r2"] is None and json.loads(text)["mse"] is None


def test_a_run_remembers_its_label_column_and_tokens_per_row(tmp_path, capsys):
    """--label-field and --max-length are saved with the run, so zoo eval --data reads a file
    with several label columns as training did, and predict/serve cut texts where training did."""
    from zoo.loading.saved import read_saved_config
    from zoo.loading.transforms import text_length

    def write(path: Path, count: int) -> Path:
        with open(path, "w", newline="") as file:
            rows = [[f"text {i} " + "ab" * (i % 5), ["pos", "neg"][i % 2], ["art", "sport", "news"][i % 3]] for i in range(count)]  # fmt: skip
            csv.writer(file).writerows([["text", "mood", "topic"], *rows])
        return path

    tiny = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
    options = FinetuneOptions(
        model_kwargs=tiny, post_training=False, max_length=24, molecules=MoleculeOptions(label_field="topic")
    )
    run = finetune_with_config(
        "moe_encoder", write(tmp_path / "train.csv", 30), tmp_path / "run", options, config=QUIET
    ).out
    config = json.loads((run / "config.json").read_text())
    assert (config["label_field"], config["max_length"]) == ("topic", 24)
    assert text_length(zoo.load(run)) == 24
    out = tmp_path / "m.json"
    assert main(["eval", str(run), "--data", str(write(tmp_path / "test.csv", 12)), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["samples"] == 12  # scored on topic: mood's classes are not the run's
    capsys.readouterr()

    for bad in (0, "24", 1 << 21):
        (run / "config.json").write_text(json.dumps({**config, "max_length": bad}))
        with pytest.raises(zoo.ZooError, match=r"config.json.*max_length"):
            read_saved_config(run)


def test_a_file_without_the_saved_label_column_is_said_by_that_column(tmp_path, capsys):
    """A run trained on --label-field sentiment: a test file lacking that column is refused
    naming 'sentiment' (was: 'label'); one whose 'sentiment' holds one class is scored by it
    (was: a missing 'label' column); one with only a default 'label' column is scored by it with a
    warning naming both columns; a label_field that is not a printable name is refused on load."""
    from zoo.loading.saved import read_saved_config

    def write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
        with open(path, "w", newline="") as file:
            csv.writer(file).writerows([header, *rows])
        return path

    train = write(
        tmp_path / "train.csv", ["text", "sentiment"], [[f"text {i}", ["pos", "neg"][i % 2]] for i in range(16)]
    )
    tiny = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
    options = FinetuneOptions(
        model_kwargs=tiny, post_training=False, max_length=16, molecules=MoleculeOptions(label_field="sentiment")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = finetune_with_config("moe_encoder", train, tmp_path / "run", options, config=QUIET).out
    capsys.readouterr()

    other = write(tmp_path / "other.csv", ["text", "foo"], [["a", "pos"], ["b", "neg"]])
    assert main(["eval", str(run), "--data", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing ['sentiment']" in err and "'label'" not in err

    one_class = write(tmp_path / "one.csv", ["text", "sentiment"], [["a", "pos"], ["b", "pos"]])
    assert main(["eval", str(run), "--data", str(one_class)]) == 0  # a test file may hold one class
    assert "2 samples, 2 classes" in capsys.readouterr().out

    default = write(tmp_path / "default.csv", ["text", "label"], [["a", "pos"], ["b", "neg"]])
    with pytest.warns(UserWarning, match=r"default label column, not 'sentiment'.*--label-field"):
        scores = score_file(str(run), default, progress=False)
    assert scores["samples"] == 2

    config = json.loads((run / "config.json").read_text())
    for bad in ("a\x1b[31mred", "two\nlines", "x" * 300):
        (run / "config.json").write_text(json.dumps({**config, "label_field": bad}))
        with pytest.raises(zoo.ZooError, match=r"config.json.*label_field.*printable"):
            read_saved_config(run)
