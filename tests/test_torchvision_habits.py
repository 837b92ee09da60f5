"""Code written for torchvision runs on zoo: ``weights=`` in torchvision's names (checked against
torchvision's own enums), `zoo.get_model` / `zoo.get_model_weights`, and checkpoints that
torch.hub already downloaded are reused rather than downloaded again."""

from __future__ import annotations

import copy
import hashlib
import io
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision.models as tvm
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import zoo
from zoo.errors import InvalidArgumentError, UnknownModelError, WeightsNotFoundError
from zoo.interop.torchvision_weights import weights_entry
from zoo.store import weight_entries
from zoo.store.weight_entries import WeightInfo

TORCHVISION_ARCHS = sorted(
    {zoo.info(n).arch for n in zoo.list_models(pretrained=True) if zoo.info(n).torchvision_weights}
)
ARCHS_WITH_WEIGHTS = sorted({zoo.info(n).arch for n in zoo.list_models(pretrained=True)})
# torchvision's test_schema_meta_validation: the meta keys a weight may have
PERMITTED_META = {
    "backend",
    "categories",
    "keypoint_names",
    "license",
    "_metrics",
    "min_size",
    "min_temporal_size",
    "num_params",
    "recipe",
    "unquantized",
    "_docs",
    "_ops",
    "_file_size",
}


def _assert_same_state(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    ours, theirs = model.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key


@pytest.mark.parametrize(
    "weights,entry",
    [
        ("IMAGENET1K_V1", "resnet50.tv_in1k"),
        ("IMAGENET1K_V2", "resnet50.tv2_in1k"),
        ("DEFAULT", "resnet50.tv2_in1k"),
        ("ResNet50_Weights.IMAGENET1K_V1", "resnet50.tv_in1k"),
        ("ResNet50_Weights.DEFAULT", "resnet50.tv2_in1k"),
        (tvm.ResNet50_Weights.IMAGENET1K_V1, "resnet50.tv_in1k"),
        (tvm.ResNet50_Weights.IMAGENET1K_V2, "resnet50.tv2_in1k"),
        (tvm.ResNet50_Weights.DEFAULT, "resnet50.tv2_in1k"),
    ],
    ids=str,
)
def test_torchvision_names_pick_the_entry_with_torchvision_url(weights, entry):
    info = weights_entry("resnet50", "resnet50", weights)
    assert info.name == entry
    published = (
        weights if isinstance(weights, tvm.ResNet50_Weights) else tvm.ResNet50_Weights[str(weights).split(".")[-1]]
    )
    assert info.url == published.url


def test_every_entry_names_the_torchvision_weights_with_its_url():
    """The data: each entry's torchvision_weights is the enum member publishing that same file."""
    for name in zoo.list_models(pretrained=True):
        info = zoo.info(name)
        if info.torchvision_weights is not None:
            enum_class, member = info.torchvision_weights.split(".")
            assert getattr(tvm, enum_class)[member].url == info.url, name
        else:
            assert not (info.url or "").startswith("https://download.pytorch.org/"), name


@pytest.mark.parametrize("arch", TORCHVISION_ARCHS)
def test_get_model_weights_mirrors_torchvision(arch):
    ours, theirs = zoo.get_model_weights(arch), tvm.get_model_weights(arch)
    assert ours.__name__ == theirs.__name__
    assert [m.name for m in ours] == [m.name for m in theirs]
    assert ours.DEFAULT.name == theirs.DEFAULT.name
    assert weights_entry(arch, arch, "DEFAULT").name == ours.DEFAULT.value
    for member in ours:
        published = theirs[member.name]
        assert member.url == published.url
        for key in published.meta.keys() - {"recipe", "_docs"}:  # min_size, _metrics, _ops, _file_size...
            assert member.meta[key] == published.meta[key], (member, key)
    assert zoo.get_model_weights(arch) is ours  # one class per architecture: members compare equal


def test_member_transforms_equal_torchvision():
    pixels = torch.randint(0, 256, (300, 400, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    image = Image.fromarray(pixels.numpy())
    ours = zoo.get_model_weights("resnet50").IMAGENET1K_V2.transforms()
    theirs = tvm.ResNet50_Weights.IMAGENET1K_V2.transforms()
    torch.testing.assert_close(ours(image), theirs(image))


def test_zoo_only_weights_are_members_too():
    weights = zoo.get_model_weights("resnet20")
    assert [m.name for m in weights] == ["FMNIST"]
    assert weights.DEFAULT is weights.FMNIST
    assert weights.FMNIST.url is None  # shipped inside zoo
    assert weights.FMNIST.meta["categories"][0] == "T-shirt/top"
    reference = zoo.load("resnet20")
    for choice in ("DEFAULT", "FMNIST", "Resnet20_Weights.FMNIST", weights.FMNIST):
        model = zoo.load("resnet20", weights=choice, pretrained=False)
        assert model.pretrained_cfg["weights"] == "resnet20.fmnist"
        _assert_same_state(model, reference)
    assert list(zoo.get_model_weights("mobilenet_v1")) == []  # torchvision's: an enum without members


def test_get_model_builds_like_torchvision():
    ours, theirs = zoo.get_model("resnet18"), tvm.get_model("resnet18")
    assert ours.pretrained_cfg["weights"] is None
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    _assert_same_state(zoo.get_model("resnet20", weights="DEFAULT"), zoo.load("resnet20"))
    assert zoo.get_model("resnet20", in_chans=3, num_classes=5).num_classes == 5


def test_weights_of_another_architecture_are_refused_by_name():
    with pytest.raises(
        InvalidArgumentError,
        match=r"weights=ResNet18_Weights.IMAGENET1K_V1 are resnet18's weights, not resnet50's: load 'resnet18'",
    ):
        zoo.load("resnet50", weights=tvm.ResNet18_Weights.IMAGENET1K_V1)
    with pytest.raises(InvalidArgumentError, match=r"are resnet20's weights, not resnet56's.*resnet56.fmnist"):
        zoo.load("resnet56", weights=zoo.get_model_weights("resnet20").FMNIST)
    with pytest.raises(InvalidArgumentError, match=r"torchvision's weights of a model that zoo has no entries for"):
        zoo.load("resnet50", weights="ViT_B_16_Weights.IMAGENET1K_V1")
    with pytest.raises(
        InvalidArgumentError, match=r"'resnet50.tv2_in1k' and weights='IMAGENET1K_V1' \(resnet50.tv_in1k\)"
    ):
        zoo.load("resnet50.tv2_in1k", weights="IMAGENET1K_V1")


def test_a_torchvision_name_zoo_lacks_says_so_and_lists_what_zoo_has(monkeypatch):
    weight_entries._ensure_loaded()
    monkeypatch.delitem(weight_entries._weights, "resnet50.tv_in1k")
    with pytest.raises(
        UnknownModelError, match=r"torchvision has it but zoo has no entry.*IMAGENET1K_V2 \(resnet50.tv2_in1k\)"
    ):
        zoo.load("resnet50", weights="ResNet50_Weights.IMAGENET1K_V1")
    monkeypatch.delitem(weight_entries._weights, "resnet50.tv2_in1k")
    with pytest.raises(UnknownModelError, match=r"'resnet50' has no pretrained weights"):
        zoo.load("resnet50", weights="DEFAULT")


def test_torchvision_default_is_followed_when_zoo_lacks_it(monkeypatch):
    weight_entries._ensure_loaded()
    monkeypatch.delitem(weight_entries._weights, "resnet50.tv2_in1k")
    with pytest.raises(
        UnknownModelError, match=r"torchvision's ResNet50_Weights.DEFAULT is IMAGENET1K_V2, which zoo has no entry for"
    ):
        zoo.load("resnet50", weights="DEFAULT")


def test_a_file_named_like_a_member_is_still_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mine = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)
    torch.save(mine.state_dict(), "FMNIST")
    _assert_same_state(zoo.load("resnet20", weights="FMNIST", in_chans=1), mine)


def test_a_missing_file_keeps_its_error():
    with pytest.raises(WeightsNotFoundError, match=r"weights file my_checkpoint.pth does not exist"):
        zoo.load("resnet20", weights="my_checkpoint.pth")


@given(st.text(max_size=30))
def test_anything_but_a_weights_name_is_left_to_files_and_urls(text):
    if re.fullmatch(r"([A-Za-z][A-Za-z0-9_]*_Weights\.)?[A-Z][A-Z0-9_]*", text) or os.path.exists(text):
        return
    assert weights_entry("resnet20", "resnet20", text) is None


@given(st.from_regex(r"[A-Z][A-Z0-9_]{0,20}", fullmatch=True))
def test_unknown_member_names_list_the_known_ones(member):
    if member in ("FMNIST", "DEFAULT"):
        assert weights_entry("resnet20", "resnet20", member).name == "resnet20.fmnist"
        return
    with pytest.raises(UnknownModelError, match=re.escape("zoo has Resnet20_Weights.FMNIST (resnet20.fmnist)")):
        weights_entry("resnet20", "resnet20", member)


def test_two_entries_answering_to_one_name_are_refused(monkeypatch):
    weight_entries._ensure_loaded()
    twin = WeightInfo(
        name="resnet20.copy", file="resnet20.fmnist.safetensors", torchvision_weights="Resnet20_Weights.FMNIST"
    )
    monkeypatch.setitem(weight_entries._weights, twin.name, twin)
    with pytest.raises(ValueError, match=r"weights resnet20.\w+ and resnet20.\w+ both answer to FMNIST"):
        zoo.get_model_weights("resnet20")


# ------------------------------------------------------------- torch.hub's download cache


@pytest.fixture
def published(http_server, monkeypatch):
    """A small resnet20 checkpoint published torch.hub style (``name-<sha256 prefix>.pth``) on
    the local server, with a zoo entry for it: (entry, model, file bytes, file name)."""
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    blob = buffer.getvalue()
    prefix = hashlib.sha256(blob).hexdigest()[:8]
    filename = f"resnet20-{prefix}.pth"
    info = WeightInfo(
        name="resnet20.hubcache",
        url=http_server.add(filename, blob),
        sha256=prefix,
        num_classes=10,
        model_kwargs={"in_chans": 1},
        torchvision_weights="Resnet20_Weights.HUBCACHE",
    )
    weight_entries._ensure_loaded()
    monkeypatch.setitem(weight_entries._weights, info.name, info)
    return info, model, blob, filename


def _torch_hub_checkpoints() -> Path:
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_torch_hub_checkpoint_is_used_without_downloading(published, http_server, tmp_path, monkeypatch):
    info, model, blob, filename = published
    assert Path(torch.hub.get_dir()) == tmp_path / "torch_home" / "hub"  # TORCH_HOME (see conftest) decides
    cached = _torch_hub_checkpoints() / filename
    cached.write_bytes(blob)
    monkeypatch.setenv("ZOO_OFFLINE", "1")  # the cache is enough: nothing to download
    _assert_same_state(zoo.load("resnet20", weights="HUBCACHE"), model)
    assert http_server.requests == []
    assert cached.read_bytes() == blob  # zoo removed its own link after converting, not torch.hub's file


def test_fetch_hard_links_the_torch_hub_file(published, http_server, zoo_home):
    info, _, blob, filename = published
    cached = _torch_hub_checkpoints() / filename
    cached.write_bytes(blob)
    path = zoo.store.download.fetch(info.url, sha256=None, progress=False)  # the hash prefix in the name verifies it
    assert path == zoo_home / "downloads" / filename
    assert os.path.samefile(path, cached)
    assert zoo.store.download.verify_file(path, info.sha256).startswith(info.sha256)
    assert http_server.requests == []


def test_corrupt_torch_hub_checkpoint_is_not_used(published, http_server):
    info, model, blob, filename = published
    cached = _torch_hub_checkpoints() / filename
    cached.write_bytes(b"x" + blob[1:])
    with pytest.warns(
        UserWarning,
        match=rf"{re.escape(str(cached))} in torch.hub's cache has sha256 .* not the expected prefix {info.sha256}, so zoo leaves it alone",
    ):
        loaded = zoo.load("resnet20.hubcache")
    _assert_same_state(loaded, model)
    assert http_server.requests == [f"/{filename}"]
    assert cached.read_bytes()[:1] == b"x"  # left as it was


def test_torch_hub_file_without_a_known_hash_is_not_used(http_server, zoo_home):
    blob = b"unverifiable bytes"
    url = http_server.add("plain.bin", blob)
    (_torch_hub_checkpoints() / "plain.bin").write_bytes(b"something else")
    with pytest.warns(UserWarning, match="could not be verified"):
        path = zoo.store.download.fetch(url, sha256=None, progress=False)
    assert path.read_bytes() == blob
    assert http_server.requests == ["/plain.bin"]


# ------------------------------------------------------------- the enums as torchvision's own tests use them


def test_members_pickle_copy_and_unpickle_in_a_fresh_process():
    """torchvision's test_weights_copyable and test_weights_deserializable, and a process that
    never asked for the enums (pickle finds each class by its name in zoo.peers.torchvision_models)."""
    members = [member for arch in ARCHS_WITH_WEIGHTS for member in zoo.get_model_weights(arch)]
    for member in members:
        assert copy.copy(member) is member and copy.deepcopy(member) is member
        assert pickle.loads(pickle.dumps(member)) is member
    code = (
        "import pickle, sys; print([(type(w).__name__, w.name, w.url) for w in pickle.loads(sys.stdin.buffer.read())])"
    )
    result = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(members), capture_output=True, check=True)
    assert result.stdout.decode().strip() == str([(type(m).__name__, m.name, m.url) for m in members])


@pytest.mark.parametrize(
    "name",
    [
        "ResNet50_Weights.IMAGENET1K_V1",
        "ResNet50_Weights.DEFAULT",
        "DenseNet121_Weights.DEFAULT",
        "MobileNet_V3_Small_Weights.IMAGENET1K_V1",
        "Wide_ResNet50_2_Weights.IMAGENET1K_V2",
    ],
)
def test_get_weight_as_torchvision(name):
    ours, theirs = zoo.get_weight(name), tvm.get_weight(name)
    assert (type(ours).__name__, ours.name, ours.url) == (type(theirs).__name__, theirs.name, theirs.url)
    assert ours is getattr(zoo.get_model_weights(zoo.info(ours.value).arch), name.split(".")[1])


def test_get_weight_of_zoo_weights_and_bad_names():
    assert zoo.get_weight("Resnet20_Weights.FMNIST") is zoo.get_model_weights("resnet20").DEFAULT
    with pytest.raises(
        UnknownModelError, match=r"ResNet50_Weights has no member 'IMAGENET1K_V9'; its members: IMAGENET1K_V1"
    ):
        zoo.get_weight("ResNet50_Weights.IMAGENET1K_V9")
    with pytest.raises(UnknownModelError, match="no architecture of zoo's has weights called ViT_B_16_Weights"):
        zoo.get_weight("ViT_B_16_Weights.DEFAULT")
    with pytest.raises(InvalidArgumentError, match="get_weight takes 'EnumName_Weights.MEMBER'"):
        zoo.get_weight("resnet50")


@pytest.mark.parametrize("arch", zoo.list_models())
def test_naming_conventions_as_torchvision(arch):
    """torchvision's test_naming_conventions: every architecture has an enum, empty or with a
    DEFAULT; members are upper case; the builder finds the same enum as the name."""
    weights = zoo.get_model_weights(arch)
    assert len(weights) == 0 or hasattr(weights, "DEFAULT")
    assert all(member.name.isupper() for member in weights)
    assert zoo.get_model_weights(zoo.store.weight_entries.get_builder(arch)) is weights


@pytest.mark.parametrize("arch", ARCHS_WITH_WEIGHTS)
def test_meta_schema_as_torchvision(arch):
    """torchvision's test_schema_meta_validation for zoo's own weights too: only torchvision's keys,
    min_size for image models (the architecture's smallest side), acc@1 under the dataset's name."""
    for member in zoo.get_model_weights(arch):
        meta = member.meta
        assert meta.keys() <= PERMITTED_META
        ops = member.info.gmacs if member.info.torchvision_ops is None else member.info.torchvision_ops
        assert meta["_ops"] is None or meta["_ops"] == round(ops, 3)
        if zoo.store.weight_entries.input_kind(arch) == "images":
            with torch.device("meta"):  # the architecture only
                model = zoo.load(member.value, pretrained=False)
            assert meta["min_size"] == (model.min_input_size, model.min_input_size)
            assert all("acc@1" in values for values in meta["_metrics"].values())


@pytest.mark.usefixtures("one_thread")
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("resnet50.tv_in1k", tvm.ResNet50_Weights.IMAGENET1K_V1),
        ("mobilenet_v2.tv2_in1k", tvm.MobileNet_V2_Weights.IMAGENET1K_V2),
    ],
)
def test_member_transforms_script_as_torchvision(ours, theirs):
    """torchvision's test_transforms_jit: ``transforms()`` scripts, with torchvision's outputs."""
    arch = zoo.info(ours).arch
    preset = getattr(zoo.get_model_weights(arch), theirs.name).transforms()
    x = torch.randint(0, 256, (1, 3, 240, 320), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    expected = theirs.transforms()(x)
    torch.testing.assert_close(preset(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(torch.jit.script(preset)(x), expected, rtol=0, atol=0)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_gray_weights_transforms_convert_channels_and_script():
    preset = zoo.get_model_weights("resnet20").FMNIST.transforms()
    rgb = torch.randint(0, 256, (3, 40, 30), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = preset(rgb)
    assert out.shape == (1, 28, 28)
    torch.testing.assert_close(torch.jit.script(preset)(rgb), out, rtol=0, atol=0)
    from_pil = preset(Image.fromarray(rgb.permute(1, 2, 0).numpy()))  # PIL's gray and resampling: a level or two apart
    assert from_pil.shape == out.shape and (from_pil - out).abs().mean() < 0.01
    with pytest.raises(InvalidArgumentError, match="dbn.digits records no image preprocessing"):
        zoo.get_model_weights("dbn").DIGITS.transforms()
