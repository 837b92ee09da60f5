"""Data edges (hardening round 5): image lists that echo a huge column name, give a number for a
path or name one image two ways; an image deleted mid-training said in one line with --resume;
multi-label targets that carry no information (a label on every sample, no positives at all),
validation data over a subset of the labels, the hint for a [N, K] target; and ``zoo eval`` of
an image run on text rows said by the kinds of data."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from zoo.cli import main
from zoo.errors import DataError, run_command
from zoo.store.model_config import update_config
from zoo.training.data.kinds import open_data
from zoo.training.data.molecules.molecule_files import MoleculeOptions
from zoo.training.data.targets import read_targets

pytestmark = pytest.mark.usefixtures("one_thread")
QUICK = dict(batch_size=4, progress=False, tensorboard=False, plot=False, post_training=False)
HUGE = "x" * (1 << 20)  # a crafted column name of a MiB (the was 20 MB)


def write_images(folder: Path, count: int = 6, suffix: str = ".png") -> list[str]:
    """``count`` small gray images under ``folder/img``; their names relative to ``folder``."""
    (folder / "img").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        Image.fromarray(np.full((12, 12), 30 * i, np.uint8)).save(folder / "img" / f"{i}{suffix}")
    return [f"img/{i}{suffix}" for i in range(count)]


def read(path: Path, **options) -> object:
    return open_data(path, molecules=MoleculeOptions(**options) if options else None)


@pytest.mark.parametrize(
    "header,options,message",
    [
        (f"file_name,label,{HUGE}", {"label_field": "colour"}, r"no column 'colour' \(--label-field\)"),
        (f"file_name,label,{HUGE}", {}, r"2 columns besides 'file_name' \('label', 'x{40,80}\.\.\.'"),
        (f"name,{HUGE},b", {}, r"no column names the image files"),
        (f"file_name,{HUGE}", {}, r"the label column 'x{40}\.\.\.' \(1,048,576 characters\).*rename it"),
        (f"file_name,{HUGE},b", {"task": "classification"}, r"2 columns besides"),
    ],
)
def test_a_huge_column_name_is_echoed_bounded(tmp_path: Path, header: str, options: dict, message: str) -> None:
    names = write_images(tmp_path)
    rows = "".join(f"{n},{'ab'[i % 2]}" + ",1" * (header.count(",") - 1) + "\n" for i, n in enumerate(names))
    (tmp_path / "metadata.csv").write_text(header + "\n" + rows)
    with pytest.raises(DataError, match=message) as error:
        read(tmp_path, **options)
    assert len(str(error.value)) < 600 and "..." in str(error.value)


def test_a_huge_column_name_is_bounded_in_row_errors(tmp_path: Path) -> None:
    names = write_images(tmp_path)
    (tmp_path / "metadata.csv").write_text(f"file_name,{HUGE}\n{names[0]},a\n{names[1]}\n")
    with pytest.raises(DataError, match=r"line 3: 1 field where the header") as error:
        read(tmp_path)
    assert len(str(error.value)) < 600
    lines = [json.dumps({"file_name": n, "label": "ab"[i % 2]}) for i, n in enumerate(names)]
    lines[3] = json.dumps({"file_name": names[3], HUGE: "a"})
    (tmp_path / "metadata.csv").unlink()
    (tmp_path / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"line 4: no 'label'; the line has") as error:
        read(tmp_path)
    assert len(str(error.value)) < 600


def test_a_numeric_file_name_is_said_to_be_a_number_not_empty(tmp_path: Path) -> None:
    names = write_images(tmp_path)
    lines = [json.dumps({"file_name": 3 if i == 2 else n, "label": "ab"[i % 2]}) for i, n in enumerate(names)]
    (tmp_path / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"line 3: 'file_name' is the JSON number 3; it must be a string") as error:
        read(tmp_path)
    assert "empty" not in str(error.value)


def test_a_name_without_extension_that_two_images_fit_is_ambiguous(tmp_path: Path) -> None:
    names = write_images(tmp_path)
    write_images(tmp_path, 1, ".jpg")  # img/0.jpg beside img/0.png
    bare = [n.removesuffix(".png") for n in names]
    (tmp_path / "train.csv").write_text("image_id,label\n" + "".join(f"{n},{i % 2}\n" for i, n in enumerate(bare)))
    with pytest.raises(
        DataError, match=r"line 2: 'image_id' 'img/0' names no file, and two images have .*img/0.jpg and .*img/0.png"
    ):
        open_data(tmp_path / "train.csv", images=tmp_path)
    (tmp_path / "train.csv").write_text("image_id,label\n" + "".join(f"{n},{i % 2}\n" for i, n in enumerate(names)))
    source = open_data(tmp_path / "train.csv", images=tmp_path)  # named whole: no ambiguity
    assert source.full().samples[0][0].endswith("img/0.png")


def test_an_image_deleted_mid_training_is_one_line_naming_it_and_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = tmp_path / "data"
    names = write_images(data, 8)
    (data / "metadata.csv").write_text(
        "file_name,label\n" + "".join(f"{n},{'ab'[i % 2]}\n" for i, n in enumerate(names))
    )
    victim = data / names[3]
    kept = victim.read_bytes()

    def delete(trainer: object, metrics: dict) -> None:
        victim.unlink(missing_ok=True)

    def run(**options: object) -> int:
        return zoo.finetune("resnet20", data, tmp_path / "run", epochs=2, num_workers=1, val_fraction=0.25,
                            **QUICK, **options) and 0  # fmt: skip

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bare architecture
        assert run_command(lambda: run(callbacks=[delete])) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"zoo: error: {victim}: no such image file") and len(line) < 500, line
    assert "Traceback" not in line and "zoo finetune ... --resume" in line and "last.pt" in line
    victim.write_bytes(kept)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert run_command(lambda: run(resume=True)) == 0  # as the line says: the run goes on


def test_a_file_gone_before_the_first_checkpoint_says_to_start_again(tmp_path: Path) -> None:
    from zoo.training.data.source import DataChangedError
    from zoo.training.finetune.run_folder import on_changed_data

    with pytest.raises(
        DataChangedError, match=r"^x.png: no such image file; no checkpoint was written yet: .*--overwrite"
    ):
        with on_changed_data(tmp_path / "run"):
            raise DataChangedError("x.png: no such image file")


def test_a_label_on_every_sample_is_warned_and_refused_when_no_label_varies() -> None:
    rows = [(i + 2, tags) for i, tags in enumerate(["a b", "a", "a c", "a b"])]
    with pytest.warns(UserWarning, match=r"label 'a' is on every sample.*carries no information"):
        targets = read_targets("t.csv", rows, "tags", "multi-label")
    assert targets.names == ["a", "b", "c"]
    with pytest.raises(DataError, match=r"t.csv: every sample has the label 'a'.*nothing to learn"):
        read_targets("t.csv", [(i + 2, "a") for i in range(4)], "tags", "multi-label")


def test_all_zero_tag_tensors_are_refused(tmp_path: Path) -> None:
    torch.save({"x": torch.rand(8, 4), "y": torch.zeros(8, 3)}, tmp_path / "m.pt")
    with pytest.raises(DataError, match=r"m.pt: no sample has any of the 3 labels.*no positives"):
        read(tmp_path / "m.pt", task="multi-label")


@pytest.mark.parametrize(
    "y,hint,not_hint",
    [
        ((torch.arange(24).reshape(8, 3) % 2).float(), "--task multi-label", "argmax"),
        (torch.eye(3)[torch.arange(8) % 3], "argmax", None),
        (torch.softmax(torch.rand(8, 3), 1), "argmax", "--task multi-label"),
    ],
)
def test_a_two_d_target_gets_the_hint_that_fits_it(tmp_path: Path, y: torch.Tensor, hint: str, not_hint) -> None:
    torch.save({"x": torch.rand(8, 4), "y": y}, tmp_path / "m.pt")
    with pytest.raises(DataError, match=r"has shape \(8, 3\)") as error:
        read(tmp_path / "m.pt")
    assert hint in str(error.value) and (not_hint is None or not_hint not in str(error.value)), str(error.value)


def test_validation_data_may_hold_a_subset_of_the_labels(tmp_path: Path) -> None:
    torch.manual_seed(0)
    hot = (torch.rand(40, 3) > 0.5).float()
    hot[0], hot[1] = 1, 0
    torch.save({"x": torch.rand(40, 8), "y": hot, "classes": ["red", "round", "soft"]}, tmp_path / "train.pt")
    val_y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]] * 3)
    torch.save({"x": torch.rand(12, 8), "y": val_y, "classes": ["soft", "red"]}, tmp_path / "val.pt")
    result = zoo.finetune(
        "dbn", tmp_path / "train.pt", tmp_path / "run", task="multi-label", val_data=tmp_path / "val.pt",
        model_kwargs={"sizes": [8, 16, 8]}, epochs=1, **QUICK,
    )  # fmt: skip
    assert "val_map" in result.metrics
    from zoo.training.finetune.finetuning import _open_validation
    from zoo.training.finetune.options import FinetuneOptions

    train = read(tmp_path / "train.pt", task="multi-label")
    options = FinetuneOptions(val_data=tmp_path / "val.pt", molecules=MoleculeOptions(task="multi-label"))
    val = _open_validation(tmp_path / "train.pt", train, options, "dbn", None)
    assert val.class_names == ["red", "round", "soft"] and val.class_counts == {"red": 6, "round": 0, "soft": 6}
    assert val.full()[0][1].tolist() == [0.0, 0.0, 1.0] and val.full()[2][1].tolist() == [1.0, 0.0, 1.0]
    torch.save({"x": torch.rand(12, 8), "y": val_y, "classes": ["soft", "sweet"]}, tmp_path / "other.pt")
    options = FinetuneOptions(val_data=tmp_path / "other.pt", molecules=MoleculeOptions(task="multi-label"))
    with pytest.raises(DataError, match=r"other.pt: label 'sweet' is not one of the 3 labels"):
        _open_validation(tmp_path / "train.pt", train, options, "dbn", None)


def test_eval_of_an_image_run_on_text_rows_names_the_kinds(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = zoo.load("resnet20", pretrained=False, num_classes=1, in_chans=1)
    update_config(model, target={"name": "price", "mean": 0.0, "std": 1.0}, preprocess={"mean": [0.5], "std": [0.5]})
    run = zoo.save(model.eval(), tmp_path / "run")
    (tmp_path / "text.csv").write_text("text,label\ngreat film,pos\nawful,neg\n")
    assert main(["eval", str(run), "--data", str(tmp_path / "text.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reads images" in err and "text rows" in err and "price" not in err, err
