"""Molecules for the graph models (issue 43): SMILES/SDF files fine-tune by regression or
classification, bad molecules are refused by line or skipped, the scaffold split keeps
scaffolds apart, regression metrics are right, and ``zoo predict`` takes SMILES."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("rdkit")

import zoo  # noqa: E402
from zoo.cli import main  # noqa: E402
from zoo.errors import DataError, WeightsError, ZooError  # noqa: E402
from zoo.loading.smiles import INPUT_FORMAT, smiles_batch  # noqa: E402
from zoo.training.data.molecules.molecule_files import MoleculeOptions, molecule_source, scaffold_split  # noqa: E402
from zoo.training.finetune import FinetuneOptions, finetune_with_config  # noqa: E402
from zoo.training.loop.meter import EpochMeter, take_first_samples  # noqa: E402
from zoo.training.loop.steps import RegressionStep, StepOutput  # noqa: E402
from zoo.training.loop.train_config import TrainConfig  # noqa: E402

RDKIT = Path(__import__("rdkit").__file__).parent
TPSA = RDKIT / "Data" / "NCI" / "first_5k.tpsa.csv"
SMALL = {"hidden_channels": 16, "num_layers": 2}


def _tpsa_rows(start: int, count: int) -> list[tuple[str, str]]:
    lines = [line.strip() for line in TPSA.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [tuple(line.rsplit(",", 1)) for line in lines[start : start + count]]  # type: ignore[misc]


def _csv(path: Path, rows: list[tuple[str, str]], header: tuple[str, str] = ("SMILES", "TPSA")) -> Path:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _config(epochs: int = 2) -> TrainConfig:
    return TrainConfig(epochs=epochs, batch_size=16, lr=3e-3, progress=False, plot=True, seed=0)


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    """gin3 fine-tuned on 48 NCI molecules' TPSA, validated on 16 others (a separate file)."""
    root = tmp_path_factory.mktemp("mol")
    train = _csv(root / "train.csv", _tpsa_rows(0, 48))
    val = _csv(root / "val.csv", _tpsa_rows(100, 16))
    options = FinetuneOptions(val_data=str(val), model_kwargs=SMALL, post_training=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bare architecture: trained from scratch
        result = finetune_with_config("gin3", train, root / "run", options, config=_config())
    return result, val


def test_numeric_labels_regress_in_the_users_units(regression_run):
    import zoo
    from zoo.loading.smiles import predict_molecules

    result, val = regression_run
    assert {"val_mae", "val_rmse", "val_r2", "train_mae"} <= set(result.metrics)
    config = json.loads((result.out / "config.json").read_text())
    assert config["head"] == "graph_regression" and config["input_format"] == INPUT_FORMAT
    assert config["target"]["name"] == "TPSA" and config["target"]["std"] > 0
    model = zoo.load(result.out)
    rows = _tpsa_rows(100, 16)
    predicted = torch.tensor(predict_molecules(model, [s for s, _ in rows]))
    truth = torch.tensor([float(v) for _, v in rows])
    # the saved model (standardisation folded into its head) reproduces the run's own validation MAE
    assert (predicted - truth).abs().mean().item() == pytest.approx(result.metrics["val_mae"], rel=1e-4)
    card = (result.out / "README.md").read_text()
    assert "regression of 'TPSA'" in card and "val_rmse" in card and (result.out / "curves.png").is_file()


def test_zoo_predict_takes_smiles(regression_run, capsys):
    result, _ = regression_run
    assert main(["predict", str(result.out), "CCO", "c1ccccc1O"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["CCO", "c1ccccc1O"]
    assert all(line.endswith("(TPSA)") and math.isfinite(float(line.split("\t")[1].split()[0])) for line in lines)
    assert main(["predict", str(result.out), "CCO", "C1CC("]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "zoo: error: SMILES[1] 'C1CC(' is not a usable SMILES (RDKit cannot parse it); check it"


def test_string_labels_classify(tmp_path, capsys):
    rows = [(smiles, "polar" if float(value) > 40 else "apolar") for smiles, value in _tpsa_rows(0, 40)]
    path = _csv(tmp_path / "classes.csv", rows, ("smiles", "kind"))
    options = FinetuneOptions(model_kwargs=SMALL, post_training=False, val_fraction=0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = finetune_with_config("gin_sum", path, tmp_path / "run", options, config=_config(1))
    assert "val_acc" in result.metrics and "val_mae" not in result.metrics
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["class_names"] == ["apolar", "polar"] and config["head"] == "graph_classification"
    assert "target" not in config
    assert main(["predict", str(tmp_path / "run"), "CCO", "--topk", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "CCO" and printed[1].split()[-1] in ("apolar", "polar") and len(printed) == 2


def test_task_overrides_and_label_field(tmp_path):
    rows = [(smiles, value, str(i % 3)) for i, (smiles, value) in enumerate(_tpsa_rows(0, 30))]
    path = tmp_path / "three.csv"
    with open(path, "w", newline="") as file:
        csv.writer(file).writerows([("Smiles", "tpsa", "group"), *rows])
    with pytest.raises(DataError, match="name the label with --label-field"):
        molecule_source(path)
    groups = molecule_source(path, MoleculeOptions(label_field="GROUP"))
    assert groups.target is not None  # digits are numbers: a regression unless told
    classes = molecule_source(path, MoleculeOptions(label_field="group", task="classification"))
    assert classes.class_names == ["0", "1", "2"] and classes.num_classes == 3


def test_bad_smiles_refused_by_line_or_skipped_and_counted(tmp_path, capsys):
    rows = _tpsa_rows(0, 20)
    rows[6] = ("C1CC(", "12.0")
    path = _csv(tmp_path / "bad.csv", rows)
    with pytest.raises(DataError, match=r"bad.csv, line 8: the molecule is not usable \(RDKit cannot parse it\)"):
        molecule_source(path)
    code = main(["finetune", "gin_sum", "--data", str(path), "--out", str(tmp_path / "out"), "--epochs", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--skip-bad-rows" in err
    with pytest.warns(UserWarning, match=r"skipped 1 unusable molecule \(lines 8\)"):
        source = molecule_source(path, MoleculeOptions(skip_bad_rows=True))
    assert source.num_samples == 19 and source.skipped == 1 and "1 skipped" in source.description


def test_without_rdkit_one_line_names_the_extra(tmp_path, monkeypatch):
    path = _csv(tmp_path / "m.csv", _tpsa_rows(0, 4))
    monkeypatch.setitem(sys.modules, "rdkit", None)
    with pytest.raises(ZooError, match=r"pip install 'zoo\[chem\]'"):
        molecule_source(path)


def test_sdf_with_label_field(tmp_path):
    from rdkit import Chem

    path = tmp_path / "mols.sdf"
    writer = Chem.SDWriter(str(path))
    for i, (smiles, value) in enumerate(_tpsa_rows(0, 12)):
        mol = Chem.MolFromSmiles(smiles)
        mol.SetProp("TPSA", value)
        mol.SetProp("series", "ab"[i % 2])
        writer.write(mol)
    writer.close()
    with pytest.raises(DataError, match=r"--label-field \(fields: \['TPSA', 'series'\]\)"):
        molecule_source(path)
    source = molecule_source(path, MoleculeOptions(label_field="TPSA"))
    assert source.target["name"] == "TPSA" and source.num_samples == 12 and source.edge_dim > 0
    assert molecule_source(path, MoleculeOptions(label_field="series")).class_names == ["a", "b"]


def test_scaffold_split_keeps_scaffolds_apart():
    from rdkit.Chem.Scaffolds import MurckoScaffold

    smiles = [s for s, _ in _tpsa_rows(0, 200)]
    train, val = scaffold_split(smiles, 0.2, seed=0)
    assert sorted(train + val) == list(range(200)) and 30 <= len(val) <= 40
    scaffold = [MurckoScaffold.MurckoScaffoldSmiles(smiles=s) for s in smiles]
    assert not {scaffold[i] for i in train} & {scaffold[i] for i in val}
    assert scaffold_split(smiles, 0.2, seed=0) == (train, val) and scaffold_split(smiles, 0.2, seed=1) != (train, val)


def test_regression_metrics_match_scikit_learn():
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

    torch.manual_seed(0)
    targets, predictions = torch.randn(37) * 5 + 3, torch.randn(37) * 5 + 3
    model = torch.nn.Identity()
    step = RegressionStep(mean=3.0, std=5.0)
    meter = EpochMeter()
    for chunk in range(0, 37, 10):
        standard = (predictions[chunk : chunk + 10] - 3.0) / 5.0
        out = step(model, (standard.unsqueeze(1), targets[chunk : chunk + 10]))
        meter.update(out.loss, len(standard), None, None, out.logs)
    result = meter.result("val")
    assert result["val_mae"] == pytest.approx(mean_absolute_error(targets, predictions), rel=1e-5)
    assert result["val_rmse"] == pytest.approx(mean_squared_error(targets, predictions) ** 0.5, rel=1e-5)
    assert result["val_r2"] == pytest.approx(r2_score(targets, predictions), rel=1e-5)
    assert result["val_loss"] == pytest.approx(float((((predictions - targets) / 5) ** 2).mean()), rel=1e-5)
    padded = take_first_samples(step(model, (torch.zeros(4, 1), torch.tensor([3.0, 8.0, 0.0, 0.0]))), 2)
    assert padded.loss.item() == pytest.approx(0.5) and float(padded.logs["sum/count"]) == 2


def test_regression_step_huber_and_refusals():
    step = RegressionStep(loss="huber")
    out = step(torch.nn.Identity(), (torch.tensor([[3.0]]), torch.tensor([0.0])))
    assert isinstance(out, StepOutput) and out.loss.item() == pytest.approx(2.5)
    with pytest.raises(ZooError, match="std > 0"):
        RegressionStep(std=0.0)


def test_saved_target_is_checked(regression_run, tmp_path):
    import shutil

    import zoo

    result, _ = regression_run
    copy = Path(shutil.copytree(result.out, tmp_path / "copy", ignore=shutil.ignore_patterns("checkpoints")))
    config = json.loads((copy / "config.json").read_text())
    config["target"]["std"] = 0
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match="'target.std' must be positive"):
        zoo.load(copy)


def test_smiles_batch_bounds():
    with pytest.raises(ZooError, match=r"smiles\[0\] 'x' is not a usable SMILES"):
        smiles_batch(["x"], "smiles")
    with pytest.raises(ZooError, match="a SMILES must be a string"):
        smiles_batch([3], "smiles")  # type: ignore[list-item]
    assert smiles_batch(["CCO", "c1ccccc1"], "smiles").num_graphs == 2


def test_the_server_takes_smiles_on_v1_and_v2(regression_run):
    import httpx
    import tritonclient.http as triton
    from serve_support import running

    import zoo
    import zoo.serve
    from zoo.loading.smiles import predict_molecules

    result, _ = regression_run
    expected = predict_molecules(zoo.load(result.out), ["CCO", "c1ccccc1O"])
    app = zoo.serve.app(str(result.out), max_batch=4, max_wait_ms=5, threads=1)
    with running(app) as url:
        name = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
        answer = httpx.post(f"{url}/v1/models/{name}:predict", json={"smiles": ["CCO", "c1ccccc1O"]}, timeout=30)
        assert answer.status_code == 200, answer.text
        values = [p["value"] for p in answer.json()["predictions"]]
        assert values == pytest.approx(expected, rel=1e-5) and answer.json()["predictions"][0]["target"] == "TPSA"
        bad = httpx.post(f"{url}/v1/models/{name}:predict", json={"smiles": ["CCO", "C1CC("]}, timeout=30)
        assert bad.status_code == 400 and "'C1CC(' is not a usable SMILES" in bad.json()["error"]
        client = triton.InferenceServerClient(url.removeprefix("http://"))
        smiles = triton.InferInput("smiles", [2], "BYTES")
        smiles.set_data_from_numpy(__import__("numpy").array([b"CCO", b"c1ccccc1O"], dtype=object))
        out = client.infer(name, [smiles]).as_numpy("prediction")
        assert out.reshape(-1).tolist() == pytest.approx(expected, rel=1e-5)
        assert httpx.get(f"{url}/v1/models", timeout=30).status_code == 200  # still serving


def test_two_writings_of_a_stereocentre_are_one_molecule_to_the_model():
    """RDKit's chiral tag (PyG's atom feature) follows the order the bonds were written: these two
    writings of (S)-butan-2-ol tag their stereocentre oppositely, and the graphs and answers
    must still be one; the other enantiomer stays another molecule."""
    from rdkit import Chem

    same = ["CC[C@H](C)O", "O[C@@H](C)CC"]
    tags = [[a.GetChiralTag() for a in Chem.MolFromSmiles(s).GetAtoms() if a.GetChiralTag()] for s in same]
    assert tags[0] != tags[1] and len({Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in same}) == 1
    first, second, other = (smiles_batch([s]) for s in (*same, "CC[C@@H](C)O"))
    assert torch.equal(first.x, second.x) and torch.equal(first.edge_index, second.edge_index)
    assert not torch.equal(first.x, other.x)
    torch.manual_seed(0)
    model = zoo.load("gin3", pretrained=False, num_classes=1, head="graph_regression", in_channels=first.x.shape[1],
                     edge_dim=first.edge_attr.shape[1]).eval()  # fmt: skip
    with torch.inference_mode():
        assert torch.equal(model(first), model(second))
    assert smiles_batch(["OCC"]).x.shape[0] == 3  # no stereocentre: read as written


def test_molecule_recipe_tiny(tmp_path):
    from zoo.training.recipes import molecule_weights

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entry = molecule_weights.run("chembl2321810", epochs=1, limit=40, out=str(tmp_path))
    assert entry["input_format"] == INPUT_FORMAT and entry["target"]["name"] == "Act"
    assert molecule_weights.START["chembl2321810"] == "gin3.moses_descriptors_logp"
    backbone = zoo.load("gin3.moses_descriptors_logp").pretrained_cfg["model_kwargs"]
    assert entry["model_kwargs"] == backbone and entry["num_classes"] == 1  # the backbone's body, a fresh head
    card = (tmp_path / "gin3.chembl2321810.md").read_text()
    assert "fine-tuned from `gin3.moses_descriptors_logp`" in card and "40 train" in card
    assert "## The fine-tuning run" in card and "- defaults for molecules" in card
    assert "## Comparison over three scaffold splits" in card and "| chemprop D-MPNN (its command line) |" in card
    assert json.loads((tmp_path / "gin3.chembl2321810.json").read_text())[0]["target"] == entry["target"]
    from safetensors.torch import load_file

    model = zoo.load("gin3", pretrained=False, num_classes=1, **entry["model_kwargs"])
    model.load_state_dict(load_file(tmp_path / entry["file"]))  # the published weights fit what the entry builds


def test_molecule_card_comparison_reads_the_recorded_runs(tmp_path):
    from zoo.training.recipes.molecule_weights import comparison_section

    (tmp_path / "backbone-vs-scratch.csv").write_text(
        "set,split,seed,training_molecules,model,test_rmse,val_rmse\n"
        + "".join(f"freesolv,{k},{s},all,gin3 from scratch,{1 + k + s / 10},2.0\n" for k in range(3) for s in range(3))
        + "freesolv,0,0,100,gin3 from scratch,9.0,9.0\n"  # a small-data run: not in the table
    )
    (tmp_path / "chemprop-recorded.csv").write_text("set,split,seed,test_rmse\nfreesolv,0,0,3.5\n")
    table = "\n".join(comparison_section("freesolv", tmp_path))
    assert (
        "| gin3 from scratch | 1.100 (1.000-1.200) | 2.100 (2.000-2.200) | 3.100 (3.000-3.200) | 2.100 ± 1.000 | 2.000 | 9 |"
        in table
    )
    assert "| chemprop D-MPNN (its command line) | 3.500 (3.500-3.500) | - | - | 3.500 | - | 1 |" in table
    (tmp_path / "chemprop-recorded.csv").unlink()
    assert "chemprop-recorded.csv is missing" in comparison_section("freesolv", tmp_path)[0]


@pytest.mark.parametrize("name", ["gin3.nci_tpsa", "gin3.chembl2321810", "gin3.freesolv", "gin3.solubility"])
def test_bundled_molecule_weights_predict_by_name(name, capsys):
    from zoo.store import weight_entries

    info = weight_entries.info(name)
    assert info.input_format == INPUT_FORMAT and info.target is not None
    assert main(["predict", name, "CCO", "c1ccccc1O"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.endswith(f"({info.target['name']})") for line in lines)


def test_jsonl_molecules(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"SMILES": s, "tpsa": float(v)}) + "\n" for s, v in _tpsa_rows(0, 10)))
    source = molecule_source(path)
    assert source.num_samples == 10 and source.target["name"] == "tpsa"
    path.write_text(path.read_text() + '{"SMILES": "CCO"}\n')
    with pytest.raises(DataError, match=r"m.jsonl, line 11: no label 'tpsa'; found the keys \['SMILES'\]"):
        molecule_source(path)


def test_finetune_split_scaffold_holds_out_whole_scaffolds(tmp_path):
    path = _csv(tmp_path / "m.csv", _tpsa_rows(0, 60))
    source = molecule_source(path, MoleculeOptions(split="scaffold"))
    train, val = source.split(0.2, seed=3)
    expected_train, expected_val = scaffold_split(source.smiles, 0.2, 3)
    held_out = source.make_subset(expected_val, None)
    assert len(train) == len(expected_train) and len(val) == len(expected_val) > 0
    assert all(val[i] is held_out[i] for i in range(len(val)))  # the very molecules scaffold_split holds out
    random_train, _ = molecule_source(path).split(0.2, seed=3)
    assert [float(g.y) for g in train] != [float(g.y) for g in random_train]


def test_molecules_get_training_defaults_by_size_and_a_flag_overrides_each():
    from zoo.training.finetune.defaults import MOLECULE_EPOCHS, data_defaults, with_data_defaults

    small = molecule_source(_csv(Path(tempfile.mkdtemp()) / "m.csv", _tpsa_rows(0, 40)))
    low, high = MOLECULE_EPOCHS
    assert data_defaults(small, 100, 64)["epochs"] == high  # 2 steps an epoch: the most epochs
    assert data_defaults(small, 100_000, 64)["epochs"] == low  # 1,563 steps an epoch: the fewest
    assert data_defaults(small, 1_600, 64)["epochs"] == 120  # 25 steps an epoch: 3,000 steps in 120
    # no early stopping: the schedule runs to its end, the best epoch on validation is kept
    assert "early_stopping_patience" not in data_defaults(small, 1_600, 64)
    config, note = with_data_defaults(TrainConfig(epochs=3), small, list(range(800)), given={"epochs"})
    assert config.epochs == 3 and config.warmup_epochs < 3 and config.lr == 1e-3 and config.clip_grad_norm
    assert note.startswith("defaults for molecules (800 training graphs")
    assert "epochs" not in [item.split()[0] for item in note.split(": ")[1].split(", ")]
    everything = {f.name for f in dataclasses.fields(TrainConfig)}
    assert with_data_defaults(TrainConfig(), small, list(range(800)), everything) == (TrainConfig(), None)


def test_zoo_finetune_on_molecules_keeps_the_flags_given_and_says_the_rest(tmp_path, capsys):
    data = _csv(tmp_path / "m.csv", _tpsa_rows(0, 40))
    argv = ["finetune", "gin3", "--data", str(data), "--out", str(tmp_path / "run"), "--epochs", "2"]
    argv += ["--model-kwargs", json.dumps(SMALL), "--no-post-training", "--no-tensorboard", "--lr", "0.003"]
    with pytest.warns(UserWarning, match="bare architecture") as caught:
        assert main(argv) == 0
    printed = capsys.readouterr().out
    # the bare architecture's hint names the molecule weights, not the triangle counter
    hint = next(str(w.message) for w in caught if "bare architecture" in str(w.message))
    assert "e.g. gin3." in hint and "gin3.triangles_er" not in hint and "gin3.fmnist" not in hint
    line = next(line for line in printed.splitlines() if line.startswith("defaults for molecules"))
    shown = [item.split()[0] for item in line.split(": ")[1].split(", ")]
    assert "warmup epochs 0.2" in line and "clip grad norm 5" in line and "lr" not in shown and "epochs" not in shown
    card = (tmp_path / "run" / "README.md").read_text()
    assert line in card and "lr 0.003" in card and "- epochs run: 2" in card


def test_more_real_molecule_sets_ship_in_wheels():
    from zoo.training.data.molecules.molecule_sets import benchmark

    source, (train, val, test) = benchmark("freesolv")
    assert source.num_samples == 642 and source.target["name"] == "expt" and len(test) == 64
    source, (train, val, test) = benchmark("solubility")  # the publisher's 257 test molecules, last in the file
    assert source.num_samples == 1282 and test == list(range(1025, 1282)) and not set(train + val) & set(test)


def test_another_split_seed_gives_another_scaffold_split():
    """`benchmark(name, split_seed)`: a robustness check on other splits, each scaffold-disjoint."""
    from rdkit.Chem.Scaffolds import MurckoScaffold

    from zoo.training.data.molecules.molecule_sets import benchmark

    source, cards = benchmark("freesolv")
    _, other = benchmark("freesolv", 1)
    assert other != cards and sorted(sum(other, [])) == list(range(642)) and len(other[2]) == len(cards[2])

    def scaffolds(indices: list[int]) -> set[str]:
        return {MurckoScaffold.MurckoScaffoldSmiles(smiles=source.smiles[i], includeChirality=False) for i in indices}

    train, val, test = map(scaffolds, other)
    assert not (train | val) & test and not train & val


def test_a_classification_set_of_real_molecules():
    """The solubility set's own classes, the same molecules and test split; scored by accuracy and macro F1."""
    import zoo
    from zoo.training.data.molecules.molecule_sets import benchmark
    from zoo.training.recipes.evaluate import evaluate

    source, (train, val, test) = benchmark("solubility-class")
    assert source.target is None and source.class_names == ["(A) low", "(B) medium", "(C) high"]
    assert source.num_samples == 1282 and test == list(range(1025, 1282)) and not set(train + val) & set(test)
    torch.manual_seed(0)
    model = zoo.load("gin_sum", pretrained=False, num_classes=3, in_channels=source.in_chans,
                     edge_dim=source.edge_dim, hidden_channels=8, num_layers=1)  # fmt: skip
    scores = evaluate(model, "solubility-class", limit=40)
    assert set(scores) == {"top1", "loss", "f1_macro"} and 0 <= scores["top1"] <= 100 and 0 <= scores["f1_macro"] <= 1


def test_a_run_states_the_size_its_defaults_gave(tmp_path):
    """zoo finetune of a bare graph architecture writes the size its defaults gave into the run's
    model_kwargs, so the folder builds the same model after the defaults change (gin3's did)."""
    path = _csv(tmp_path / "t.csv", _tpsa_rows(0, 24), ("smiles", "TPSA"))
    options = FinetuneOptions(post_training=False, val_fraction=0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = finetune_with_config("gin3", path, tmp_path / "run", options, config=_config(1))
    kwargs = json.loads((result.out / "config.json").read_text())["model_kwargs"]
    assert (kwargs["hidden_channels"], kwargs["num_layers"]) == (96, 3)
    assert zoo.load(result.out).size_kwargs == {"hidden_channels": 96, "num_layers": 3}


@pytest.mark.parametrize("text", ["CCO c1ccccc1", "CCO\tc1ccccc1"])
def test_a_smiles_with_a_space_is_refused_not_read_up_to_it(text: str) -> None:
    pytest.importorskip("rdkit")
    from zoo.errors import InvalidArgumentError
    from zoo.loading.smiles import smiles_batch

    with pytest.raises(InvalidArgumentError, match=r"SMILES\[0\] .* \(it holds a (space|tab): one SMILES per molecule"):
        smiles_batch([text])


def test_the_bare_gin3_hint_names_the_molecule_backbone_first(tmp_path):
    """Fine-tuning the bare architecture on molecules trains from scratch, and its warning names
    the pretrained backbone (the weights trained on many named targets) before any single-property entry."""
    from zoo.training.finetune.finetuning import load_for_data

    source = molecule_source(_csv(tmp_path / "m.csv", _tpsa_rows(0, 12)), MoleculeOptions(graph_model="gin3"))
    backbones = r"gin3\.moses_descriptors, gin3\.moses_descriptors_logp\."  # both, before single-property entries
    with pytest.warns(UserWarning, match=r"training it from scratch.*e\.g\. " + backbones):
        model, start = load_for_data("gin3", source)
    assert start is None and model.num_classes == 1
