"""Image lists (issue 49): a folder with metadata.csv/.jsonl (Hugging Face's imagefolder), a
Kaggle-style train.csv with --images DIR; the label column by --label-field; every bad row a
DataError naming the file, the line and the field; single-label, regression and multi-label
targets end to end, from the command line and from zoo.finetune."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import zoo
from zoo import cli
from zoo.errors import DataError, ZooError
from zoo.training.data.kinds import open_data
from zoo.training.data.molecules.molecule_files import MoleculeOptions

pytestmark = pytest.mark.usefixtures("one_thread")
QUICK = dict(epochs=1, batch_size=4, progress=False, tensorboard=False, plot=False, post_training=False)


def write_images(folder: Path, count: int = 12, size: int = 28) -> list[str]:
    """``count`` small gray PNGs under ``folder/img``, the i-th brighter with i; their names relative to ``folder``."""
    (folder / "img").mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        pixels = np.full((size, size), 20 * i % 256, dtype=np.uint8)
        Image.fromarray(pixels).save(folder / "img" / f"{i}.png")
        names.append(f"img/{i}.png")
    return names


def write_list(folder: Path, count: int = 12, name: str = "metadata.csv") -> Path:
    """An image list with a class, a value and tags per image."""
    names = write_images(folder, count)
    rows = [
        (n, "odd" if i % 2 else "even", i * 0.5, " ".join(["a", "b", "c"][: i % 3 + 1])) for i, n in enumerate(names)
    ]
    if name.endswith(".jsonl"):
        lines = [json.dumps({"file_name": n, "label": y, "age": v, "tags": t.split()}) for n, y, v, t in rows]
        (folder / name).write_text("\n".join(lines) + "\n")
    else:
        (folder / name).write_text("file_name,label,age,tags\n" + "".join(f"{n},{y},{v},{t}\n" for n, y, v, t in rows))
    return folder / name


def read(path: Path, **options) -> object:
    return open_data(path, molecules=MoleculeOptions(**options) if options else None)


@pytest.mark.parametrize("name", ["metadata.csv", "metadata.jsonl"])
def test_a_folder_with_metadata_reads_each_column_as_asked(tmp_path: Path, name: str) -> None:
    write_list(tmp_path, name=name)
    classes = read(tmp_path, label_field="label")
    assert classes.kind == "images" and classes.class_names == ["even", "odd"] and classes.in_chans == 1
    values = read(tmp_path, label_field="age")
    assert values.target["name"] == "age" and values.target["mean"] == pytest.approx(2.75)
    tags = read(tmp_path, label_field="tags", task="multi-label")
    assert tags.multi_label and tags.class_names == ["a", "b", "c"] and tags.class_counts == {"a": 12, "b": 8, "c": 4}
    train, _ = tags.split(0.25)
    assert train[0][1].tolist() in ([1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0])


def test_several_label_columns_need_label_field(tmp_path: Path) -> None:
    write_list(tmp_path)
    with pytest.raises(DataError, match=r"metadata.csv: 3 columns besides 'file_name'.*--label-field"):
        read(tmp_path)
    with pytest.raises(DataError, match=r"no column 'colour' \(--label-field\)"):
        read(tmp_path, label_field="colour")


def test_a_kaggle_list_with_images_elsewhere(tmp_path: Path) -> None:
    names = write_images(tmp_path / "pictures")
    table = tmp_path / "train.csv"
    table.write_text("id,image,label\n" + "".join(f"{i},{n},{i % 2}\n" for i, n in enumerate(names)))
    source = open_data(table, images=tmp_path / "pictures", molecules=MoleculeOptions(label_field="label"))
    assert source.num_samples == 12 and source.class_names == ["0", "1"]
    with pytest.raises(DataError, match=r"train.csv, line 2: 'image' 'img/0.png': .* does not exist"):
        open_data(table, molecules=MoleculeOptions(label_field="label"))  # relative to the list's own folder


def test_a_planet_style_list_names_images_without_their_extension(tmp_path: Path) -> None:
    write_images(tmp_path / "train-jpg", 6)
    rows = "".join(f"img/{i},{'haze primary' if i % 2 else 'clear'}\n" for i in range(6))
    (tmp_path / "train_v2.csv").write_text("image_name,tags\n" + rows)
    options = MoleculeOptions(task="multi-label")
    source = open_data(tmp_path / "train_v2.csv", images=tmp_path / "train-jpg", molecules=options)
    assert source.class_names == ["clear", "haze", "primary"] and source.full().samples[0][0].endswith("0.png")
    auto = open_data(tmp_path / "train_v2.csv", images=tmp_path / "train-jpg")
    assert auto.class_names == ["clear", "haze primary"] and "pass --task multi-label" in auto.task_note


def test_one_zero_one_column_per_label_is_multi_label(tmp_path: Path) -> None:
    names = write_images(tmp_path)
    rows = "".join(f"{n},{i % 2},{int(i > 4)}\n" for i, n in enumerate(names))
    (tmp_path / "metadata.csv").write_text("file_name,odd,big\n" + rows)
    source = read(tmp_path)
    assert source.multi_label and source.class_names == ["odd", "big"] and "0/1 column" in source.task_note


@pytest.mark.parametrize(
    "path,message",
    [
        ("img/missing.png", r"line 4: 'file_name' 'img/missing.png': .*missing.png does not exist"),
        ("../outside.png", r"line 4: 'file_name' '../outside.png' leads out of"),
        ("/etc/passwd", r"line 4: 'file_name' is the absolute path '/etc/passwd'"),
        ("link.png", r"line 4: 'file_name' 'link.png' is a link that leads out of"),
        ("notes.png", r"line 4 \(file_name 'notes.png'\): .*notes.png is not a readable image"),
        ("", r"line 4: 'file_name' is empty"),
    ],
)
def test_a_bad_path_is_refused_by_file_and_line(tmp_path: Path, path: str, message: str) -> None:
    data = tmp_path / "data"
    names = write_images(data, 6)
    (tmp_path / "outside.png").write_bytes((data / "img" / "0.png").read_bytes())
    os.symlink(tmp_path / "outside.png", data / "link.png")
    (data / "notes.png").write_text("not an image")
    names[2] = path
    (data / "metadata.csv").write_text("file_name,label\n" + "".join(f"{n},{i % 2}\n" for i, n in enumerate(names)))
    with pytest.raises(DataError, match=message):
        read(data)


@pytest.mark.parametrize(
    "content,message",
    [
        ("name,label\nimg/0.png,a\n", r"line 1: no column names the image files"),
        ("file_name,label\nimg/0.png,a\nimg/1.png,\n", r"line 3: the label 'label' is empty"),
        ("file_name,tags\nimg/0.png,a b\nimg/1.png,\n", r"line 3: the label 'tags' is empty"),
        ("file_name\nimg/0.png\n", r"line 1: no label column besides 'file_name'"),
        ("file_name,label\n", r"lists no images"),
    ],
)
def test_a_bad_table_is_refused_naming_the_field(tmp_path: Path, content: str, message: str) -> None:
    write_images(tmp_path, 2)
    (tmp_path / "metadata.csv").write_text(content)
    task = "multi-label" if "tags" in content else "auto"
    with pytest.raises(DataError, match=message):
        read(tmp_path, task=task)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["cat", "dog", "car", "sky"]), min_size=1, max_size=4), min_size=2, max_size=8
    ).filter(lambda rows: len({frozenset(row) for row in rows}) > 1)  # some label varies: else nothing to learn
)
def test_delimited_tags_and_json_lists_give_the_same_multi_hot(tags: list[list[str]]) -> None:
    from zoo.training.data.targets import read_targets

    split = read_targets("t.csv", [(i + 2, "  ".join(t)) for i, t in enumerate(tags)], "tags", "multi-label")
    listed = read_targets("t.jsonl", [(i + 1, t) for i, t in enumerate(tags)], "tags")
    assert split.names == listed.names == sorted({tag for row in tags for tag in row})
    assert split.values.tolist() == listed.values.tolist()
    assert all(
        {split.names[k] for k, v in enumerate(row) if v} == set(t) for row, t in zip(split.values.tolist(), tags)
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["a", "..", "b", "."]), min_size=1, max_size=4).filter(lambda p: ".." in p))
def test_any_path_with_a_parent_step_is_refused(tmp_path_factory, parts: list[str]) -> None:
    folder = tmp_path_factory.mktemp("list")
    write_images(folder, 2)
    (folder / "metadata.csv").write_text(f"file_name,label\nimg/0.png,a\n{'/'.join(parts)},b\n")
    with pytest.raises(DataError, match=r"line 3: 'file_name' .* leads out of"):
        read(folder)


def test_multi_label_end_to_end_saves_its_thresholds(tmp_path: Path) -> None:
    write_list(tmp_path / "data")
    result = zoo.finetune(
        "resnet20", tmp_path / "data", tmp_path / "run", label_field="tags", task="multi-label", val_fraction=0.5,
        **QUICK,
    )  # fmt: skip
    assert {"val_map", "val_f1_micro", "val_f1_macro"} <= set(result.metrics)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["multi_label"]
    assert saved["names"] == ["a", "b", "c"] and len(saved["thresholds"]) == 3
    assert all(0 <= t <= 1 for t in saved["thresholds"])
    assert zoo.load(tmp_path / "run").pretrained_cfg["multi_label"] == saved
    assert "decision thresholds" in (tmp_path / "run" / "README.md").read_text()


def test_regression_on_an_image_list_from_python(tmp_path: Path) -> None:
    write_list(tmp_path / "data")
    (tmp_path / "data" / "metadata.csv").write_text(
        "file_name,age\n" + "".join(f"img/{i}.png,{i * 1.5}\n" for i in range(12))
    )
    result = zoo.finetune(
        "resnet20", tmp_path / "data", tmp_path / "run", task="regression", val_fraction=0.25, **QUICK
    )
    assert {"val_mae", "val_rmse", "val_r2"} <= set(result.metrics)
    target = json.loads((tmp_path / "run" / "config.json").read_text())["target"]
    assert target["name"] == "age" and target["mean"] == pytest.approx(8.25)


def test_regression_on_text_rows(tmp_path: Path) -> None:
    rows = [(f"{'good ' * (i % 5)}film {i}", i % 5 + 0.5) for i in range(16)]
    data = tmp_path / "scores.csv"
    data.write_text("text,score\n" + "".join(f'"{t}",{y}\n' for t, y in rows))
    tiny = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
    result = zoo.finetune(
        "moe_encoder", data, tmp_path / "run", label_field="score", model_kwargs=tiny, val_fraction=0.25, **QUICK
    )
    assert "val_r2" in result.metrics
    assert json.loads((tmp_path / "run" / "config.json").read_text())["target"]["name"] == "score"


def test_the_command_line_says_a_bad_list_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    names = write_images(tmp_path / "data", 4)
    names[1] = "../secret.png"
    (tmp_path / "data" / "metadata.csv").write_text(
        "file_name,label\n" + "".join(f"{n},x{i % 2}\n" for i, n in enumerate(names))
    )
    code = cli.main(["finetune", "resnet20", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run")])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "metadata.csv, line 3: 'file_name' '../secret.png' leads out of" in line
    assert not (tmp_path / "run").exists()


def test_a_crafted_list_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from zoo.training.data.images import image_lists

    write_list(tmp_path)
    (tmp_path / "deep.jsonl").write_text('{"file_name": "img/0.png", "label": ' + "[" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"deep.jsonl, line 1: JSON nested too deep"):
        open_data(tmp_path / "deep.jsonl", images=tmp_path)
    monkeypatch.setattr(image_lists, "MAX_ROWS", 5)
    with pytest.raises(ZooError, match=r"lists 12 images, more than 5"):
        read(tmp_path, label_field="label")
    monkeypatch.setattr(image_lists, "MAX_LIST_BYTES", 100)
    with pytest.raises(ZooError, match=r"is read whole, up to"):
        read(tmp_path, label_field="label")


def test_a_link_swapped_in_after_the_list_was_read_is_refused_when_opened(tmp_path: Path) -> None:
    """Issue 62, case 9: the rule that keeps a list's images inside its folder holds when each
    image is opened, not only when the list is read."""
    names = write_images(tmp_path / "data", 4)
    (tmp_path / "data" / "metadata.csv").write_text(
        "file_name,label\n" + "".join(f"{n},x{i % 2}\n" for i, n in enumerate(names))
    )
    dataset = open_data(tmp_path / "data").full()
    assert dataset[0][1] == 0  # read as listed
    outside = tmp_path / "secret.png"
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(outside)
    victim = tmp_path / "data" / names[0]
    victim.unlink()
    os.symlink(outside, victim)
    with pytest.raises(DataError, match=r"now leads out of .* \(to .*secret\.png\), since the list was read"):
        dataset[0]
    assert dataset[1][1] == 1  # the others still read
