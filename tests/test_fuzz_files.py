"""Files a user hands zoo, generated and mutated (issue: hardening, fuzz suite): a Hugging Face
checkpoint's config.json and index, auto's remembered choices (optimize.json) and Hub download
records. Each must end in a model or a `ZooError` naming the file, never another exception,
never a build beyond the stated bounds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo
from zoo.deploy import optimize_report
from zoo.errors import ZooError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = zoo.load(
        "moe_lm",
        pretrained=False,
        hidden_size=16,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=8,
        num_experts=2,
        top_k=1,
    )
    return zoo.export_hf(model, tmp_path_factory.mktemp("hf") / "checkpoint", max_shard_size=4000)


def _copy(checkpoint: Path, folder: Path) -> Path:
    shutil.copytree(checkpoint, folder)
    return folder


CONFIG_FIELDS = [
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "num_local_experts",
    "num_experts_per_tok",
    "rope_theta",
    "hidden_act",
    "head_dim",
    "sliding_window",
    "tie_word_embeddings",
    "rms_norm_eps",
]


@FUZZ
@given(field=st.sampled_from(CONFIG_FIELDS), value=JSON | st.integers(0, 2**31))
def test_a_mutated_checkpoint_config(checkpoint: Path, tmp_path_factory, field: str, value) -> None:
    folder = _copy(checkpoint, tmp_path_factory.mktemp("c") / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {field: value}))
    try:
        zoo.load("moe_lm", weights=folder)
    except ZooError as error:
        assert "config.json" in str(error) or "weights" in str(error) or field in str(error)


@FUZZ
@given(document=JSON)
def test_a_generated_checkpoint_index(checkpoint: Path, tmp_path_factory, document) -> None:
    folder = _copy(checkpoint, tmp_path_factory.mktemp("i") / "m")
    (folder / "model.safetensors.index.json").write_text(json.dumps(document))
    with pytest.raises(ZooError, match=r"model\.safetensors\.index\.json"):
        zoo.load("moe_lm", weights=folder)


def test_a_config_asking_for_a_huge_model_is_refused_before_it_is_built(checkpoint: Path, tmp_path: Path) -> None:
    folder = _copy(checkpoint, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    for changes, match in (
        ({"num_hidden_layers": 100000}, "100000 layers of 2 experts is beyond"),
        ({"vocab_size": 2**31}, "vocab_size=2147483648 must be a whole number"),
        ({"hidden_size": 65536, "intermediate_size": 65536}, "describes a model of"),
        ({"num_hidden_layers": 200, "num_local_experts": 200}, "beyond what zoo builds"),
    ):
        (folder / "config.json").write_text(json.dumps(config | changes))
        with pytest.raises(ZooError, match=match):
            zoo.load("moe_lm", weights=folder)


@FUZZ
@given(document=JSON, key=st.sampled_from(["k", ""]))
def test_remembered_choices_from_a_generated_file(tmp_path_factory, monkeypatch, document, key: str) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("ZOO_HOME", str(home))
    (home / optimize_report.CACHE_FILE).write_text(json.dumps({key: document} if key else document))
    choice = optimize_report.remembered("k")
    if choice is not None:
        report = optimize_report.OptimizeReport(choice[0], 1.0, choice[1], "x", False, "cpu")
        assert str(report)


@pytest.mark.parametrize("record", ["[]", "3", '"x"', "{bad json"])
def test_a_damaged_hub_pin_names_its_file(tmp_path: Path, record: str) -> None:
    from zoo.interop import hf_hub
    from zoo.store.registry import WeightInfo

    path = tmp_path / "pin.json"
    path.write_text(record)
    entry = WeightInfo("resnet50.x", hf_hub="acme/r", revision="main")
    with pytest.raises(ZooError, match="pin.json"):
        hf_hub._read_pin(path, entry)


def test_every_json_a_user_hands_zoo_is_read_bounded(tmp_path: Path) -> None:
    """One reader (store.files.read_json) for saved configs, checkpoint configs and indexes, and
    a Hub repository's config.json: too large or not JSON is one error naming the file."""
    from zoo.store.files import read_json

    big = tmp_path / "config.json"
    big.write_text("[" + "0," * 600_000 + "0]")
    with pytest.raises(ZooError, match=r"config\.json is 1,200,003 bytes, over the 1,048,576"):
        read_json(big, 1 << 20)
    with pytest.raises(ZooError, match=r"config\.json of acme/x@abc is not readable JSON .*; no model"):
        (tmp_path / "bad.json").write_text("{")
        read_json(tmp_path / "bad.json", 100, name="config.json of acme/x@abc", fix="no model")
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "config.json").write_text(" " * (2 << 20))
    with pytest.raises(ZooError, match="over the 1,048,576 such a file has; save the model again"):
        zoo.load(folder)
