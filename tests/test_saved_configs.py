"""A saved folder's config.json is checked against its schema before anything is built: a
crafted field is one `ZooError` naming the file and the field, never a traceback, a read
outside the folder, or an allocation beyond the stated limits (issue: hardening 4, 10, 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo
from zoo.errors import InvalidArgumentError, WeightsError, ZooError


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zoo.save(zoo.load("resnet20.fmnist", num_classes=3), tmp_path_factory.mktemp("m") / "saved")


def _tampered(saved: Path, tmp_path: Path, **fields) -> Path:
    folder = tmp_path / "tampered"
    folder.mkdir()
    config = json.loads((saved / "config.json").read_text()) | fields
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").symlink_to(saved / "model.safetensors")
    return folder


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"categories": "../../../../etc/passwd"}, "categories"),
        ({"categories": "fashion-mnist/../../x"}, "categories"),
        ({"class_names": ["only"]}, "class_names"),
        ({"class_names": {"a": 1}}, "class_names"),
        ({"class_names": "xyz"}, "class_names"),
        ({"preprocess": "abc"}, "preprocess"),
        ({"preprocess": {"resize": 60000, "crop": 28, "mean": [0.5], "std": [0.5]}}, "preprocess.resize"),
        ({"preprocess": {"crop": 28, "mean": [0.5], "std": [0.5, 0.5]}}, "preprocess.std"),
        ({"model_kwargs": {"in_chans": 200000000}}, "model_kwargs.in_chans"),
        ({"model_kwargs": "x"}, "model_kwargs"),
        ({"num_classes": -1}, "num_classes"),
        ({"architecture": "../resnet20"}, "architecture"),
        ({"head": "lm"}, "head"),
    ],
)
def test_a_crafted_field_is_named(saved: Path, tmp_path: Path, fields: dict, field: str) -> None:
    folder = _tampered(saved, tmp_path, **fields)
    with pytest.raises(WeightsError, match=rf"config\.json: field '{field}'"):
        zoo.load(folder)


def test_the_command_line_says_one_line_and_exits_2(saved: Path, tmp_path: Path, capsys) -> None:
    from zoo.cli import main

    folder = _tampered(saved, tmp_path, categories="../../../../etc/passwd")
    image = tmp_path / "x.png"
    from PIL import Image

    Image.new("L", (28, 28)).save(image)
    assert main(["predict", str(folder), str(image)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "field 'categories'" in err and "root:" not in err


def test_save_refuses_a_users_files_unless_overwrite(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("my notes")
    model = zoo.load("resnet20.fmnist")
    with pytest.raises(InvalidArgumentError, match="already holds README.md; pass overwrite=True"):
        zoo.save(model, tmp_path)
    assert (tmp_path / "README.md").read_text() == "my notes" and not (tmp_path / "config.json").exists()
    zoo.save(model, tmp_path, overwrite=True)
    assert zoo.load(tmp_path).num_classes == 10


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "architecture",
    "head",
    "model_kwargs",
    "num_classes",
    "preprocess",
    "categories",
    "class_names",
    "weights",
    "features_only",
    "out_indices",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=JSON)
def test_any_mutated_field_ends_in_a_zoo_error_or_a_model(saved: Path, tmp_path_factory, field: str, value) -> None:
    folder = _tampered(saved, tmp_path_factory.mktemp("fuzz"), **{field: value})
    try:
        zoo.load(folder)
    except ZooError as error:
        assert str(folder) in str(error) or "config.json" in str(error) or "weights" in str(error)


def test_a_saved_features_only_model_exports_and_predict_refuses_it(tmp_path: Path, capsys) -> None:
    from PIL import Image

    from zoo.cli import main

    folder = zoo.save(zoo.load("resnet20.fmnist", features_only=True, out_indices=2), tmp_path / "features")
    image = tmp_path / "x.png"
    Image.new("L", (28, 28)).save(image)
    assert main(["predict", str(folder), str(image)]) == 2
    assert "outputs feature maps, not class scores" in capsys.readouterr().err
    assert main(["export", str(folder), "--format", "torchscript", "--out", str(tmp_path / "f.pt")]) == 0


def test_a_gin3_folder_of_the_old_default_size_is_told_its_size(tmp_path):
    """A gin3 run saved before the default became 3 layers of 96 states no size in its config.json;
    loading it now names the size its weights hold and the fields to add (was only the mismatch)."""
    import zoo

    model = zoo.load("gin3", pretrained=False, in_channels=9, num_classes=2, num_layers=4, hidden_channels=16)
    zoo.save(model, tmp_path / "old")
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    config["model_kwargs"] = {
        k: v for k, v in config["model_kwargs"].items() if k not in ("num_layers", "hidden_channels")
    }
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    with pytest.raises(zoo.ZooError) as refused:
        zoo.load(tmp_path / "old")
    assert str(refused.value).endswith(
        f"its weights hold 4 layers of 16 channels, and {tmp_path / 'old' / 'config.json'} states no size (a run saved "
        'before gin3\'s default became 3 layers of 96): add "num_layers": 4, "hidden_channels": 16 to its model_kwargs'
    )
    config["model_kwargs"] |= {"num_layers": 4, "hidden_channels": 16}
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    assert zoo.load(tmp_path / "old").num_classes == 2
