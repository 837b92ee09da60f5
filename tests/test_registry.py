"""The registry knows every architecture without importing its family: `zoo.architectures.ARCHS`
is read from an index derived from the ``@register_model`` declarations (one per model), which
must be current, and the light commands must not import what they don't need."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from zoo.architectures import ARCHS, _registry, model_builders, register_model, registered_specs
from zoo.errors import ZooError
from zoo.store import weight_entries

HEAVY = (
    "torch",
    "torchvision",
    "torch_geometric",
    "transformers",
    "huggingface_hub",
    "onnx",
    "onnxruntime",
    "torchao",
    "matplotlib",
    "tensorboard",
    "zoo.architectures.resnet",
    "zoo.training",
)
FAMILY_MODULES = sorted({spec.module for spec in ARCHS.values()})


def test_the_index_is_derived_from_the_declarations() -> None:
    """``_index.json`` is what the decorators say, field for field; after changing a declaration,
    `zoo.architectures._registry.write_index()` writes it anew."""
    assert json.loads(_registry.INDEX_FILE.read_text()) == json.loads(json.dumps(_registry.derive_index()))
    registered = {name: spec for name, spec in registered_specs.items() if spec.module in FAMILY_MODULES}
    assert registered == ARCHS


def test_a_declaration_takes_only_known_traits() -> None:
    with pytest.raises(ZooError, match="unknown traits"):
        register_model(int_8=True)
    with pytest.raises(ZooError, match="inputs=.... is one of"):
        register_model(inputs="pixels")
    with pytest.raises(ZooError, match="names at least one head"):
        register_model(heads=())


def test_every_declared_builder_is_found_by_its_module() -> None:
    for name in ARCHS:
        assert weight_entries.get_builder(name) is model_builders[name]


def test_traits_are_read_from_the_specs() -> None:
    assert weight_entries.arch_spec("resnet50").int8 and not weight_entries.arch_spec("moe_lm").int8
    assert weight_entries.arch_spec("gin3").finetune_head == "graph_classification"
    assert weight_entries.input_kind("dbn") == "vectors"


def _imported_after(code: str) -> set[str]:
    script = f"import sys; {code}; import json; sys.__stdout__.write(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import zoo",
        "import zoo; zoo.list_models(); zoo.info('resnet20')",
        "from zoo.cli import main; import contextlib, io; f = io.StringIO(); "
        "c = contextlib.redirect_stdout(f); c.__enter__(); main(['list']); main(['info', 'gin3'])",
    ],
)
def test_light_entry_points_import_nothing_heavy(code: str) -> None:
    modules = _imported_after(code)
    heavy = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert not heavy, f"{code!r} imported {heavy[:10]}"


def test_help_imports_no_torch() -> None:
    code = (
        "from zoo.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "import sys; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "False"


def test_every_public_name_is_found() -> None:
    import zoo

    assert sorted(zoo.__all__) == sorted([*zoo._PUBLIC, "UnknownModelError", "WeightsMismatchError", "ZooError"])
    for name in zoo.__all__:
        assert getattr(zoo, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        zoo.nothing  # noqa: B018


def test_a_cold_cnn_load_imports_no_other_family_nor_the_hub() -> None:
    """``zoo.load("resnet20.fmnist")`` in a fresh process: its own family only; the Hub, other
    families, PyG, transformers and the inference runtimes stay unimported (lazy where they are used)."""
    imported = _imported_after("import zoo; zoo.load('resnet20.fmnist')")
    unwanted = {
        "huggingface_hub",
        "transformers",
        "torch_geometric",
        "onnx",
        "onnxruntime",
        "openvino",
        "zoo.interop.hf_hub",
        *(f"zoo.architectures.{family}" for family in FAMILY_MODULES if family != "resnet"),
    }
    assert "zoo.architectures.resnet" in imported
    assert not unwanted & imported, sorted(unwanted & imported)
