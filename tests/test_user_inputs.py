"""What users bring to `zoo.load` and `zoo.transforms`: checkpoints in other dtypes, saved
folders with extra arguments, colour or RGBA images for gray weights, odd image modes, a
read-only cache. Each case either works or raises one of zoo's errors naming the argument or file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from safetensors.torch import save_file

import zoo
from zoo.errors import InvalidArgumentError, WeightsNotFoundError, ZooError
from zoo.loading.transforms import ConvertChannels
from zoo.store.files import write_json


@pytest.fixture(scope="module")
def resnet20() -> torch.nn.Module:
    return zoo.load("resnet20.fmnist")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_a_checkpoint_in_another_dtype_loads_in_the_models_dtype(resnet20, tmp_path: Path, dtype: torch.dtype) -> None:
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in resnet20.state_dict().items()}
    save_file(state, tmp_path / "ckpt.safetensors")
    model = zoo.load("resnet20", weights=tmp_path / "ckpt.safetensors", in_chans=1, num_classes=10)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(model(x), resnet20(x), atol=0.05 if dtype != torch.float64 else 1e-6, rtol=0.05)
    half = zoo.load("resnet20", weights=tmp_path / "ckpt.safetensors", in_chans=1, num_classes=10, dtype=torch.float64)
    assert {p.dtype for p in half.parameters()} == {torch.float64}


def test_a_saved_folder_applies_what_applies_and_refuses_the_rest_by_name(resnet20, tmp_path: Path) -> None:
    zoo.save(resnet20, tmp_path / "saved")
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(zoo.load(tmp_path / "saved")(x), resnet20(x))
    rgb = zoo.load(tmp_path / "saved", in_chans=3)
    assert rgb(torch.randn(2, 3, 28, 28)).shape == (2, 10)
    assert rgb.pretrained_cfg["preprocess"]["mean"] == [0.5] * 3 and rgb.pretrained_cfg["model_kwargs"]["in_chans"] == 3
    assert zoo.load(tmp_path / "saved", num_classes=4)(x).shape == (2, 4)
    fresh = zoo.load(tmp_path / "saved", pretrained=False)
    assert not torch.equal(fresh.fc.weight, resnet20.fc.weight)
    with pytest.raises(InvalidArgumentError, match=r"weights='other.pth' does not apply to the saved folder"):
        zoo.load(tmp_path / "saved", weights="other.pth")
    with pytest.raises(InvalidArgumentError, match=r"head='lm' does not apply"):
        zoo.load(tmp_path / "saved", head="lm")
    with pytest.raises(InvalidArgumentError, match=r"resnet20 takes no option 'foo'"):
        zoo.load(tmp_path / "saved", foo=1)


def test_weights_argument_forms(resnet20, tmp_path: Path) -> None:
    save_file(resnet20.state_dict(), tmp_path / "w.safetensors")
    url = (tmp_path / "w.safetensors").as_uri()
    model = zoo.load("resnet20", weights=url, in_chans=1, num_classes=10)
    assert torch.equal(model.fc.weight, resnet20.fc.weight)
    with pytest.raises(WeightsNotFoundError, match="is a folder without config.json: pass the weight file inside it"):
        zoo.load("resnet20", weights=tmp_path)
    with pytest.raises(WeightsNotFoundError, match="does not exist"):
        zoo.load("resnet20", weights=tmp_path / "missing.pth")


@pytest.mark.parametrize("in_chans", [1, 2, 3, 4])
def test_in_chans_adapts_the_preprocessing_with_the_first_convolution(in_chans: int) -> None:
    model = zoo.load("resnet20.fmnist", in_chans=in_chans)
    preprocess = model.pretrained_cfg["preprocess"]
    assert len(preprocess["mean"]) == len(preprocess["std"]) == in_chans
    if in_chans == 2:
        with pytest.raises(ValueError, match="1, 3 or 4 channels"):
            zoo.transforms(model)
        return
    image = Image.new("RGB", (28, 28), (200, 10, 10))
    x = zoo.transforms(model)(image)
    assert x.shape == (in_chans, 28, 28)
    assert model(x[None]).shape == (1, 10)


MODES = ["1", "L", "LA", "P", "RGB", "RGBA", "CMYK", "I;16", "I", "F"]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(MODES),
    channels=st.sampled_from([1, 3, 4]),
    width=st.integers(1, 40),
    height=st.integers(1, 40),
)
def test_convert_channels_brings_any_image_mode_to_the_models_channels(
    mode: str, channels: int, width: int, height: int
) -> None:
    pixels = np.random.default_rng(width * 41 + height).integers(0, 255, (height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGB").convert(mode if mode not in ("I;16", "I", "F") else "L")
    if mode in ("I;16", "I", "F"):
        image = Image.fromarray(
            np.asarray(image).astype({"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]) * 200,
            mode if mode != "I;16" else None,
        )
    out = ConvertChannels(channels)(image)
    assert len(out.getbands()) == channels and out.size == (width, height)
    gray = torch.randint(0, 255, (1, height, width), dtype=torch.uint8)
    for have in (1, 3, 4):
        assert ConvertChannels(channels)(gray.expand(have, -1, -1).clone()).shape == (channels, height, width)


@pytest.mark.parametrize("make", ["pil_rgb", "pil_gray", "uint8_tensor", "uint8_batch", "float_tensor", "numpy_hwc"])
def test_to_normalized_gives_torchvisions_three_steps_bit_for_bit(make: str) -> None:
    """`ToNormalized` is v2.ToImage, ToDtype(float32, scale=True) and Normalize in one step: the
    same numbers, as a plain tensor, from PIL images, uint8 tensors (its own path) and batches,
    float tensors and HWC arrays."""
    from torchvision.transforms import v2

    from zoo.loading.transforms import ToNormalized

    pixels = np.random.default_rng(3).integers(0, 256, (11, 7, 3), dtype=np.uint8)
    image = {
        "pil_rgb": Image.fromarray(pixels),
        "pil_gray": Image.fromarray(pixels[..., 0]),
        "uint8_tensor": torch.from_numpy(pixels).permute(2, 0, 1).contiguous(),
        "uint8_batch": torch.from_numpy(pixels).permute(2, 0, 1)[None].repeat(2, 1, 1, 1),
        "float_tensor": torch.from_numpy(pixels).permute(2, 0, 1).float() / 255,
        "numpy_hwc": pixels,
    }[make]
    mean, std = ([0.2], [0.3]) if make == "pil_gray" else ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    steps = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)])
    ours = ToNormalized(mean, std)(image)
    assert type(ours) is torch.Tensor and ours.dtype == torch.float32
    assert torch.equal(ours, steps(image).as_subclass(torch.Tensor))


@pytest.mark.parametrize("size", [28, [28, 40], [40, 28], 20, [20, 30], 40])
@pytest.mark.parametrize("shape", [(1, 28, 40), (3, 28, 40), (2, 3, 28, 40), (3, 40, 28)])
def test_resize_if_needed_gives_torchvisions_resize(size: int | list[int], shape: tuple[int, ...]) -> None:
    """`ResizeIfNeeded` hands back a tensor already at its output size (no dispatch) and resizes
    any other as ``v2.Resize`` does: the same numbers, tensors (uint8 and float) and PIL images."""
    from torchvision.transforms import v2

    from zoo.loading.transforms import ResizeIfNeeded

    ours, theirs = ResizeIfNeeded(size, antialias=True), v2.Resize(size, antialias=True)
    pixels = torch.from_numpy(np.random.default_rng(5).integers(0, 256, shape, dtype=np.uint8))
    for image in (pixels, pixels.float() / 255):
        expected = theirs(image)
        got = ours(image)
        assert torch.equal(got, expected) and type(got) is type(expected)
        if got.shape == image.shape:
            assert got is image  # no copy, as torchvision's kernel returns it
    if len(shape) == 3:
        picture = Image.fromarray(pixels.permute(1, 2, 0).numpy().squeeze())
        assert np.array_equal(np.asarray(ours(picture)), np.asarray(theirs(picture)))


def test_resize_if_needed_leaves_other_inputs_and_max_size_to_torchvision() -> None:
    """Key points (whose last dimensions are not H and W) are resized and a size torchvision
    refuses with ``max_size`` is refused, as ``v2.Resize`` does, even at the image's own size."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    from zoo.loading.transforms import ResizeIfNeeded

    points = tv_tensors.KeyPoints(torch.tensor([[[1.0, 2.0], [3.0, 4.0]]]), canvas_size=(10, 10))
    assert torch.equal(ResizeIfNeeded(2)(points), v2.Resize(2)(points))
    image = tv_tensors.Image(torch.zeros(3, 28, 28, dtype=torch.uint8))
    assert type(ResizeIfNeeded(28)(image)) is tv_tensors.Image
    for resize in (ResizeIfNeeded, v2.Resize):
        with pytest.raises(ValueError, match="max_size"):
            resize([28, 28], max_size=300)(image.as_subclass(torch.Tensor))


def test_to_normalized_mean_and_std_are_read_only() -> None:
    """The uint8 path's tensors are made from the mean and std once, so those cannot change after."""
    from zoo.loading.transforms import ToNormalized

    normalize = ToNormalized([0.5], [0.5])
    with pytest.raises(AttributeError):
        normalize.mean = [0.0]
    normalize.mean.append(0.0)  # a copy
    assert normalize.mean == [0.5] and normalize(torch.zeros(1, 2, 2, dtype=torch.uint8)).eq(-1).all()


def test_a_read_only_zoo_home_loads_bundled_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "ro"
    home.mkdir()
    home.chmod(0o555)
    monkeypatch.setenv("ZOO_HOME", str(home))
    if os.geteuid() == 0:  # root ignores permission bits: answer zoo's writability check as a read-only mount would
        real = os.access
        monkeypatch.setattr(
            os, "access", lambda p, m, **kw: False if m & os.W_OK and str(p).startswith(str(home)) else real(p, m, **kw)
        )
    try:
        model = zoo.load("resnet20.fmnist")
        assert model(torch.zeros(1, 1, 28, 28)).shape == (1, 10)
        assert list(home.iterdir()) == []
    finally:
        home.chmod(0o755)


def test_zoo_home_pointing_at_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "f"))
    assert zoo.load("resnet20.fmnist").num_classes == 10  # bundled weights need no cache
    with pytest.raises(ZooError, match="is a file, not a folder"):
        zoo.load("resnet20", weights="http://127.0.0.1:9/w.safetensors")


def test_a_folder_named_like_registered_weights_does_not_shadow_them(
    resnet20, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from zoo.cli import main

    monkeypatch.chdir(tmp_path)
    zoo.save(zoo.load("resnet20.fmnist", num_classes=3), "resnet20.fmnist")  # a user's --out resnet20.fmnist
    with pytest.warns(UserWarning, match=r"using the registered weights\. Write \./resnet20\.fmnist for the folder"):
        assert zoo.load("resnet20.fmnist").num_classes == 10
    assert zoo.load("./resnet20.fmnist").num_classes == 3
    assert zoo.load(tmp_path / "resnet20.fmnist").num_classes == 3
    zoo.save(zoo.load("resnet20.fmnist", num_classes=4), "mine")
    assert zoo.load("mine").num_classes == 4  # no entry has that name: the folder
    with pytest.raises(WeightsNotFoundError, match="does not exist"):
        zoo.load("./nothing")
    image = tmp_path / "x.png"
    Image.new("L", (28, 28)).save(image)
    assert main(["predict", "./resnet20.fmnist", str(image), "--topk", "3"]) == 0
    assert main(["predict", "resnet20.fmnist", str(image), "--topk", "3"]) == 0
    folder_run, registered_run = capsys.readouterr().out.split(str(image))[1:]
    names = zoo.store.weight_entries.load_categories("fashion-mnist")
    assert not any(n in folder_run for n in names) and any(n in registered_run for n in names)


@pytest.mark.parametrize(
    "damage,message",
    [
        ("truncate weights", r"model\.safetensors is not a readable safetensors file"),
        ("malformed config", r"config\.json is not readable JSON"),
        ("config without architecture", r"config\.json: field .architecture. must be a non-empty string"),
    ],
)
def test_a_damaged_saved_folder_names_its_file(resnet20, tmp_path: Path, damage: str, message: str) -> None:
    folder = zoo.save(resnet20, tmp_path / "saved")
    if damage == "truncate weights":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "malformed config":
        (folder / "config.json").write_text("{not json")
    else:
        config = json.loads((folder / "config.json").read_text())
        del config["architecture"]
        (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ZooError, match=message):
        zoo.load(folder)


@given(
    num_classes=st.sampled_from([None, 1, 3, 10, 0, -2, 2.5]),
    in_chans=st.sampled_from([None, 1, 3, 4]),
    pretrained=st.booleans(),
    dtype=st.sampled_from([None, torch.float32, torch.float64, torch.bfloat16]),
    features_only=st.booleans(),
    extra=st.sampled_from([{}, {"drop_rate": 0.1}, {"foo": 1}]),
)
def test_load_keyword_combinations_work_or_name_the_argument(
    num_classes, in_chans, pretrained, dtype, features_only, extra
) -> None:
    kwargs = {k: v for k, v in dict(num_classes=num_classes, in_chans=in_chans, dtype=dtype).items() if v is not None}
    try:
        model = zoo.load("resnet20.fmnist", pretrained=pretrained, features_only=features_only, **kwargs, **extra)
    except (ZooError, ValueError) as error:
        named = [name for name in ("num_classes", "foo", "features_only") if name in str(error)]
        assert named, f"{type(error).__name__} names no argument: {error}"
        return
    assert "foo" not in extra and (num_classes is None or (isinstance(num_classes, int) and num_classes > 0))
    channels = in_chans or (1 if pretrained else 3)  # the weights are gray; the architecture defaults to RGB
    x = torch.randn(2, channels, 28, 28, dtype=dtype or torch.float32)
    out = model(x)
    if features_only:
        assert isinstance(out, list) and all(t.shape[0] == 2 for t in out)
    else:
        assert out.shape == (2, num_classes or 10) and out.dtype == (dtype or torch.float32)
    assert len(model.pretrained_cfg["preprocess"].get("mean", [0] * channels)) == channels or not pretrained


def test_saving_over_another_model_leaves_no_stale_card(resnet20, tmp_path: Path) -> None:
    zoo.save(resnet20, tmp_path / "m")
    assert "resnet20" in (tmp_path / "m" / "README.md").read_text()
    with pytest.raises(
        InvalidArgumentError, match="already holds config.json, model.safetensors, README.md; pass overwrite=True"
    ):
        zoo.save(resnet20, tmp_path / "m")
    zoo.save(zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3), tmp_path / "m", overwrite=True)
    card = (tmp_path / "m" / "README.md").read_text()  # the new model's own card, not the old weights'
    assert "resnet20.fmnist" not in card and "3 outputs" in card and zoo.load(tmp_path / "m").num_classes == 3


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_saved_files_follow_the_umask_like_any_other_file(resnet20, tmp_path: Path, umask: int) -> None:
    """safetensors creates its file 0600; a folder shared with colleagues needs its weights as readable as its card."""
    old = os.umask(umask)
    try:
        zoo.save(resnet20, tmp_path / "mine")
        write_json({"a": 1}, tmp_path / "other.json")
    finally:
        os.umask(old)
    expected = 0o666 & ~umask
    modes = {p.name: p.stat().st_mode & 0o777 for p in [*(tmp_path / "mine").iterdir(), tmp_path / "other.json"]}
    assert modes == {name: expected for name in modes} and "model.safetensors" in modes
