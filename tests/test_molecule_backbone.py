"""The gin3 molecule backbone recipe (`zoo.training.recipes.molecule_backbone`) at tiny scale: a
fake MOSES wheel of 60 real SMILES (RDKit's NCI file), 5 descriptors asked (TPSA left out by
default: 4 kept), gin3 of 2 layers of 16, 20 steps. The masked loss ignores missing targets, the
descriptors are cached by their key, a run stopped by its time budget and run again ends at the
same weights as one uninterrupted, and the backbone loads and fine-tunes with a fresh head."""

from __future__ import annotations

import copy
import csv
import dataclasses
import gzip
import hashlib
import io
import itertools
import json
import math
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
import torch.nn as nn

from zoo.errors import InvalidArgumentError
from zoo.training.loop.steps import MaskedRegressionStep

pytest.importorskip("rdkit")

import zoo  # noqa: E402
from zoo.cli import main as zoo_main  # noqa: E402
from zoo.training.data.molecules.corpus import MOSES, Corpus  # noqa: E402
from zoo.training.loop.trainer import Trainer  # noqa: E402
from zoo.training.recipes import molecule_backbone as recipe  # noqa: E402

SMALL = {"num_layers": 2, "hidden_channels": 16}
NAMES = ("MolWt", "TPSA", "NumHDonors", "HeavyAtomCount", "NumRotatableBonds")
KEPT = ("MolWt", "NumHDonors", "HeavyAtomCount", "NumRotatableBonds")
CONV = "convs.0.nn.lins.0.weight"


def nci_rows(count: int = 80) -> list[tuple[str, str]]:
    """(SMILES, TPSA) of the first ``count`` molecules of RDKit's ``Data/NCI/first_200.tpsa.csv``."""
    from zoo.training.data.molecules.molecule_sets import rdkit_root

    text = (rdkit_root() / "Data" / "NCI" / "first_200.tpsa.csv").read_text()
    rows = [tuple(line.rsplit(",", 1)) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return rows[:count]  # type: ignore[return-value]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Corpus, str]:
    """A zip laid out like the molsets wheel, 60 molecules in its train member, and its corpus entry."""
    smiles = [s for s, _ in nci_rows(66)]
    members = {"train": smiles[:60], "test": smiles[60:63], "test_scaffolds": smiles[63:]}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for entry in MOSES.members:
            archive.writestr(entry.path, gzip.compress(("\n".join(["SMILES", *members[entry.name]]) + "\n").encode()))
    data = buffer.getvalue()
    path = tmp_path_factory.mktemp("wheel") / "molsets-fake.whl"
    path.write_bytes(data)
    corpus = dataclasses.replace(MOSES, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    return corpus, str(path)


def settings(out: Path, wheel: tuple[Corpus, str], **changes: object) -> recipe.BackboneSettings:
    options = dict(out=str(out), molecules=60, names=NAMES, max_steps=20, batch_size=16, lr=3e-3, val_fraction=0.1)
    options |= dict(model_kwargs=SMALL, wheel=wheel[1], checkpoint_every=5, progress=False, records=False)
    return recipe.BackboneSettings(**{**options, **changes})  # type: ignore[arg-type]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(folder / "model.safetensors")


@pytest.fixture(scope="module")
def uninterrupted(wheel, tmp_path_factory) -> recipe.BackboneRun:
    """20 steps in one go, published into a weights folder of the test's own."""
    root = tmp_path_factory.mktemp("backbone")
    return recipe.run(settings(root / "run", wheel, publish=str(root / "weights")), wheel[0])


def test_the_masked_loss_ignores_missing_targets() -> None:
    torch.manual_seed(0)
    model, x, y = nn.Linear(3, 4), torch.randn(6, 3), torch.randn(6, 4)
    missing = y.clone()
    missing[1, 2], missing[4, 0], missing[3] = float("nan"), float("inf"), float("nan")  # row 3: nothing known
    out = MaskedRegressionStep()(model, (x, missing))
    present = torch.isfinite(missing)
    expected = (model(x) - y)[present].square().mean()
    assert torch.allclose(out.loss, expected) and int(out.logs["sum/count"]) == int(present.sum())
    out.loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    assert all(torch.isfinite(g).all() for g in grads)  # a NaN target adds no NaN to the gradient
    other = missing.clone()
    other[1, 2], other[4, 0] = 1e6, -1e6  # other values where the NaNs were: what a mask-free loss would use
    model.zero_grad()
    rows = [0, 1, 2, 4, 5]  # without the row that has no target at all: the same loss and gradients
    MaskedRegressionStep()(model, (x[rows], missing[rows])).loss.backward()
    assert all(torch.allclose(g, p.grad) for g, p in zip(grads, model.parameters()))
    assert not torch.allclose(MaskedRegressionStep()(model, (x, other)).loss, out.loss)


def test_standardisation_clips_and_drops_a_constant_descriptor() -> None:
    values = np.column_stack([np.arange(1000.0), np.full(1000, 3.0), np.r_[np.zeros(999), 1.0]])
    values[0, 0] = 1e9  # an outlier, clipped to the 99.5th percentile
    present = np.ones(values.shape, dtype=bool)
    present[5, 0] = False
    targets = recipe.CorpusTargets(["C"] * 1000, values, present, ("a", "constant", "rare"), 1000, "x")
    standard = recipe.standardisation(targets, np.arange(1000))
    assert standard.names == ("a", "rare") and standard.constant == ("constant",)
    assert standard.high[0] < 1000 and standard.high[1] == 1.0  # a rare fragment keeps its full range
    y = standard.apply(targets, np.arange(1000))
    assert y.shape == (1000, 2) and torch.isnan(y[5, 0]) and torch.isfinite(y[6]).all()
    column = y[:, 0][torch.isfinite(y[:, 0])]
    assert abs(float(column.mean())) < 1e-5 and float(y[0, 0]) == float(column.max())  # the outlier at the clip


def test_the_descriptors_are_cached_by_their_key(wheel, tmp_path) -> None:
    first = recipe.corpus_targets(settings(tmp_path, wheel), wheel[0])
    assert not first.reused and first.names == KEPT and first.values.shape == (60, 4)
    again = recipe.corpus_targets(settings(tmp_path, wheel), wheel[0])
    assert again.reused and np.array_equal(again.values, first.values, equal_nan=True) and again.smiles == first.smiles
    for changed in ({"seed": 1}, {"exclude": ()}, {"molecules": 50}):
        assert not recipe.corpus_targets(settings(tmp_path, wheel, **changed), wheel[0]).reused, changed
    assert recipe.corpus_targets(settings(tmp_path, wheel, molecules=50), wheel[0]).reused


def test_a_crafted_descriptor_cache_is_computed_again_not_trusted(wheel, tmp_path) -> None:
    good = recipe.corpus_targets(settings(tmp_path, wheel), wheel[0])
    with np.load(tmp_path / recipe.TARGETS_FILE, allow_pickle=False) as cache:
        arrays = {name: cache[name] for name in cache.files}
    for change in (
        {"fragments": np.arange(3)},
        {"values": arrays["values"][:5]},
        {"present": arrays["present"][:, :2]},
        {"present": arrays["present"].astype(np.int64)},  # fancy indexing where a mask belongs
        {"present": ~arrays["present"]},  # NaN where it says present: a NaN loss
        {"values": arrays["values"].astype(np.float32)},
        {"sampled": np.array(10**9)},
        {"smiles": np.array(["C" * 300] * 20_000)},  # a member larger than 60 molecules take: refused unread
    ):
        np.savez(tmp_path / recipe.TARGETS_FILE, **{**arrays, **change})
        again = recipe.corpus_targets(settings(tmp_path, wheel), wheel[0])
        assert not again.reused and np.array_equal(again.values, good.values, equal_nan=True), change


def test_brics_fragments_add_smaller_molecules_in_a_fixed_order(wheel, tmp_path) -> None:
    from rdkit import Chem

    from zoo.training.data.molecules.descriptor_sets import brics_fragments

    smiles = [s for s, _ in nci_rows(40)]
    fragments = brics_fragments(smiles, 25)
    assert len(fragments) == len(set(fragments)) == 25 and not set(fragments) & set(smiles)
    assert fragments == brics_fragments(smiles, 25, processes=2)  # the same in workers
    assert fragments[:10] == brics_fragments(smiles, 10)  # a smaller limit: the first of them
    mols = [Chem.MolFromSmiles(text) for text in fragments]
    assert all(m is not None and all(a.GetAtomicNum() > 0 for a in m.GetAtoms()) for m in mols)  # capped, no dummies
    assert brics_fragments(["CCO"], 5) == []  # nothing to break
    with_fragments = recipe.corpus_targets(settings(tmp_path, wheel, fragments=30), wheel[0])
    assert with_fragments.fragments == 30 and with_fragments.sampled == 60 and len(with_fragments.smiles) == 90
    plain = recipe.corpus_targets(settings(tmp_path, wheel), wheel[0])  # another key: computed again
    assert not plain.reused and plain.fragments == 0 and len(plain.smiles) == 60
    assert "fragments" not in settings(tmp_path, wheel).run_key(wheel[0])  # run folders from before still continue


def test_a_run_stopped_by_its_time_budget_continues_to_the_same_weights(
    wheel, uninterrupted, tmp_path, monkeypatch
) -> None:
    ticks = itertools.count()  # a clock that moves one second a call: the budget stops at a known step
    stopped = recipe.run(settings(tmp_path, wheel, time_budget_s=7), wheel[0], clock=lambda: next(ticks))
    assert stopped.stopped_by_time and stopped.steps == 6 and (tmp_path / "checkpoints" / "last.pt").is_file()
    assert "stopped by the time budget" in (tmp_path / "backbone" / "README.md").read_text()
    steps: list[int] = []
    train_step = Trainer.train_step
    monkeypatch.setattr(Trainer, "train_step", lambda self, batches: steps.append(1) or train_step(self, batches))
    resumed = recipe.run(settings(tmp_path, wheel), wheel[0])
    assert len(steps) == 14  # from the checkpoint at step 6, not from the start
    assert not resumed.stopped_by_time and resumed.steps == uninterrupted.steps == 20
    full, continued = weights(uninterrupted.folder), weights(resumed.folder)
    assert full.keys() == continued.keys() and all(torch.equal(full[k], continued[k]) for k in full)
    initial = recipe.backbone_model(4, settings(tmp_path, wheel)).state_dict()
    assert not torch.equal(full[CONV], initial[CONV])  # trained: not the seeded initialisation
    with pytest.raises(InvalidArgumentError, match=r"seed=0.*seed=1.*another --out"):
        recipe.run(settings(tmp_path, wheel, seed=1), wheel[0])
    with pytest.raises(
        InvalidArgumentError, match=r"hidden_channels.*\(gin3's size: --hidden-channels, --num-layers\)"
    ):
        recipe.run(settings(tmp_path, wheel, model_kwargs={"num_layers": 2}, hidden_channels=24), wheel[0])


def test_the_backbone_loads_and_is_published_with_its_card(uninterrupted) -> None:
    folder = uninterrupted.folder
    model = zoo.load(folder)
    assert model.num_classes == 4 and model.pretrained_cfg["input_format"] == "smiles/onehot-v1"
    assert json.loads((folder / "descriptors.json").read_text())["descriptors"].keys() == set(KEPT)
    card = (folder / "README.md").read_text()
    for fact in ("## Pretraining", "TPSA (the target of gin3.nci_tpsa)", "20 of 20", "hardware", "| MolWt |"):
        assert fact in card, fact
    entry = uninterrupted.entry
    root = Path(uninterrupted.settings.publish)
    assert entry is not None and entry["name"] == recipe.NAME and entry["num_classes"] == 4
    assert hashlib.sha256((root / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert json.loads((root / f"{recipe.NAME}.json").read_text()) == [entry]
    published = (root / entry["card"]).read_text()
    for fact in (f"sha256 {uninterrupted.corpus.sha256}", "## Standardisation", entry["recipe"], "wall time"):
        assert fact in published, fact


def test_the_backbone_names_its_outputs_and_predicts_descriptors_in_their_units(uninterrupted, monkeypatch):
    """Its target names each output (the descriptors kept) with the mean and std of its
    standardisation, so zoo.predict answers in the descriptors' units; the entry's metrics are
    what the moses-descriptors task measures on the corpus's test member, as `zoo eval` would."""
    from zoo.cli.predict_files import csv_columns
    from zoo.loading.outputs import output_meaning
    from zoo.loading.smiles import predict_molecules, smiles_batch
    from zoo.training.recipes import evaluate

    model = zoo.load(uninterrupted.folder)
    target = model.pretrained_cfg["target"]
    assert target["outputs"] == list(KEPT) and target["standardised"] and len(target["std"]) == 4
    smiles = [s for s, _ in nci_rows(3)]
    with torch.no_grad():
        raw = model(smiles_batch(smiles, "smiles")).double()
    expected = raw * torch.tensor(target["std"], dtype=torch.float64) + torch.tensor(
        target["mean"], dtype=torch.float64
    )
    assert torch.allclose(torch.tensor(predict_molecules(model, smiles), dtype=torch.float64), expected, atol=1e-4)
    meaning = output_meaning(model.pretrained_cfg)
    answer = meaning.answers(raw.float())[0]
    assert answer["outputs"] == list(KEPT) and answer["value"] == pytest.approx(expected[0].tolist(), abs=1e-4)
    assert csv_columns(meaning, 5) == list(KEPT)  # zoo predict --input's CSV: a column per descriptor
    # a new head: the descriptors' names and statistics no longer apply to its outputs
    assert zoo.load(uninterrupted.folder, num_classes=2).pretrained_cfg.get("target") is None
    entry = uninterrupted.entry
    assert entry["target"] == target and entry["eval_task"] == "moses-descriptors"
    root = Path(uninterrupted.settings.publish)
    assert evaluate.descriptor_smiles(root) == [s for s, _ in nci_rows(66)[60:63]]  # the fake test member
    shipped = evaluate.descriptor_smiles(root)  # the entry's weights/eval file, here the test's own root
    monkeypatch.setattr(evaluate, "descriptor_smiles", lambda: shipped)
    measured = evaluate.TASKS["moses-descriptors"](model, None)
    assert measured["molecules"] == 3.0 and math.isfinite(measured["mse"])
    assert measured == pytest.approx(entry["metrics"]["moses-descriptors"], rel=1e-4)
    with pytest.raises(InvalidArgumentError, match="whose target names its outputs"):
        evaluate.TASKS["moses-descriptors"](zoo.load("gin3", pretrained=False), None)


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"outputs": ["MolWt"]}, "'target.outputs' must be a list of num_classes=4 output names (1 or more)"),
        ({"outputs": ["MolWt"] * 4}, "'target.outputs' names an output more than once"),
        ({"std": [1.0, 1.0, 0.0, 1.0]}, "'target.std' must be positive"),
        ({"mean": [0.0, 1.0]}, "'target.mean' must be a finite number or a list of num_classes=4"),
        ({"outputs": None, "mean": [0.0] * 4}, "'target.mean' must be a finite number"),
        ({"outputs": []}, "'target.outputs' must be a list of num_classes=4 output names (1 or more)"),
        ({"std": [10**400, 1.0, 1.0, 1.0]}, "'target.std' must be a finite number or a list of them"),
    ],
)
def test_a_crafted_target_of_named_outputs_is_refused(uninterrupted, tmp_path, change, refusal) -> None:
    import shutil

    from zoo.errors import WeightsError

    copy = Path(shutil.copytree(uninterrupted.folder, tmp_path / "copy"))
    config = json.loads((copy / "config.json").read_text())
    config["target"] |= change
    config["target"] = {k: v for k, v in config["target"].items() if v is not None}
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match=re.escape(refusal)):
        zoo.load(copy)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_zoo_finetune_keeps_the_body_and_puts_a_fresh_head(uninterrupted, tmp_path, monkeypatch, task) -> None:
    """Regression data gets a one-output regression head; class labels a classification head
    (the backbone's own head is a regression's: its body goes under the new one)."""
    data = tmp_path / "tiny.csv"
    rows = nci_rows(100)[80:100]
    if task == "classification":
        rows = [(smiles, "polar" if float(tpsa) > 40 else "apolar") for smiles, tpsa in rows]
    with open(data, "w", newline="") as file:
        csv.writer(file).writerows([("smiles", "label"), *rows])
    seen: dict[str, dict[str, torch.Tensor]] = {}
    step = Trainer.train_step

    def first_step(self: Trainer, micro_batches: list) -> list:
        seen.setdefault("start", {k: v.detach().clone() for k, v in self.model.state_dict().items()})
        return step(self, micro_batches)

    monkeypatch.setattr(Trainer, "train_step", first_step)
    argv = ["finetune", str(uninterrupted.folder), "--data", str(data), "--out", str(tmp_path / "run"), "--epochs", "1"]
    if task == "regression":  # a regression's head never trains alone: a --head-epochs asking for it says so
        with pytest.warns(UserWarning, match=r"--head-epochs 1: no head phase runs: .*a regression's head"):
            assert zoo_main([*argv, "--no-post-training", "--no-tensorboard", "--head-epochs", "1"]) == 0
    else:
        assert zoo_main([*argv, "--no-post-training", "--no-tensorboard"]) == 0
    backbone, start = weights(uninterrupted.folder), seen["start"]
    for body in (CONV, "convs.1.nn.lins.1.weight", "norm.weight"):  # a conv of each layer, the readout's norm
        assert torch.equal(start[body], backbone[body]), body
    outputs = 1 if task == "regression" else 2
    assert start["fc.weight"].shape == (outputs, backbone["fc.weight"].shape[1]) and backbone["fc.weight"].shape[0] == 4
    tuned = zoo.load(tmp_path / "run")
    assert tuned.num_classes == outputs and tuned.pretrained_cfg["head"] == f"graph_{task}"
    assert (tuned.pretrained_cfg.get("target") is None) == (task == "classification")
    # a molecule model's fresh class head trains with the body from the first step, and the card says so
    if task == "classification":
        assert "head phase: none (molecules" in (tmp_path / "run" / "README.md").read_text()


def test_the_command_line_refuses_a_bad_value_in_one_line(capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as exit_:
        recipe.main(["--out", "x", "--val-fraction", "0.9"])
    assert exit_.value.code == 2 and "--val-fraction" in capsys.readouterr().err
    assert recipe.main(["--out", str(tmp_path / "o"), "--exclude", "TPSA,mordred:SLogPP"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "Mordred has no descriptor 'mordred:SLogPP'" in line and not (tmp_path / "o").exists()  # nothing written
    with pytest.raises(InvalidArgumentError, match=r"max_steps \(--max-steps\) must be"):
        recipe.BackboneSettings(out="x", max_steps=0)
    with pytest.raises(InvalidArgumentError, match=r"mordred \(--mordred\) must be at most .* \(100\), got 101"):
        recipe.BackboneSettings(out="x", molecules=100, mordred=101)
    with pytest.raises(InvalidArgumentError, match=r"hidden_channels \(--hidden-channels\) must be"):
        recipe.BackboneSettings(out="x", hidden_channels=0)
    with pytest.raises(SystemExit):
        recipe.main(["--out", "x", "--num-layers", "two"])
    assert "--num-layers" in capsys.readouterr().err
    # gin3's size by flag is the size by model_kwargs: the same model, the same run to continue
    sized = recipe.BackboneSettings(out="x", hidden_channels=16, num_layers=2)
    assert sized.model_kwargs == SMALL
    assert sized.run_key(MOSES) == recipe.BackboneSettings(out="x", model_kwargs=SMALL).run_key(MOSES)
    assert recipe.backbone_model(3, sized).size_kwargs == SMALL
    default = recipe.BackboneSettings(out="x").run_key(MOSES)  # naming gin3's default size continues a run without it
    assert recipe.BackboneSettings(out="x", hidden_channels=96, num_layers=3).run_key(MOSES) == default
    with pytest.raises(InvalidArgumentError, match="hidden_channels is 16 and model_kwargs says 32: give it once"):
        recipe.BackboneSettings(out="x", hidden_channels=16, model_kwargs={"hidden_channels": 32})
    for name in ("../gin3.x", "gin3.a/b", "resnet20.x", "gin3."):  # the entry's name becomes file names
        with pytest.raises(InvalidArgumentError, match=r"name \(--name\) must be gin3.TAG"):
            recipe.BackboneSettings(out="x", name=name)
    # the card's command keeps what decides the weights: a local wheel and --no-progress do not
    argv = ["--out", "o", "--wheel", "/tmp/w.whl", "--molecules", "5", "--no-progress", "--wheel=/w", "--publish"]
    assert recipe._deciding(argv) == ["--out", "o", "--molecules", "5", "--publish"]


def test_publish_never_replaces_an_entry_another_recipe_wrote(wheel, uninterrupted, tmp_path, monkeypatch) -> None:
    """--name of a property model's entry is refused before any descriptor or step is computed;
    a backbone of this recipe (its evaluation task) may be published again under its name."""
    weights_dir = tmp_path / "weights"
    weights_dir.mkdir()
    theirs = json.dumps([{"name": "gin3.solubility", "eval_task": "solubility"}])
    (weights_dir / "gin3.solubility.json").write_text(theirs)
    monkeypatch.setattr(recipe, "corpus_targets", lambda *a: pytest.fail("computed before the name was checked"))
    asked = settings(tmp_path / "run", wheel, publish=str(weights_dir), name="gin3.solubility")
    with pytest.raises(InvalidArgumentError, match=r"--name gin3.solubility: .* another recipe published"):
        recipe.run(asked, wheel[0])
    assert (weights_dir / "gin3.solubility.json").read_text() == theirs
    assert not (tmp_path / "run").exists()  # refused before the run folder was written
    ours = Path(uninterrupted.settings.publish) / f"{recipe.NAME}.json"  # a backbone entry: the check lets it pass
    recipe._check_entry_name(settings(tmp_path / "again", wheel, publish=str(ours.parent)))


def test_a_run_that_named_gins_default_size_continues_by_the_flags(tmp_path: Path) -> None:
    """A run folder whose settings name gin3's default layer count (model_kwargs given in full)
    continues with --hidden-channels alone, and refuses another width, naming the flags."""
    run = recipe.BackboneSettings(out=str(tmp_path), model_kwargs={"hidden_channels": 16})
    key = run.run_key(MOSES) | {"model_kwargs": {"hidden_channels": 16, "num_layers": 3}}
    (tmp_path / "settings.json").write_text(json.dumps(key))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    recipe._check_run_folder(recipe.BackboneSettings(out=str(tmp_path), hidden_channels=16), MOSES)
    with pytest.raises(InvalidArgumentError, match=r"\(gin3's size: --hidden-channels, --num-layers\)"):
        recipe._check_run_folder(recipe.BackboneSettings(out=str(tmp_path), hidden_channels=24), MOSES)
    (tmp_path / "settings.json").write_text(json.dumps(key | {"model_kwargs": [96]}))  # crafted: refused, no crash
    with pytest.raises(InvalidArgumentError, match="another --out"):
        recipe._check_run_folder(recipe.BackboneSettings(out=str(tmp_path), hidden_channels=16), MOSES)


def test_an_out_folder_of_a_users_files_is_left_untouched(tmp_path: Path) -> None:
    """--out naming a folder that holds a user's files (no run's settings.json) is refused before anything is written."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "backbone").mkdir()
    (mine / "notes.txt").write_text("keep")
    settings = recipe.BackboneSettings(out=str(mine))
    with pytest.raises(InvalidArgumentError, match=r"holds no backbone run \(settings.json\)"):
        recipe._check_run_folder(settings, MOSES)
    assert sorted(p.name for p in mine.iterdir()) == ["backbone", "notes.txt"]
    (mine / "settings.json").write_text("[1, 2]")  # not a run's settings
    with pytest.raises(InvalidArgumentError, match="no backbone run"):
        recipe._check_run_folder(settings, MOSES)


def test_zoo_eval_data_refuses_a_backbone_of_many_outputs_on_one_label(uninterrupted, tmp_path, capsys) -> None:
    """Scoring 4 descriptors against a file's one label column would broadcast into nonsense: refused in one line."""
    data = tmp_path / "labelled.csv"
    with open(data, "w", newline="") as file:
        csv.writer(file).writerows([("smiles", "tpsa"), *nci_rows(90)[80:90]])
    assert zoo_main(["eval", str(uninterrupted.folder), "--data", str(data), "--no-progress"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # refused before the file is read: no warning first
    assert "predicts 4 values (MolWt, NumHDonors, HeavyAtomCount, ...)" in line and "zoo finetune" in line, line


MORDRED = ("mordred:SLogP", "mordred:nAcid", "mordred:ABC", "mordred:TopoPSA(NO)")


def test_mordred_descriptors_are_mordreds_own_values_beside_rdkits() -> None:
    """``mordred:NAME`` computes Mordred's descriptor (side by side with mordred's own calculator on
    RDKit's molecule); Mordred's SLogP and TopoPSA(NO) are Crippen's logP and TPSA, as RDKit computes them."""
    pytest.importorskip("mordred")
    from mordred import Calculator, descriptors
    from rdkit import Chem

    from zoo.training.data.molecules import corpus as corpora

    smiles = [s for s, _ in nci_rows(12)]
    found = corpora.descriptor_targets(smiles, ("MolLogP", "TPSA", *MORDRED), progress=False)
    calc = Calculator(descriptors, ignore_3D=True)
    for row, index in enumerate(found.kept):
        theirs = calc(Chem.MolFromSmiles(smiles[index])).asdict()
        for column, name in enumerate(MORDRED, 2):
            assert found.values[row, column] == pytest.approx(float(theirs[name.removeprefix("mordred:")])), name
    assert np.allclose(found.values[:, 0], found.values[:, 2]) and np.allclose(found.values[:, 1], found.values[:, 5])
    with pytest.raises(
        InvalidArgumentError, match=r"Mordred has no descriptor 'mordred:SLogPP'; did you mean mordred:SLogP"
    ):
        corpora.chosen_names(["mordred:SLogPP"])
    assert corpora.chosen_names(["MolWt"], ["mordred:ABC"]) == ("MolWt",)  # a Mordred exclusion is a known name


def test_mordred_targets_of_the_first_molecules_join_rdkits(wheel, tmp_path) -> None:
    """--mordred N: Mordred's descriptors of the first N molecules follow RDKit's, missing on the
    rest, without those of an excluded quantity (TPSA: TopoPSA too); cached under their own key."""
    pytest.importorskip("mordred")
    with_mordred = recipe.corpus_targets(settings(tmp_path, wheel, mordred=10), wheel[0])
    names = with_mordred.names
    assert names[:4] == KEPT and len(names) > 4 + 1500 and with_mordred.mordred_version
    left_out = {"mordred:TopoPSA", "mordred:TopoPSA(NO)", "mordred:SLogP", "mordred:FilterItLogS"}
    assert left_out.isdisjoint(names) and "mordred:ABC" in names
    assert with_mordred.present[:10, 4:].sum(1).min() > 1000 and not with_mordred.present[10:, 4:].any()
    assert with_mordred.present[:, :4].all()  # RDKit's of every molecule
    assert recipe.corpus_targets(settings(tmp_path, wheel, mordred=10), wheel[0]).reused
    assert not recipe.corpus_targets(settings(tmp_path, wheel), wheel[0]).reused  # another key: RDKit's alone
    assert "mordred" not in settings(tmp_path, wheel).run_key(wheel[0])  # run folders from before still continue
    assert (
        "mordred:ABC"
        not in recipe.corpus_targets(settings(tmp_path, wheel, mordred=10, exclude=("mordred:ABC",)), wheel[0]).names
    )
    with pytest.raises(InvalidArgumentError, match="by --mordred N"):  # by name they would mislabel the columns
        recipe.corpus_targets(settings(tmp_path, wheel, names=("MolWt", "mordred:ABC")), wheel[0])
    run = recipe.run(settings(tmp_path / "run", wheel, mordred=10, max_steps=4), wheel[0])
    card = (run.folder / "README.md").read_text()
    assert "Mordred descriptors of MOSES molecules" in card.splitlines()[card.splitlines().index("---", 1) + 1]
    kept = sum(name.startswith("mordred:") for name in run.standard.names)
    assert f"4 RDKit {run.versions[0]} descriptors and {kept} Mordred" in card and "first 10 molecules only" in card
    assert "of Mordred's: mordred:TopoPSA(NO), mordred:TopoPSA, mordred:SLogP, mordred:FilterItLogS" in card
    assert "mordred:SLogP" in json.loads((run.folder / "descriptors.json").read_text())["excluded"]
    assert settings(tmp_path, wheel, mordred=10).run_key(wheel[0])["mordred_version"] == run.versions[1]
    assert zoo.load(run.folder).num_classes == 4 + kept > 4


def test_mordred_missing_is_named_with_its_extra(monkeypatch) -> None:
    from zoo.errors import ZooError
    from zoo.training.data.molecules import mordred_descriptors

    monkeypatch.setitem(__import__("sys").modules, "mordred", None)  # as if not installed
    with pytest.raises(ZooError, match=re.escape("pip install 'zoo[mordred]'")):
        mordred_descriptors.require_mordred()


def test_atom_masking_hides_elements_in_training_and_nothing_in_evaluation() -> None:
    """AtomMasking zeroes about its share of the atoms (all their features), predicts their elements
    (a finite cross-entropy with gradients to the body and its node head), and in evaluation is the model itself."""
    from zoo.loading.smiles import element_channels, smiles_batch
    from zoo.training.loop.steps import forward_with_aux
    from zoo.training.recipes.atom_masking import AtomMasking

    batch = smiles_batch([smiles for smiles, _ in nci_rows(12)])
    given = batch.x.clone()
    torch.manual_seed(0)
    model = recipe.backbone_model(3, recipe.BackboneSettings(out="unused", model_kwargs=SMALL))
    masking = AtomMasking(model, 0.5)
    whole = copy.deepcopy(model).train()
    whole(batch)  # the BatchNorm statistics of one pass over the whole molecules
    seen: list[torch.Tensor] = []
    model.convs[0].register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    output, aux_loss, _ = forward_with_aux(masking.train(), batch)
    assert len(seen) == 2 and torch.equal(seen[1], batch.x)  # the masked copy, then the whole molecules
    hidden = seen[0][:, : element_channels()].sum(-1) == 0  # no element: a hidden atom
    assert output.shape == (12, 3) and 0.3 < hidden.float().mean() < 0.7  # about half of the atoms, not all
    assert not seen[0][hidden].any()  # every feature of a hidden atom, not only its element
    assert torch.equal(seen[0][~hidden], batch.x[~hidden]) and torch.equal(batch.x, given)  # the batch untouched
    assert aux_loss is not None and torch.isfinite(aux_loss) and aux_loss > 0
    stats = [(k, v) for k, v in model.state_dict().items() if "running_" in k]
    assert stats and all(torch.equal(v, whole.state_dict()[k]) for k, v in stats)  # the masked copy left them alone
    assert all(m.training for m in model.modules())  # BatchNorm back in training mode
    aux_loss.backward()
    assert model.convs[0].nn.lins[0].weight.grad.abs().sum() > 0 and masking.node_head.weight.grad is not None
    masking.eval(), seen.clear()
    output, aux_loss, _ = forward_with_aux(masking, batch)
    assert aux_loss is None and torch.equal(seen[0], batch.x) and torch.equal(output, model(batch))
    with pytest.raises(InvalidArgumentError, match=r"--mask-atoms"):
        AtomMasking(model, 1.0)


def test_a_backbone_pretrained_with_atom_masking_keeps_only_the_body(wheel, uninterrupted, tmp_path) -> None:
    """--mask-atoms trains the node head beside the descriptors and saves gin3 alone (no node head),
    says so in the card, logs the masked atoms' loss, and is another run: a folder without it is not continued."""
    masked = recipe.run(settings(tmp_path, wheel, mask_atoms=0.15), wheel[0])
    kept = weights(masked.folder)
    assert kept.keys() == weights(uninterrupted.folder).keys() and not any("node_head" in k for k in kept)
    assert not torch.equal(kept[CONV], weights(uninterrupted.folder)[CONV])  # the node loss moved the body
    assert zoo.load(masked.folder).num_classes == 4
    assert (
        "15% of the atoms hidden, their elements predicted (AtomMasking)" in (masked.folder / "README.md").read_text()
    )
    assert "train_aux_loss" in (tmp_path / "metrics.csv").read_text().splitlines()[0]
    with pytest.raises(InvalidArgumentError, match=r"mask_atoms=0.15.*mask_atoms=None.*another --out"):
        recipe.run(settings(tmp_path, wheel), wheel[0])
    with pytest.raises(InvalidArgumentError, match=r"mask_atoms \(--mask-atoms\) must be in \[0, 0.5\]"):
        settings(tmp_path, wheel, mask_atoms=0.9)


@pytest.mark.parametrize("option", [{"fragments": 100}, {"mordred": 10}, {"mask_atoms": 0.15}])
def test_a_run_with_a_later_option_is_not_continued_without_it(tmp_path: Path, option: dict) -> None:
    """An option left out of the run key when off (fragments, mordred, mask_atoms) still tells two runs apart:
    a folder trained with it is not continued by a command without it (other data or loss on the same checkpoint)."""
    with_it = recipe.BackboneSettings(out=str(tmp_path), **option)
    key = with_it.run_key(MOSES) if "mordred" not in option else recipe.BackboneSettings(out=str(tmp_path)).run_key(
        MOSES) | option  # fmt: skip
    (tmp_path / "settings.json").write_text(json.dumps(key))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    name = next(iter(option))
    with pytest.raises(InvalidArgumentError, match=rf"{name}={option[name]!r}.*{name}=None.*another --out"):
        recipe._check_run_folder(recipe.BackboneSettings(out=str(tmp_path)), MOSES)
