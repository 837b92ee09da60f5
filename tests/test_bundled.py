"""The weights the project trains itself: every bundled entry loads offline, matches its sha256,
size and card, and re-measures its card's metrics on a slice of the test set; `zoo eval`;
each recipe runs end to end on a tiny budget; the demo runs on a reduced one."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import shlex
from importlib import resources
from pathlib import Path

import pytest
import safetensors.torch
import torch

import zoo
from zoo import cli
from zoo.store import weight_entries
from zoo.tokenizer import ByteTokenizer
from zoo.training.data import builtin as data
from zoo.training.recipes import dbn_weights as dbn_recipe
from zoo.training.recipes import evaluate, publish
from zoo.training.recipes import fmnist as fmnist_recipe
from zoo.training.recipes import graph_weights as graph_recipe
from zoo.training.recipes import moe_lm as moe_lm_recipe

WEIGHTS = Path(str(resources.files("zoo.weights")))
BUNDLED = [name for name in zoo.list_models(pretrained=True) if weight_entries.info(name).file]
MAX_TEST_SAMPLES = 2000  # the slice the test re-measures; cards claim a [:N] slice for bigger test sets


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOO_OFFLINE", "1")


def test_bundled_weights_include_each_recipe_family() -> None:
    """The CNNs, the MoE image classifier, both DBNs, the graph model and the MoE language model (with its dense baseline) ship
    trained weights (the list grows with the recipes)."""
    expected = {
        "resnet20.fmnist",
        "resnet56.fmnist",
        "seresnet20.fmnist",
        "densenet_bc_40.fmnist",
        "mobilenet_v2_cifar.fmnist",
        "moe_vit.fmnist",
        "dbn.digits",
        "dbn.fmnist",
        "gin3.triangles_er",
        "gin3.fmnist",
        "moe_lm.stdlib",
        "moe_lm.stdlib_dense",
    }
    assert expected <= set(BUNDLED), BUNDLED
    assert weight_entries.info("moe_lm").name == "moe_lm.stdlib"
    assert weight_entries.info("gin3").name == "gin3.triangles_er"  # one default per architecture
    assert weight_entries.info("resnet20").name == "resnet20.fmnist"  # the architecture's default weights


@pytest.mark.parametrize("name", BUNDLED)
def test_entry_file_card_and_recipe_agree(name: str) -> None:
    info = weight_entries.info(name)
    path = WEIGHTS / info.file
    blob = path.read_bytes()
    assert hashlib.sha256(blob).hexdigest() == info.sha256 and len(blob) == info.file_size
    tensors = safetensors.torch.load(blob)
    assert (
        sum(t.numel() for k, t in tensors.items() if "running" not in k and "num_batches" not in k) == info.num_params
    )
    card = info.card_text()
    for fact in (info.sha256, info.recipe, "## Data", "hardware", "wall time", "date"):
        assert fact in card, f"the card of {name} lacks {fact!r}"
    for task, values in info.metrics.items():
        for metric, value in values.items():
            assert f"| {task} | {metric} | {value:g} |" in card
    assert (WEIGHTS / f"{name}.png").is_file(), "no training-curve PNG"
    command = shlex.split(info.recipe)
    assert command[:2] == ["python", "-m"] and command[2].startswith("zoo.training.recipes.")
    importlib.import_module(command[2])  # the recipe exists
    assert info.eval_task in evaluate.TASKS


@pytest.mark.parametrize("name", BUNDLED)
def test_loads_offline_and_reproduces_its_card_on_a_slice(name: str) -> None:
    """The card's metrics on a fixed slice (the first N test samples), or on the whole test set
    when it is small; tolerance: `evaluate.within_tolerance` (0.2 points of accuracy, 1% else)."""
    info = weight_entries.info(name)
    model = zoo.load(name)
    assert model.pretrained_cfg["weights"] == name
    slices = [k for k in info.metrics if k.startswith(f"{info.eval_task}[:")]
    limit = int(slices[0].split("[:")[1].rstrip("]")) if slices else None
    assert limit is None or limit <= MAX_TEST_SAMPLES
    measured = evaluate.evaluate(model, info.eval_task, limit)
    for metric, claimed in info.metrics[evaluate.task_key(info.eval_task, limit)].items():
        assert evaluate.within_tolerance(metric, measured[metric], claimed), (metric, measured[metric], claimed)


def test_zoo_eval_passes_and_fails_loudly(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["eval", "dbn.digits"]) == 0
    assert "every metric matches its card" in capsys.readouterr().out
    info = weight_entries.info("dbn.digits")
    claimed = info.metrics["digits-nudged"]["top1"]
    wrong = {**info.metrics, "digits-nudged": {**info.metrics["digits-nudged"], "top1": claimed + 0.3}}
    monkeypatch.setitem(weight_entries._weights, "dbn.digits", type(info)(**{**info.__dict__, "metrics": wrong}))
    assert cli.main(["eval", "dbn.digits"]) == 1
    captured = capsys.readouterr()
    assert "differs from the card" in captured.out and "does not reproduce its card" in captured.err
    assert cli.main(["eval", "dbn.digits", "--limit", "7"]) == 2
    assert "claims nothing for 'digits-nudged[:7]'" in capsys.readouterr().err


def test_recipe_command_line(capsys: pytest.CaptureFixture) -> None:
    """`publish.recipe_main`: the budget flag and the rerun command reach `run`, every entry it
    returns is printed, and --help shows the docstring's whole first paragraph."""
    calls = []

    def run(target: str, **options: object) -> list[dict]:
        calls.append((target, options))
        return [{"name": "a.x", "metrics": {"t": {"m": 1.0}}}, {"name": "a.y", "metrics": {}}]

    doc = "Trains a, over\ntwo lines.\n\nDetails."
    assert (
        publish.recipe_main("m", doc, ["x"], run, ["x", "--steps", "3", "--out", "o"], budget="steps", limit=False) == 0
    )
    assert calls == [("x", {"steps": 3, "out": "o", "command": "python -m m x --steps 3 --out o"})]
    assert capsys.readouterr().out.splitlines() == ["a.x: test {'t': {'m': 1.0}}", "a.y: test {}"]
    publish.recipe_main("m", doc, ["x"], run, ["x", "--run-dir", "r", "--epochs=2"], resumable=True)
    assert calls[-1] == (
        "x",
        {
            "epochs": 2,
            "limit": None,
            "run_dir": "r",
            "out": str(publish.WEIGHTS_DIR),
            "command": "python -m m x --epochs=2",
        },
    )  # where checkpoints went is not the recipe
    publish.recipe_main("m", doc, ["x"], run, ["x", "--num-workers", "4"], workers=True)
    assert calls[-1] == (
        "x",
        {
            "epochs": None,
            "limit": None,
            "num_workers": 4,
            "out": str(publish.WEIGHTS_DIR),
            "command": "python -m m x --num-workers 4",
        },
    )  # workers draw their own augmentations
    with pytest.raises(SystemExit):
        publish.recipe_main("m", doc, ["x"], run, ["--help"])
    assert "Trains a, over two lines." in capsys.readouterr().out


def test_tolerances() -> None:
    assert evaluate.within_tolerance("top1", 93.6, 93.79) and not evaluate.within_tolerance("top1", 93.5, 93.71)
    assert evaluate.within_tolerance("nmse", 0.0101, 0.0100) and not evaluate.within_tolerance("nmse", 0.0102, 0.01)


def _published(entry: dict, out: Path) -> None:
    """A recipe's output: weights with the entry's hash, a card naming it, curves, the entry."""
    name = entry["name"]
    assert hashlib.sha256((out / f"{name}.safetensors").read_bytes()).hexdigest() == entry["sha256"]
    assert entry["sha256"] in (out / f"{name}.md").read_text()
    assert (out / f"{name}.png").is_file() and (out / f"{name}.json").is_file()
    info = weight_entries.WeightInfo(**entry)
    state = safetensors.torch.load_file(out / info.file)
    model = zoo.load(info.arch, pretrained=False, num_classes=info.num_classes, **info.model_kwargs)
    model.load_state_dict(state)
    model.pretrained_cfg["preprocess"] = info.preprocess
    measured = evaluate.evaluate(model, info.eval_task)
    assert measured == pytest.approx(entry["metrics"][info.eval_task], abs=1e-3)


def test_dbn_recipe_tiny(tmp_path: Path) -> None:
    entry = dbn_recipe.run("digits", epochs=1, limit=300, out=str(tmp_path))
    assert entry["name"] == "dbn.digits" and entry["model_kwargs"] == {"sizes": [64, 256, 256]}
    _published(entry, tmp_path)


def test_graph_recipes_tiny(tmp_path: Path) -> None:
    entry = graph_recipe.run("triangles-er", epochs=1, out=str(tmp_path))
    assert entry["model_kwargs"]["head"] == "graph_regression" and entry["num_classes"] == 1
    card = (tmp_path / entry["card"]).read_text()
    assert "every normalisation layer frozen" in card and "epoch 1 on the curves" not in card  # 1 + 1 epochs
    _published(entry, tmp_path)
    entry = graph_recipe.run("fashion-mnist-graphs", epochs=1, limit=240, out=str(tmp_path))
    assert entry["name"] == "gin3.fmnist" and entry["num_classes"] == 10
    assert set(entry["metrics"]) == {"fashion-mnist-graphs", "fashion-mnist-graphs[:1000]"}
    assert "240 images of the official training split, 20 of them held out" in (tmp_path / entry["card"]).read_text()
    _published(entry, tmp_path)


def test_graph_refinement_keeps_normalisation_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refinement stage trains with every norm layer in eval mode (running statistics and
    affine parameters fixed) and hands the layers back trainable."""
    from torch.nn.modules.batchnorm import _NormBase

    train = graph_recipe.TriangleCounting("er", "train", num_graphs=400, pre_transform=graph_recipe.AddTriangles())
    model = zoo.load("gin3", pretrained=False, num_classes=1, **graph_recipe.RECIPES["triangles-er"].model_kwargs)
    config = graph_recipe.RECIPES["triangles-er"].refine.for_epochs(1)
    graph_recipe._fit(model, config.for_epochs(1), train, train, {"step_fn": graph_recipe.StandardisedMSE(3.0, 2.7)})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    graph_recipe._refine(model, config, train, train, {"step_fn": graph_recipe.StandardisedMSE(3.0, 2.7)})
    after = model.state_dict()
    norms = {f"{name}.{key}" for name, m in model.named_modules() if isinstance(m, _NormBase) for key in m.state_dict()}
    assert norms and all(torch.equal(before[k], after[k]) for k in norms)
    assert not torch.equal(before["fc.weight"], after["fc.weight"])  # the rest trained
    assert all(p.requires_grad for p in model.parameters())


def test_fmnist_recipe_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe publishes a verified entry; rerun with the same ``run_dir`` it resumes from
    the finished run's last checkpoint and publishes the same weights without training again."""
    run_dir = tmp_path / "run"
    entry = fmnist_recipe.run("resnet20", epochs=1, limit=128, out=str(tmp_path), run_dir=str(run_dir))
    assert set(entry["metrics"]) == {"fashion-mnist", "fashion-mnist[:1000]"}
    _published(entry, tmp_path)
    # the rerun's weights are the point; its test metrics on 100 images keep it quick
    monkeypatch.setattr(fmnist_recipe, "evaluate", lambda model, task, limit=None: evaluate.evaluate(model, task, 100))
    again = fmnist_recipe.run("resnet20", epochs=1, limit=128, out=str(tmp_path / "again"), run_dir=str(run_dir))
    assert again["sha256"] == entry["sha256"]
    assert "resumed run" in (run_dir / "train.log").read_text()


def test_fmnist_recipe_with_its_own_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A target that names its architecture and tag publishes under ``arch.tag``, not as the
    architecture's default, with the command that reruns it."""
    monkeypatch.setattr(fmnist_recipe, "evaluate", lambda model, task, limit=None: evaluate.evaluate(model, task, 100))
    recipe = fmnist_recipe.RECIPES["resnet56_long"]
    assert recipe["config"].compile is True  # on a GPU; here uncompiled, which saves a CPU compile of 20 s
    monkeypatch.setitem(recipe, "config", dataclasses.replace(recipe["config"], compile=False))
    entry = fmnist_recipe.run("resnet56_long", epochs=1, limit=64, out=str(tmp_path))
    assert entry["name"] == "resnet56.fmnist_long" and entry["default"] is False
    assert entry["recipe"] == "python -m zoo.training.recipes.fmnist resnet56_long"
    card = (tmp_path / entry["card"]).read_text()
    assert "label smoothing 0.1" in card and "batch 512" in card and "EMA, decay 0.999" in card


def test_fmnist_recipe_distils_the_vit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """moe_vit's recipe learns from resnet56.fmnist's labels (DeiT's hard distillation) and
    its card says so; the CNN recipes don't distil."""
    monkeypatch.setattr(fmnist_recipe, "evaluate", lambda model, task, limit=None: evaluate.evaluate(model, task, 100))
    entry = fmnist_recipe.run("moe_vit", epochs=1, limit=64, out=str(tmp_path))
    card = (tmp_path / entry["card"]).read_text()
    assert "distillation: hard labels of resnet56.fmnist (run in bf16), weight 0.5" in card
    assert all("distill" not in recipe for arch, recipe in fmnist_recipe.RECIPES.items() if arch != "moe_vit")


def test_moe_lm_recipe_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both language models (MoE and dense baseline) are trained, measured and published; tiny
    models on the first 20 kB of each split keep it to seconds."""
    small = {
        "hidden_size": 32,
        "num_layers": 2,
        "num_heads": 2,
        "num_kv_heads": 1,
        "intermediate_size": 32,
        "num_experts": 4,
        "top_k": 2,
        "max_position_embeddings": evaluate.CONTEXT,
    }
    monkeypatch.setattr(moe_lm_recipe, "MOE", small)
    monkeypatch.setattr(moe_lm_recipe, "DENSE", {**small, "dense_layers": [0, 1]})
    for module in (moe_lm_recipe, evaluate):
        monkeypatch.setattr(module, "stdlib_corpus", lambda split: data.stdlib_corpus(split)[:20_000])
    entries = moe_lm_recipe.run("stdlib", steps=2, out=str(tmp_path))
    assert [(e["name"], e["default"]) for e in entries] == [("moe_lm.stdlib", True), ("moe_lm.stdlib_dense", False)]
    assert entries[1]["model_kwargs"]["dense_layers"] == [0, 1]
    for entry in entries:
        _published(entry, tmp_path)
        assert "greedy sample" in (tmp_path / entry["card"]).read_text()


def test_zoo_generate_reproduces_the_cards_sample(capsys: pytest.CaptureFixture) -> None:
    for name in ("moe_lm.stdlib", "moe_lm.stdlib_dense"):
        assert cli.main(["generate", name, "def fib(", "--temperature", "0", "--max-new-tokens", "160"]) == 0
        sample = capsys.readouterr().out[:-1]  # print's newline
        assert sample.startswith("def fib(") and f"`{sample!r}`" in weight_entries.info(name).card_text()
    sampled = []
    for _ in range(2):  # sampling is reproducible from --seed
        assert cli.main(["generate", "moe_lm.stdlib", "import ", "--seed", "3", "--max-new-tokens", "30"]) == 0
        sampled.append(capsys.readouterr().out)
    assert sampled[0] == sampled[1] and sampled[0].startswith("import ")
    assert cli.main(["generate", "resnet20.fmnist", "x"]) == 2
    assert "not a byte-level language model" in capsys.readouterr().err


def test_stdlib_corpus_splits_files_by_index() -> None:
    files = data.stdlib_files()
    assert len(files) > 100 and all(p.suffix == ".py" for p in files) and files == sorted(files)
    assert not any({"test", "idlelib"} & set(p.parts) for p in files)
    test = data.stdlib_corpus("test")
    expected = sum(p.stat().st_size + 1 for i, p in enumerate(files) if i % 20 == 0)  # + 1: the eos byte
    assert len(test) == expected and int((test == ByteTokenizer.eos_token_id).sum()) == len(files[::20])
    with pytest.raises(ValueError, match="train, val or test"):
        data.stdlib_corpus("dev")


def test_demo_runs_on_a_reduced_budget(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "demo"  # the default weights: the bundled resnet20.fmnist
    code = cli.main(["demo", "--out", str(out), "--per-class", "2", "--eval-per-class", "3", "--epochs", "1"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "fine-tuned from" in printed and "from scratch" in printed
    assert (out / "transfer.png").is_file() and (out / "transfer.json").is_file()
    restored = zoo.load(out / "pretrained")
    assert restored.num_classes == 10 and restored.pretrained_cfg["class_names"] == [str(i) for i in range(10)]
    with torch.no_grad():
        assert restored(torch.zeros(1, 1, 28, 28)).shape == (1, 10)
