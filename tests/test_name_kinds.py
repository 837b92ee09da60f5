"""Every public name-taking function and command takes every kind of name `zoo.load` takes
(issue 63, item 3): a registry weight name, a bare architecture, ``hf-hub:ORG/REPO``, a folder
`zoo.save` wrote, a run folder `zoo finetune` wrote, and torchvision's name of the weights
(``Resnet20_Weights.FMNIST``, as its ``get_weight`` takes), each resolved by the one
`zoo.loading.resolve.resolve`. Where a kind cannot apply, the call is the one clear refusal
that says why (a zoo error; on the command line one ``zoo: error:`` line and exit 2).

One small model per kind, made once for the module: the bundled ResNet-20, a folder `zoo.save`
wrote of it, a one-step run folder fine-tuned from it on eight PNGs, that folder laid out as a
Hub repository in an offline Hugging Face cache."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from tests.test_hf_hub import lay_out_snapshot
from zoo.cli import main
from zoo.errors import InvalidArgumentError

KINDS = ("registry", "architecture", "hub", "saved", "run", "torchvision")
HUB_REPO = "acme/resnet20-fmnist"
CLASSES = ("Trouser", "Bag")  # Fashion-MNIST's own names: every kind's model knows them
# one step, no probes of precision and loader workers, nothing after training
QUIET = {
    "progress": False,
    "plot": False,
    "tensorboard": False,
    "post_training": False,
    "precision": "fp32",
    "num_workers": 0,
}
QUIET_FLAGS = ["--no-progress", "--no-tensorboard", "--no-post-training", "--precision", "fp32", "--num-workers", "0"]


@dataclass(frozen=True)
class Names:
    """One name of each kind (`KINDS`), and the data the calls take."""

    root: Path
    images: Path  # an image folder: `CLASSES`, four 28x28 gray PNGs each
    png: Path
    kinds: dict[str, str]


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> Names:
    root = tmp_path_factory.mktemp("names")
    rng = np.random.default_rng(0)
    for label in CLASSES:
        (root / "images" / label).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 255, (28, 28), dtype=np.uint8)).save(root / "images" / label / f"{i}.png")
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the run's few validation samples
        patch.setenv("ZOO_HOME", str(root / "zoo_home"))
        patch.delenv("ZOO_OFFLINE", raising=False)
        saved = zoo.save(zoo.load("resnet20.fmnist"), root / "saved")
        run = zoo.finetune("resnet20.fmnist", root / "images", root / "run", max_steps=1, batch_size=4, **QUIET).out
    lay_out_snapshot(root / "hf", HUB_REPO, "c" * 40, saved)
    kinds = {
        "registry": "resnet20.fmnist",
        "architecture": "resnet20",
        "hub": f"hf-hub:{HUB_REPO}",
        "saved": str(saved),
        "run": str(run),
        "torchvision": "Resnet20_Weights.FMNIST",
    }
    return Names(root, root / "images", root / "images" / "Bag" / "0.png", kinds)


@pytest.fixture(autouse=True)
def _offline_hub(names: Names, monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    """The Hub repository from the module's cache, offline (and the small models on one thread)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(names.root / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def is_resnet20(model: torch.nn.Module) -> bool:
    return model.pretrained_cfg["architecture"] == "resnet20"


# --- Python: each call takes (name, names, tmp_path) and asserts what it gave -------------------


def call_load(name: str, names: Names, tmp: Path) -> None:
    assert is_resnet20(zoo.load(name))


def call_info(name: str, names: Names, tmp: Path) -> None:
    info = zoo.info(name)
    assert info.arch == "resnet20" and info.preprocess["mean"] == [0.5]


def call_transforms(name: str, names: Names, tmp: Path) -> None:
    assert zoo.transforms(name)(torch.randint(0, 256, (3, 40, 30), dtype=torch.uint8)).shape == (1, 28, 28)


def call_predict(name: str, names: Names, tmp: Path) -> None:
    (row,) = zoo.predict(name, [names.png], top_k=2)
    assert len(row["classes"]) == 2


def call_evaluate(name: str, names: Names, tmp: Path) -> None:
    assert zoo.evaluate(name, names.images)["samples"] == 8


def call_finetune(name: str, names: Names, tmp: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few validation samples
        result = zoo.finetune(name, names.images, tmp / "out", max_steps=1, batch_size=4, **QUIET)
    assert is_resnet20(zoo.load(result.out)) and zoo.load(result.out).num_classes == 2


def call_create_model(name: str, names: Names, tmp: Path) -> None:
    model = zoo.create_model(name, pretrained=True, num_classes=3)
    assert is_resnet20(model) and model.training and model.num_classes == 3


def call_get_model(name: str, names: Names, tmp: Path) -> None:
    assert is_resnet20(zoo.get_model(name))


def call_get_model_weights(name: str, names: Names, tmp: Path) -> None:
    assert zoo.get_model_weights(name).FMNIST.value == "resnet20.fmnist"


@pytest.fixture
def card_as_claimed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``zoo eval NAME`` re-measures what the card claims for the weights it loaded (the measuring
    itself is test_bundled's): these tests ask which entry a name reaches, not its accuracy."""
    from zoo.training.recipes import evaluate

    def as_claimed(model: torch.nn.Module, task: str, limit: int | None) -> dict[str, float]:
        return dict(zoo.info(model.pretrained_cfg["weights"]).metrics[evaluate.task_key(task, limit)])

    monkeypatch.setattr(evaluate, "evaluate", as_claimed)


def call_serve_app(name: str, names: Names, tmp: Path) -> None:
    from fastapi.testclient import TestClient

    import zoo.serve

    with TestClient(zoo.serve.app(name, threads=1)) as client:
        (served,) = [model["id"] for model in client.get("/v1/models").json()["data"]]
        answer = client.post(f"/v1/models/{served}:predict", files={"image": names.png.read_bytes()})
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["predictions"]) == 1


PYTHON: dict[str, Callable[[str, Names, Path], None]] = {
    "zoo.load": call_load,
    "zoo.info": call_info,
    "zoo.transforms": call_transforms,
    "zoo.predict": call_predict,
    "zoo.evaluate": call_evaluate,
    "zoo.finetune": call_finetune,
    "zoo.create_model": call_create_model,
    "zoo.get_model": call_get_model,
    "zoo.get_model_weights": call_get_model_weights,
    "zoo.serve.app": call_serve_app,
}
# (call, kind) -> what the refusal says, where the kind cannot apply
HUB_FINETUNE = "fine-tuning starts from registered weights, an architecture or a folder written by zoo.save"
PYTHON_REFUSALS = {
    ("zoo.get_model_weights", "hub"): "its weights are the repository's own, in no weights enum",
    ("zoo.get_model_weights", "saved"): "its weights are the folder's own, in no weights enum",
    ("zoo.get_model_weights", "run"): "its weights are the folder's own, in no weights enum",
    ("zoo.finetune", "hub"): HUB_FINETUNE,  # training.finetune's own refusal: zoo.load and zoo.save it first
}


PYTHON_CASES = [(call, kind) for call in PYTHON for kind in KINDS]


@pytest.mark.parametrize(("call", "kind"), PYTHON_CASES)
def test_python_calls_take_every_kind_of_name(call: str, kind: str, names: Names, tmp_path: Path) -> None:
    name = names.kinds[kind]
    refusal = PYTHON_REFUSALS.get((call, kind))
    if refusal is None:
        PYTHON[call](name, names, tmp_path)
        return
    with pytest.raises(InvalidArgumentError, match=refusal):
        PYTHON[call](name, names, tmp_path)


# --- the command line: each call gives its argv; it exits 0 and prints the expected text ------------


def cli_info(name: str, names: Names, tmp: Path) -> tuple[list[str], str]:
    return ["info", name], "resnet20"


def cli_predict(name: str, names: Names, tmp: Path) -> tuple[list[str], str]:
    return ["predict", name, str(names.png), "--no-progress"], str(names.png)


def cli_eval(name: str, names: Names, tmp: Path) -> tuple[list[str], str]:
    return ["eval", name, "--limit", "1000"], "every metric matches its card"


def cli_eval_data(name: str, names: Names, tmp: Path) -> tuple[list[str], str]:
    return ["eval", name, "--data", str(names.images), "--no-progress", "--device", "cpu"], "8 samples"


def cli_bench(name: str, names: Names, tmp: Path) -> tuple[list[str], str]:
    argv = ["bench", name, "--batch-size", "1", "--repeats", "1", "--no-optimize", "--device", "cpu"]
    return argv, "1x28x28"


def cli_export(name: str, names: Names, tmp: Path) -> tuple[list[str], str]:
    argv = ["export", name, "--format", "torchscript", "--out", str(tmp / "model.pt"), "--device", "cpu"]
    return argv, "model.pt (torchscript"


def cli_finetune(name: str, names: Names, tmp: Path) -> tuple[list[str], str]:
    argv = ["finetune", name, "--data", str(names.images), "--out", str(tmp / "out"), "--max-steps", "1"]
    return [*argv, "--batch-size", "4", *QUIET_FLAGS], ""


def cli_generate(name: str, names: Names, tmp: Path) -> tuple[list[str], str]:
    return ["generate", name, "def f(", "--max-new-tokens", "2"], ""


CLI: dict[str, Callable[[str, Names, Path], tuple[list[str], str]]] = {
    "zoo info": cli_info,
    "zoo predict": cli_predict,
    "zoo eval": cli_eval,
    "zoo eval --data": cli_eval_data,
    "zoo bench": cli_bench,
    "zoo export": cli_export,
    "zoo finetune": cli_finetune,
    "zoo generate": cli_generate,
}
CARD_ONLY = "zoo eval re-measures a registered entry's card"
NOT_AN_LM = "is not a byte-level language model"
CLI_REFUSALS = {
    ("zoo eval", "hub"): CARD_ONLY,
    ("zoo eval", "saved"): CARD_ONLY,
    ("zoo eval", "run"): CARD_ONLY,
    ("zoo finetune", "hub"): HUB_FINETUNE,
    **{("zoo generate", kind): NOT_AN_LM for kind in KINDS},  # a classifier; the LM's kinds: below
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", CLI)
@pytest.mark.usefixtures("card_as_claimed")
def test_commands_take_every_kind_of_name(
    command: str, kind: str, names: Names, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv, expected = CLI[command](names.kinds[kind], names, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # finetune's few validation samples
        code = main(argv)
    out, err = capsys.readouterr()
    refusal = CLI_REFUSALS.get((command, kind))
    if refusal is None:
        assert code == 0, err
        assert expected in out
    else:
        assert code == 2 and err.count("\n") == 1 and refusal in err, err


def test_serve_command_takes_every_kind_of_name(
    names: Names, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``zoo serve`` with one name of each kind (a Hub repository's ``ORG/REPO`` is served as
    ``ORG--REPO``): each model answers a prediction (the server runs in a test client: no socket)."""
    from fastapi.testclient import TestClient

    answered = []

    class Server:
        def __init__(self, config) -> None:
            self.config, self.started = config, False

        def run(self) -> None:
            with TestClient(self.config.app) as client:
                for model in client.get("/v1/models").json()["data"]:
                    files = {"image": names.png.read_bytes()}
                    answer = client.post(f"/v1/models/{model['id']}:predict", files=files)
                    answered.append((model["id"], answer.status_code))
            self.started = True

    monkeypatch.setattr("zoo.cli.serving.uvicorn.Server", Server)
    served = [names.kinds[kind] for kind in KINDS]  # one name each
    assert main(["serve", *served, "--threads", "1"]) == 0, capsys.readouterr().err
    assert len(answered) == len(KINDS) and {code for _, code in answered} == {200}, answered


LM_KINDS = ("registry", "architecture", "hub", "saved", "torchvision")


@pytest.fixture(scope="module")
def lm_names(names: Names) -> dict[str, str]:
    """The byte-level language model under each kind of name but a run folder's (fine-tuning an LM
    is the MoE tests' work)."""
    saved = zoo.save(zoo.load("moe_lm.stdlib"), names.root / "lm_saved")
    lay_out_snapshot(names.root / "hf", "acme/moe-lm", "d" * 40, saved)
    return {
        "registry": "moe_lm.stdlib",
        "architecture": "moe_lm",
        "hub": "hf-hub:acme/moe-lm",
        "saved": str(saved),
        "torchvision": "MoeLm_Weights.STDLIB",
    }


@pytest.mark.parametrize("kind", LM_KINDS)
def test_generate_takes_every_kind_of_name(kind: str, lm_names: dict[str, str], capsys) -> None:
    assert main(["generate", lm_names[kind], "def f(", "--max-new-tokens", "2", "--seed", "1"]) == 0
    assert capsys.readouterr().out.startswith("def f(")


def test_a_torchvision_name_means_its_entry(names: Names) -> None:
    """``Resnet20_Weights.FMNIST`` and the enum member itself resolve to ``resnet20.fmnist``;
    one zoo has no entry for is refused by name, with the names there are."""
    from zoo.loading.resolve import resolve

    member = zoo.get_model_weights("resnet20").FMNIST
    for name in ("Resnet20_Weights.FMNIST", "Resnet20_Weights.DEFAULT", member):
        assert resolve(name).entry.name == "resnet20.fmnist"
    assert zoo.info(member).name == "resnet20.fmnist"
    with pytest.raises(zoo.UnknownModelError, match=r"Resnet20_Weights.FMNIST \(resnet20.fmnist\)"):
        zoo.load("Resnet20_Weights.IMAGENET1K_V1")
    with pytest.raises(InvalidArgumentError, match="names its weights: leave out weights="):
        zoo.load("Resnet20_Weights.FMNIST", weights="DEFAULT")


def test_hub_info_reads_the_config_alone(names: Names, tmp_path: Path) -> None:
    """``zoo.info("hf-hub:...")`` of a timm repository: what its config.json says, no weights fetched."""
    import json

    repo = tmp_path / "timm_repo"
    repo.mkdir()
    config = {
        "architecture": "resnet18",
        "num_classes": 4,
        "label_names": ["a", "b", "c", "d"],
        "pretrained_cfg": {"input_size": [3, 64, 64], "crop_pct": 1.0, "crop_mode": "center",
                           "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25], "interpolation": "bilinear"},
    }  # fmt: skip
    (repo / "config.json").write_text(json.dumps(config))
    lay_out_snapshot(names.root / "hf", "acme/timm-only-config", "e" * 40, repo)
    info = zoo.info("hf-hub:acme/timm-only-config")
    assert (info.arch, info.num_classes, info.preprocess["crop"]) == ("resnet18", 4, 64)
    assert info.source == f"hf-hub:acme/timm-only-config@{'e' * 40}/model.safetensors"
    assert zoo.transforms("hf-hub:acme/timm-only-config")(torch.zeros(3, 80, 80, dtype=torch.uint8)).shape == (
        3,
        64,
        64,
    )


def test_the_docs_table_names_every_call() -> None:
    """docs/loading.md's table of name kinds lists every call this module walks."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "loading.md").read_text()
    table = text[text.index("| takes |") :].split("\n\n")[0]
    for call in [*PYTHON, *CLI, "zoo serve"]:
        assert f"`{call}" in table, call
