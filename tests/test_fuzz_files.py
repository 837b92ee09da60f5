"""Files a user hands zoo, generated and mutated (issue: hardening, fuzz suite): a Hugging Face
checkpoint's config.json and index, auto's remembered choices (optimize.json) and Hub download
records. Each must end in a model or a `ZooError` naming the file, never another exception,
never a build beyond the stated bounds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
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
    from zoo.store.weight_entries import WeightInfo

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


# ---------------------------------------------------------------------------------------------
# The Hugging Face checkpoint reader (index + shards), fuzzed in a child process under an
# address-space limit: a size read from a file and never bounded fails the run with a
# MemoryError instead of slowing the suite down or swapping.

TESTS = Path(__file__).resolve().parent
HEADROOM = 1 << 30  # bytes the reader may allocate beyond a warm load of the tiny checkpoint
DTYPES = ["F32", "F16", "BF16", "F64", "I64", "I8", "U8", "BOOL", "F8_E4M3", "X"]
HEADER = st.dictionaries(
    st.sampled_from(["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "__metadata__", "x"]),
    st.fixed_dictionaries(
        {
            "dtype": st.sampled_from(DTYPES),
            "shape": st.lists(st.sampled_from([0, 1, 2, 16, 2**31, 2**62, -1]), max_size=3),
            "data_offsets": st.lists(st.sampled_from([0, 4, 64, 2**32, 2**63, -8]), min_size=2, max_size=2),
        }
    ),
    max_size=3,
)
SHARD_DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 600)),
    st.tuples(st.just("header_length"), st.sampled_from([0, 1, 7, 2**27, 2**31, 2**63, 2**64 - 1])),
    st.tuples(st.just("header"), HEADER),
    st.tuples(st.just("flip"), st.integers(0, 700), st.integers(1, 255)),
    st.tuples(st.just("link"), st.sampled_from(["config.json", "/etc/passwd", "/dev/zero", "/dev/urandom", "gone"])),
    st.tuples(st.just("folder")),
    st.tuples(st.just("remove")),
    st.tuples(st.just("index_to"), st.sampled_from(["other.safetensors", "model.safetensors", "config.json"])),
    st.tuples(st.just("index"), JSON),
    st.tuples(st.just("config"), st.sampled_from(CONFIG_FIELDS), JSON | st.integers(0, 2**62)),
)


def damage_shard(folder: Path, shard: Path, damage: tuple) -> None:
    """Damage one shard of the checkpoint in ``folder`` (or its place in the index, the index,
    the config) as drawn."""
    kind, *args = damage
    data = shard.read_bytes()
    if kind == "truncate":
        shard.write_bytes(data[: args[0]])
    elif kind == "header_length":
        shard.write_bytes(args[0].to_bytes(8, "little") + data[8:])
    elif kind == "header":
        header = json.dumps(args[0]).encode()
        shard.write_bytes(len(header).to_bytes(8, "little") + header + data[8 + int.from_bytes(data[:8], "little") :])
    elif kind == "flip" and data:
        at = args[0] % len(data)
        shard.write_bytes(data[:at] + bytes([data[at] ^ args[1]]) + data[at + 1 :])
    elif kind in ("link", "folder", "remove"):
        shard.unlink()
        if kind == "link":
            shard.symlink_to(args[0] if args[0].startswith("/") else folder / args[0])
        elif kind == "folder":
            shard.mkdir()
    elif kind == "index":
        (folder / "model.safetensors.index.json").write_text(json.dumps(args[0]))
    elif kind == "config":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | {args[0]: args[1]}))
    elif kind == "index_to":
        index = folder / "model.safetensors.index.json"
        document = json.loads(index.read_text())
        weight_map = {k: args[0] if v == shard.name else v for k, v in document["weight_map"].items()}
        index.write_text(json.dumps(document | {"weight_map": weight_map}))


def load_damaged(checkpoint: Path, workdir: Path, shard: int, damage: tuple) -> None:
    """Load a copy of ``checkpoint`` with one shard damaged: a model or a ZooError naming a file."""
    folder = Path(tempfile.mkdtemp(dir=workdir)) / "m"
    shutil.copytree(checkpoint, folder)
    shards = sorted(folder.glob("*.safetensors"))
    damage_shard(folder, shards[shard % len(shards)], damage)
    try:
        zoo.load("moe_lm", weights=folder)
    except ZooError as error:
        message = str(error)
        assert "allocate" not in message and "MemoryError" not in message, message  # a missing bound, caught
        assert str(folder) in message or damage[0] == "config" and damage[1] in message, message
    finally:
        shutil.rmtree(folder.parent)


def fuzz_hf_reader_limited(checkpoint: str, workdir: str, examples: int) -> None:
    """In a child process: a warm load, then at most `HEADROOM` more address space, then the
    fuzz cases (the limit is checked to bite first)."""
    import resource

    torch.set_num_threads(1)
    zoo.load("moe_lm", weights=checkpoint)
    size = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    soft = size + HEADROOM if hard == resource.RLIM_INFINITY else min(size + HEADROOM, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    with pytest.raises(MemoryError):
        bytearray(2 * HEADROOM)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True)
    @given(shard=st.integers(0, 5), damage=SHARD_DAMAGE)
    def cases(shard: int, damage: tuple) -> None:
        load_damaged(Path(checkpoint), Path(workdir), shard, damage)

    cases()


def test_the_hf_checkpoint_reader_fuzzed_under_an_address_space_limit(checkpoint: Path, tmp_path: Path) -> None:
    """Shards truncated, with crafted headers and header lengths, flipped bytes, links to other
    files, folders, missing, or indexed under another name; generated indexes, configs asking
    for any size: each load ends in a model or a ZooError naming the file, within the
    address-space limit."""
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_fuzz_files as t; "
        f"t.fuzz_hf_reader_limited({str(checkpoint)!r}, {str(tmp_path)!r}, 80)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
