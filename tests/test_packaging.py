"""The built wheel is one import package, `zoo`, and works away from the repository: installed
into a folder of its own (the project's venv provides torch and the rest), run from a directory
outside the repository, offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "zoo", "architectures", "training", "weights")


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a clean copy of the sources (no stale build/ folder can leak in)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        cwd=source,
    )
    (built,) = out.glob("zoo-*.whl")
    return built


def test_the_wheel_holds_one_import_package_with_recipes_and_weights(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"zoo", wheel.name.split("-py")[0] + ".dist-info"}, top
    for needed in (
        "zoo/training/recipes/fmnist.py",
        "zoo/architectures/resnet.py",
        "zoo/weights/resnet20.fmnist.safetensors",
        "zoo/weights/resnet20.fmnist.md",
        "zoo/weights/published/torchvision_resnet.json",
        "zoo/weights/categories/imagenet.txt",
    ):
        assert needed in names, needed


def test_the_installed_wheel_runs_outside_the_repository(wheel: Path, tmp_path: Path) -> None:
    target, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        cwd=elsewhere,
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(target),
        "ZOO_OFFLINE": "1",
        "ZOO_HOME": str(tmp_path / "home"),
        "PYTHONNOUSERSITE": "1",
    }
    # A user's own `training.py` and `weights/` next to their code must not shadow zoo's modules.
    (elsewhere / "training.py").write_text("raise ImportError('the user training.py was imported')\n")
    (elsewhere / "weights").mkdir()
    script = (
        "import zoo, zoo.architectures, zoo.training.loop.trainer, torch\n"
        f"assert all(m.__file__.startswith({str(target)!r}) for m in (zoo, zoo.architectures, zoo.training.loop.trainer))\n"
        "model = zoo.load('resnet20.fmnist')\n"
        "assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)\n"
        "print('loaded', model.pretrained_cfg['weights'])\n"
    )
    assert "loaded resnet20.fmnist" in run([sys.executable, "-c", script], cwd=elsewhere, env=env)
    listing = run([str(target / "bin" / "zoo"), "list", "--pretrained"], cwd=elsewhere, env=env)
    assert "resnet20.fmnist" in listing and "moe_lm.stdlib" in listing
    usage = run([sys.executable, "-m", "zoo.training.recipes.fmnist", "--help"], cwd=elsewhere, env=env)
    assert "resnet20" in usage
