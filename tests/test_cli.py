"""`zoo list`, `zoo info`, `zoo predict` and `python -m zoo`."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torchvision
from PIL import Image
from published import publish, randomize_batchnorm

from zoo.cli import main
from zoo.store import weight_entries


def test_list(capsys):
    assert main(["list", "resnet1*"]) == 0
    assert capsys.readouterr().out.split() == ["resnet101", "resnet152", "resnet18"]
    assert main(["list", "resnet50*", "--pretrained"]) == 0
    assert capsys.readouterr().out.split() == ["resnet50.tv2_in1k", "resnet50.tv_in1k"]


def test_info(capsys):
    assert main(["info", "resnet50.tv_in1k"]) == 0
    out = capsys.readouterr().out
    for text in ("25,557,032", "0676ba61", "top1=76.13", "https://download.pytorch.org/models/resnet50-0676ba61.pth"):
        assert text in out


def test_unknown_name_is_a_clear_error(capsys):
    assert main(["info", "resnet5"]) == 2
    assert "Did you mean" in capsys.readouterr().err


def test_predict_prints_top5_with_class_names(http_server, monkeypatch, tmp_path, capsys):
    torch.manual_seed(0)
    reference = randomize_batchnorm(torchvision.models.resnet18()).eval()
    publish(http_server, monkeypatch, "resnet18.tv_in1k", reference.state_dict())
    image_path = tmp_path / "cat.png"
    Image.fromarray(torch.randint(0, 256, (80, 90, 3), dtype=torch.uint8).numpy()).save(image_path)
    assert main(["predict", "resnet18.tv_in1k", str(image_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(image_path) and len(lines) == 6
    transform = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.transforms()
    with torch.no_grad():
        expected = reference(transform(Image.open(image_path).convert("RGB"))[None]).argmax().item()
    expected_name = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["categories"][expected]
    assert lines[1].strip().endswith(f"{expected_name} ({expected})")


def test_python_dash_m():
    result = subprocess.run([sys.executable, "-m", "zoo", "list", "seresnet*"], capture_output=True, text=True)
    assert result.returncode == 0 and "seresnet50" in result.stdout.split()


def _image(path, size, mode="RGB"):
    Image.fromarray(torch.randint(0, 256, (size[1], size[0], 3), dtype=torch.uint8).numpy()).convert(mode).save(path)
    return str(path)


def test_predict_takes_any_size_and_mode_and_names_a_corrupt_file(tmp_path, capsys):
    images = [
        _image(tmp_path / "a.png", (28, 28), "L"),
        _image(tmp_path / "b.png", (224, 300), "RGBA"),
        _image(tmp_path / "c.jpg", (17, 9)),
    ]
    assert main(["predict", "resnet20.fmnist", *images, "--topk", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if not line.startswith(" ")] == images and len(lines) == 9
    names = weight_entries.load_categories("fashion-mnist")
    assert all(any(f"  {name} (" in line for name in names) for line in lines if line.startswith(" "))
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot an image")
    assert main(["predict", "resnet20.fmnist", str(tmp_path / "bad.png")]) == 2
    assert f"{tmp_path / 'bad.png'} is not a readable image" in capsys.readouterr().err


def test_predict_of_a_finetuned_folder_prints_its_class_names(tmp_path, capsys):
    import zoo

    model = zoo.load("resnet20.fmnist", num_classes=3)
    model.pretrained_cfg = {**model.pretrained_cfg, "class_names": ["ant", "bee", "cat"]}
    zoo.save(model, tmp_path / "mine")
    assert main(["predict", str(tmp_path / "mine"), _image(tmp_path / "x.png", (28, 28)), "--topk", "3"]) == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in ("ant", "bee", "cat"))


def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys):
    image = _image(tmp_path / "x.png", (28, 28))
    for argv in (
        ["predict", "resnet20.fmnist", image, "--topk", "0"],
        ["predict", "resnet20.fmnist", image, "--topk", "-1"],
        ["generate", "moe_lm.stdlib", "x", "--max-new-tokens", "-5"],
    ):
        try:
            code = main(argv)
        except SystemExit as exit:  # argparse
            code = exit.code
        assert code == 2
        assert "must be" in capsys.readouterr().err
    for argv in (["predict", "dbn.digits", image], ["predict", "resnet20.fmnist", image, "--device", "gpu"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("zoo: error:") and len(err.strip().splitlines()) == 1
    assert "device='gpu' is not a device torch knows" in err


def test_generate_streams_its_tokens(capsys):
    assert main(["generate", "moe_lm.stdlib", "def fib(", "--max-new-tokens", "20", "--temperature", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("def fib(") and 8 < len(out) <= len("def fib(") + 20 + 1


def test_list_into_a_closed_pipe_is_quiet():
    listing = subprocess.run(
        f"{sys.executable} -m zoo list --pretrained | head -1", shell=True, capture_output=True, text=True
    )
    assert listing.stdout.count("\n") == 1 and listing.stderr == ""


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("zoo.cli.commands.complete", interrupted)
    assert main(["generate", "moe_lm.stdlib", "def "]) == 130
    assert capsys.readouterr().err.strip() == "zoo: interrupted"


def test_ctrl_c_during_finetune_says_how_to_continue(monkeypatch, capsys, tmp_path):
    """One line, exit 130, and what continues the run: --resume once it checkpointed, else starting it again."""
    out = tmp_path / "run"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("zoo.training.finetune.run", interrupted)
    command = ["finetune", "resnet20.fmnist", "--data", "d", "--out", str(out)]
    assert main(command) == 130
    assert capsys.readouterr().err.strip() == f"zoo: interrupted ({out}: no checkpoint yet: start it again)"
    (out / "checkpoints").mkdir(parents=True)
    assert main(command) == 130
    assert capsys.readouterr().err.strip().endswith("no checkpoint yet: start it again with --overwrite)")
    (out / "checkpoints" / "last.pt").write_bytes(b"")
    assert main(command) == 130
    assert capsys.readouterr().err.strip() == f"zoo: interrupted ({out}: the same command with --resume continues it)"


@pytest.mark.parametrize("stage", ["build_parser", "handler_import"])
def test_ctrl_c_while_modules_import_is_one_line_and_exit_130(monkeypatch, capsys, stage):
    """Ctrl-C while the command's options are built or its handler's module (torch, training) imports."""
    import importlib

    from zoo.cli import parser

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if stage == "handler_import":
        real_import = importlib.import_module

        def importing(name, *args, **kwargs):
            return interrupted() if name == "zoo.cli.commands" else real_import(name, *args, **kwargs)

        monkeypatch.delitem(sys.modules, "zoo.cli.commands", raising=False)
        monkeypatch.setattr(importlib, "import_module", importing)  # how a Handler imports its module
    else:
        monkeypatch.setattr(parser, stage, interrupted)
    assert main(["finetune", "resnet20.fmnist", "--data", "d", "--out", "o"]) == 130
    assert capsys.readouterr().err.strip() == "zoo: interrupted"


def test_generate_takes_a_prompt_that_is_not_utf8(capsys):
    prompt = b"x = b'\xff\xfe'".decode("utf-8", "surrogateescape")  # what Python makes of such argv bytes
    assert main(["generate", "moe_lm.stdlib", prompt, "--max-new-tokens", "3", "--temperature", "0"]) == 0


def test_predict_on_a_folder_says_to_pass_its_files(tmp_path, capsys):
    assert main(["predict", "resnet20.fmnist", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"zoo: error: {tmp_path} is a folder; pass the image files in it, e.g. {tmp_path}/*"
    )


def test_generate_refuses_bad_sampling_options_before_loading_the_model(monkeypatch, capsys):
    import zoo

    monkeypatch.setattr(zoo, "load", lambda *a, **k: pytest.fail("loaded the model before checking the options"))
    for option, problem in (
        (["--temperature", "nan"], "--temperature: must be a finite number in [0, 100], got 'nan'"),
        (["--top-p", "0"], "--top-p: must be in (0, 1], got '0'"),
        (["--top-k", "0"], "--top-k: must be from 1 to 1000000, got '0'"),
    ):
        with pytest.raises(SystemExit) as exit:  # refused as the options are parsed
            main(["generate", "moe_lm.stdlib", "def f(", *option])
        captured = capsys.readouterr()
        assert exit.value.code == 2 and captured.out == ""
        assert captured.err == f"zoo generate: error: argument {problem} (see zoo generate --help)\n"  # one line


def test_predict_finds_a_truncated_image_before_loading_the_model(tmp_path, monkeypatch, capsys):
    import zoo

    good = [_image(tmp_path / f"{index}.png", (28, 28)) for index in range(3)]
    whole = (tmp_path / "0.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(whole[: len(whole) // 2])  # a download that stopped halfway
    monkeypatch.setattr(zoo, "load", lambda *a, **k: pytest.fail("loaded the model before checking the images"))
    assert main(["predict", "resnet20.fmnist", *good, str(tmp_path / "cut.png"), "--batch-size", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(
        f"zoo: error: {tmp_path / 'cut.png'} is not a readable image ("
    )
    assert len(captured.err.splitlines()) == 1


def test_a_count_that_is_not_a_number_is_named_as_such(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["predict", "resnet20.fmnist", "x.png", "--batch-size", "abc"])
    assert (
        exit.value.code == 2
        and "argument --batch-size: must be a whole number from 1 to 65536, got 'abc'" in capsys.readouterr().err
    )


def test_info_of_a_saved_folder_shows_its_checked_config(tmp_path, capsys):
    import zoo

    folder = zoo.save(zoo.load("resnet20.fmnist", num_classes=3), tmp_path / "mine")
    assert main(["info", str(folder)]) == 0
    rows = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines() if " " in line.strip())
    assert rows["architecture"].strip() == "resnet20" and rows["classes"].strip() == "3"
    (folder / "config.json").write_text('{"architecture": "../x"}')
    assert main(["info", str(folder)]) == 2
    assert "config.json: field 'architecture'" in capsys.readouterr().err


def test_eval_of_a_saved_folder_says_what_eval_is_for(tmp_path, capsys):
    import zoo

    folder = zoo.save(zoo.load("resnet20.fmnist"), tmp_path / "mine")
    assert main(["eval", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a saved folder: zoo eval re-measures a registered entry's card" in err
