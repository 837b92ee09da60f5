"""Images a user hands zoo, read one way by every command (issue: hardening 1, 2, 5): symlink
loops in an image folder, 16-bit images, decompression bombs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from zoo.cli import main
from zoo.errors import DataError
from zoo.loading.images import open_image
from zoo.training.data.kinds import open_data


def _folder(root: Path, images: dict[str, list[np.ndarray]]) -> Path:
    for label, arrays in images.items():
        (root / label).mkdir(parents=True)
        for i, array in enumerate(arrays):
            Image.fromarray(array).save(root / label / f"{i}.png")
    return root


def _gray(value: int, dtype=np.uint8) -> np.ndarray:
    return np.full((28, 28), value, dtype)


def test_a_link_back_into_the_data_is_refused_by_name(tmp_path: Path) -> None:
    data = _folder(tmp_path / "data", {"a": [_gray(10), _gray(20)], "b": [_gray(200), _gray(210)]})
    os.symlink("..", data / "a" / "up")
    with pytest.raises(DataError, match=r"a/up is a link to .*data, which holds or lies in the image folder"):
        open_data(data)


def test_a_loop_outside_the_data_ends_and_each_file_counts_once(tmp_path: Path) -> None:
    data = _folder(tmp_path / "data", {"a": [_gray(10), _gray(20)], "b": [_gray(200), _gray(210)]})
    outside = _folder(tmp_path / "outside", {"more": [_gray(30)]})
    os.symlink(outside, outside / "more" / "self")
    os.symlink(outside, data / "a" / "ext")
    os.symlink(outside, data / "a" / "ext2")  # the same files through a second link
    source = open_data(data)
    assert source.class_counts == {"a": 3, "b": 2}


def test_16_bit_images_train_as_they_predict(tmp_path: Path) -> None:
    data = _folder(tmp_path / "data", {"dark": [_gray(10000, np.uint16)] * 2, "light": [_gray(50000, np.uint16)] * 2})
    source = open_data(data)
    images = source.make_subset(range(source.num_samples), None)
    means = sorted({float(np.asarray(images[i][0]).mean()) for i in range(len(images))})
    assert means == [round(10000 / 257), round(50000 / 257)] or means == [10000 // 257, 50000 // 257]
    predicted = np.asarray(open_image(data / "dark" / "0.png", channels=1))
    assert predicted.mean() == means[0]


def test_a_decompression_bomb_is_one_line_in_every_command(tmp_path: Path, capsys) -> None:
    bomb = tmp_path / "bomb.png"
    Image.new("L", (20000, 20000)).save(bomb)
    assert main(["predict", "resnet20.fmnist", str(bomb)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bomb.png" in err and "decompression bomb" in err
    data = _folder(tmp_path / "data", {"a": [_gray(1)] * 2, "b": [_gray(2)] * 2})
    Image.new("L", (20000, 20000)).save(data / "a" / "z.png")
    with pytest.raises(DataError, match="z.png is refused as a decompression bomb"):
        open_data(data)  # found while the folder's headers are read, before any training
