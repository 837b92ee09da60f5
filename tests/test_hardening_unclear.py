"""The fourth hardening round's remaining unclear outcomes (issue 50): each failure a user causes
is one line that names its cause (zoo's limit, the reader that wanted a column, the datatype),
the task a molecule file gets is said with its reason, and nothing warns that zoo could silence."""

from __future__ import annotations

import csv
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from zoo.errors import DataError, ZooError

pytest.importorskip("rdkit")


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# --- a SMILES over zoo's length limit ---------------------------------------------------------


def test_a_smiles_over_zoos_limit_is_named_as_zoos_limit(tmp_path: Path) -> None:
    # "RDKit cannot parse it", while RDKit parses it: zoo's length limit was the cause
    from zoo.loading.smiles import MAX_SMILES_CHARS, smiles_batch
    from zoo.training.data.molecules.molecule_files import molecule_source

    long = "C" * (MAX_SMILES_CHARS + 1)
    expected = "it is 2,001 characters, over zoo's limit of 2,000 characters per SMILES"
    with pytest.raises(ZooError) as caught:
        smiles_batch(["CCO", long])
    assert str(caught.value).startswith("SMILES[1] 'CCCC") and f"({expected}); check it" in str(caught.value)
    rows = [["CCO", "1.5"], ["c1ccccc1O", "2.5"], [long, "3.0"], ["CCN", "0.5"]]
    path = _csv(tmp_path / "long.csv", ["smiles", "y"], rows)
    with pytest.raises(DataError, match=rf"long\.csv, line 4: the molecule is not usable \({expected}\); fix"):
        molecule_source(path)
    with pytest.raises(ZooError, match=r"SMILES\[0\] ' ' is not a usable SMILES \(it is empty\)"):
        smiles_batch([" "])
    with pytest.raises(ZooError, match=r"\(RDKit cannot parse it\)"):
        smiles_batch(["C1CC("])


# --- zoo predict gin3.* warns nothing ---------------------------------------------------------


def test_predicting_with_a_molecule_model_prints_no_torch_jit_warning() -> None:
    # "zoo: warning: `torch.jit.script` is deprecated": PyG imported before zoo's quiet import of it
    result = subprocess.run(
        [sys.executable, "-m", "zoo", "predict", "gin3.nci_tpsa", "CCO"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("CCO\t") and result.stderr == "", result.stderr


# --- a CSV without a smiles column, given to a graph model -----------------------------------

SMILES = ["CCO", "CCN", "CCC", "c1ccccc1", "CC(=O)O", "CCCl", "c1ccccc1O", "CCOC"]


def test_a_csv_without_smiles_given_to_a_graph_model_names_the_smiles_column(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # "each row needs the fields ('text', 'label'); missing ['text', 'label']": the text reader's
    from zoo.cli import main
    from zoo.training.data.kinds import open_data
    from zoo.training.data.molecules.molecule_files import MoleculeOptions

    path = _csv(tmp_path / "mols.csv", ["smi", "y"], [[s, "1.0"] for s in SMILES])
    assert main(["finetune", "gin3", "--data", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"zoo: error: {path}, line 1: gin3 reads graphs, which zoo's molecule reader makes from a .csv/.jsonl: it "
        "wants a smiles column and a label column, and the first line names ['smi', 'y']; name the SMILES column "
        "smiles, or pass --smiles-field NAME\n"
    )
    assert not (tmp_path / "run").exists()
    with pytest.raises(DataError, match=r"gin3\.nci_tpsa reads graphs.*names \['text', 'label'\].*e\.g\. moe_encoder"):
        open_data(
            _csv(tmp_path / "t.csv", ["text", "label"], [["a", "x"]]),
            molecules=MoleculeOptions(graph_model="gin3.nci_tpsa"),
        )
    # other models, and other files, read as before
    with pytest.raises(DataError, match=r"missing \['text', 'label'\]"):
        open_data(path)
    mols = _csv(tmp_path / "m.csv", ["smiles", "y"], [[s, str(i)] for i, s in enumerate(SMILES)])
    assert open_data(mols, molecules=MoleculeOptions(graph_model="gin3")).num_samples == 8


# --- the task of a molecule file, said with its reason ---------------------------------------


def test_the_task_of_a_molecule_file_is_said_with_its_reason(tmp_path: Path) -> None:
    # integer 0/1 labels silently became a regression
    from zoo.training.data.molecules.molecule_files import MoleculeOptions, molecule_source

    binary = _csv(tmp_path / "binary.csv", ["smiles", "active"], [[s, str(i % 2)] for i, s in enumerate(SMILES)])
    with pytest.warns(UserWarning, match=r"binary\.csv: the 'active' labels are only 0 and 1, trained as a regression"):
        source = molecule_source(binary)
    assert source.describe_classes().splitlines()[1] == (
        "task: regression (the 'active' labels are numbers, only 0 and 1; pass --task classification for two classes)"
    )
    floats = _csv(tmp_path / "f.csv", ["smiles", "active"], [[s, f"{i % 2}.0"] for i, s in enumerate(SMILES)])
    with pytest.warns(UserWarning, match=r"the 'active' labels are only 0 and 1"):  # as pandas writes them
        molecule_source(floats)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # two values, but no class numbers
        molecule_source(
            _csv(tmp_path / "huge.csv", ["smiles", "y"], [[s, ["1e15", "-1e15"][i % 2]] for i, s in enumerate(SMILES)])
        )
    numbers = _csv(tmp_path / "n.csv", ["smiles", "y"], [[s, f"{i * 0.5}"] for i, s in enumerate(SMILES)])
    assert molecule_source(numbers).task_note == (
        "task: regression (the 'y' labels are numbers; pass --task classification for classes)"
    )
    words = _csv(
        tmp_path / "w.csv", ["smiles", "kind"], [[s, ["polar", "apolar"][i % 2]] for i, s in enumerate(SMILES)]
    )
    assert (
        molecule_source(words).task_note == "task: classification (the 'kind' labels are not all numbers, e.g. 'polar')"
    )
    asked = molecule_source(binary, MoleculeOptions(task="classification"))
    assert asked.task_note == "task: classification (--task classification)" and asked.num_classes == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for: no warning
        assert (
            molecule_source(binary, MoleculeOptions(task="regression")).task_note
            == "task: regression (--task regression)"
        )


# --- zoo shards given shards ------------------------------------------------------------------


def test_zoo_shards_given_shards_says_they_are_shards_already(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # "Subclasses of Dataset should implement __getitem__"
    import torch

    from zoo.cli import main
    from zoo.training.data.shards.shard_writer import write_shards

    torch.save({"x": torch.randn(8, 3), "y": torch.arange(8) % 2}, tmp_path / "data.pt")
    write_shards(tmp_path / "data.pt", tmp_path / "shards", shard_size=4)
    for given in (tmp_path / "shards", tmp_path / "shards" / "train-000000.tar"):
        assert main(["shards", str(given), "--out", str(tmp_path / "again")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"zoo: error: shards {given} (") and err.count("\n") == 1, err
        assert "): these are shards already; zoo shards writes shards from an image folder, text rows or a" in err
        assert not (tmp_path / "again").exists()


# --- zoo serve: what a molecule model is sent --------------------------------------------------


def test_a_molecule_model_refuses_images_and_numbers_on_its_smiles_input() -> None:
    # a multipart image: "Invalid JSON: invalid number..."; FP32 on smiles: read as the SMILES '1.0'
    from fastapi.testclient import TestClient

    import zoo.serve

    with TestClient(zoo.serve.app("gin3.nci_tpsa", threads=1)) as client:
        path = "/v1/models/gin3.nci_tpsa:predict"
        for answer in (
            client.post(path, files={"image": ("shirt.png", b"\x89PNG\r\n\x1a\n", "image/png")}),
            client.post(path, content=b"\x89PNG\r\n\x1a\n", headers={"content-type": "image/png"}),
        ):
            assert answer.status_code == 415, answer.text
            assert answer.json()["error"].endswith(
                ', and gin3.nci_tpsa reads molecules: send JSON {"smiles": ["CCO", ...]}'
            )
        infer = "/v2/models/gin3.nci_tpsa/infer"
        numbers = {"inputs": [{"name": "smiles", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
        answer = client.post(infer, json=numbers)
        assert (
            answer.status_code == 400 and answer.json()["error"] == "input 'smiles' of gin3.nci_tpsa is BYTES; got FP32"
        )
        text = {"inputs": [{"name": "smiles", "shape": [1], "datatype": "BYTES", "data": ["CCO"]}]}
        assert client.post(infer, json=text).status_code == 200
        assert client.post(path, json={"smiles": ["CCO"]}).status_code == 200


# --- --val-data overlapping the training shards ------------------------------------------------


def test_val_data_sharing_training_shards_is_warned_naming_them(tmp_path: Path) -> None:
    # no word, and val_acc 1.0
    import torch

    from zoo.training.data.shards.shard_writer import write_shards
    from zoo.training.finetune import FinetuneOptions, finetune_with_config
    from zoo.training.loop.train_config import TrainConfig

    torch.save({"x": torch.randn(12, 3), "y": torch.arange(12) % 2}, tmp_path / "data.pt")
    write_shards(tmp_path / "data.pt", tmp_path / "s", shard_size=4)
    train, val = f"{tmp_path}/s/train-{{000000..000002}}.tar", f"{tmp_path}/s/../s/train-000002.tar"
    config = TrainConfig(epochs=1, progress=False, tensorboard=False, plot=False)
    options = FinetuneOptions(val_data=val, post_training=False, model_kwargs={"sizes": [3, 4]})
    with pytest.warns(UserWarning) as caught:  # from Python as from the command line: finetune warns
        finetune_with_config("dbn", train, tmp_path / "run", options, config=config)
    assert (
        f"--val-data '{val}' names 1 shard(s) that --data trains on: {val}; validation on them says little of "
        "unseen data: validate on shards apart"
    ) in [str(w.message) for w in caught]
    from zoo.training.finetune.options import warn_shared_shards

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_shared_shards(f"{tmp_path}/s/train-00000{{0,1}}.tar", tmp_path / "s" / "train-000002.tar")  # apart


# --- the error prefix under torchrun ----------------------------------------------------------


def test_the_module_torchrun_starts_names_itself_zoo_finetune(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # "python -m zoo.training.finetune: error:" under torchrun, "zoo: error:" elsewhere

    code = "import sys; from zoo.training.finetune import main; sys.exit(main())"
    args = ["resnet20", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and run.stderr.startswith(f"zoo finetune: error: {tmp_path / 'nowhere'} does not exist")
    assert run.stderr.count("\n") == 1, run.stderr
    run = subprocess.run(
        [sys.executable, "-c", code, *args, "--epochs", "-1"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 2 and run.stderr.splitlines()[-1].startswith("zoo finetune: error: argument --epochs")


# --- torchvision's _ops means what torchvision's counter measures ------------------------------


def test_the_torchvision_ops_of_moe_vit_are_what_torchvisions_counter_measures() -> None:
    # meta["_ops"] 0.082 (attention counted on the math backend), torchvision's counter: 0.079
    import math

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import zoo

    aten = torch.ops.aten

    class TorchvisionStyleCounter(TorchDispatchMode):
        """MACs of matrix products and convolutions only, as torchvision's test counter has
        formulas for (a fused attention kernel counts nothing)."""

        macs = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            op = func._overloadpacket
            if op in (aten.mm, aten.bmm):
                self.macs += math.prod(args[0].shape) * args[1].shape[-1]
            elif op is aten.addmm:
                self.macs += math.prod(args[1].shape) * args[2].shape[-1]
            elif op is aten.convolution:
                self.macs += args[0].shape[0] * math.prod(args[1].shape) * math.prod(out.shape[2:])
            return out

    member = zoo.get_model_weights("moe_vit").FMNIST
    model = zoo.get_model("moe_vit", weights="FMNIST").eval()
    image = member.transforms()(torch.randn(1, 3, 512, 512))  # torchvision's get_ops feeds 512 px
    with torch.no_grad(), TorchvisionStyleCounter() as counter:
        model(image)
    assert member.meta["_ops"] == round(counter.macs / 1e9, 3) == 0.079
    assert zoo.info("moe_vit.fmnist").gmacs == 0.08231  # zoo's own count keeps attention
    for arch in ("resnet20", "densenet_bc_40"):  # no attention: the two agree
        assert zoo.get_model_weights(arch).DEFAULT.meta["_ops"] == round(zoo.info(f"{arch}.fmnist").gmacs, 3)
