"""zoo without its optional extras: the core paths import and run with only the base dependencies
(pyproject's `dependencies`), and a command that needs an extra says which one in one line. The
extras' packages are blocked in a subprocess (``sys.modules[name] = None``), as if not installed:
a fresh machine's image once lacked braceexpand, and every fine-tune's data path imported it."""

from __future__ import annotations

import subprocess
import sys

import pytest

# the top-level modules of the extras' packages (pyproject's optional-dependencies) and the dev peers
EXTRA_MODULES = (
    "webdataset", "rdkit", "onnx", "onnxscript", "onnxruntime", "torchao", "openvino", "nncf", "fastapi", "uvicorn",
    "multipart", "prometheus_client", "markdown", "optuna", "mlflow", "timm", "transformers", "lightning", "datamol",
    "ray",
)  # fmt: skip
BLOCK = f"import sys\nfor name in {EXTRA_MODULES!r}:\n    sys.modules[name] = None\n"


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_core_modules_import_without_extras() -> None:
    code = (
        "import zoo, zoo.cli, zoo.training.finetune, zoo.training.data.kinds, zoo.training.loop.trainer\n"
        "import zoo.training.finetune.keywords, zoo.deploy\n"
        "print('ok')"
    )
    done = _run(code)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("command", [["list"], ["--help"], ["finetune", "--help"], ["shards", "--help"]])
def test_commands_run_without_extras(command: list[str]) -> None:
    done = _run("from zoo.cli import main\nsys.exit(main(sys.argv[1:]))", *command)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_command_that_needs_an_extra_names_it(tmp_path) -> None:
    done = _run("from zoo.cli import main\nsys.exit(main(sys.argv[1:]))", "shards", str(tmp_path), "--out", "x")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "zoo[shards]" in done.stderr, done.stderr
