"""Exporting a model for deployment: ONNX (the dynamo exporter, checked in onnxruntime),
TorchScript and ``torch.export``'s ExportedProgram (``.pt2``). Every export is written
atomically, re-loaded and compared with the eager model, at a second batch size when the batch
is dynamic, so a file that comes back from here runs and gives the model's outputs.

``torch.jit`` (TorchScript) warns on every call in torch 2.14 in favour of ``torch.export``;
TorchScript is still the format libtorch/C++ and older runtimes load, so it is produced here
with those warnings silenced.
"""

from __future__ import annotations

import io
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.export import Dim

from zoo.devices import model_device
from zoo.errors import InvalidArgumentError, ZooError
from zoo.store import weight_entries
from zoo.store.files import atomic_files, check_output

ExampleInput = torch.Tensor | tuple[Any, ...]

FORMAT_SUFFIXES = {"onnx": ".onnx", "torchscript": ".pt", "exported-program": ".pt2"}  # the files each format writes
FORMATS = tuple(FORMAT_SUFFIXES)
EXAMPLE_BATCH = 2  # torch.export fixes size-1 dimensions, so a dynamic batch needs 2+
EXAMPLE_SEQUENCE_LENGTH = 16  # token ids per sample of the default text input
ONNX_INSTALL_HINT = "pip install 'zoo[onnx]'"
NOT_TENSORS_REASON = (
    "no export format takes inputs other than tensors (torch.onnx.export, torch.jit.trace and "
    "torch.export all need tensors), so graph models cannot be exported; zoo.save(model, folder) "
    "keeps one for zoo.load"
)
MIN_ONNX_OPSET = 18  # torch's dynamo exporter targets 18+; it falls back to 18 for lower requests it cannot convert


class ExportMismatchError(ZooError, RuntimeError):
    """A re-loaded export whose outputs differ from the eager model's."""


@dataclass
class ExportResult:
    """One exported file and how it compares with the eager model after re-loading."""

    path: str
    size_bytes: int
    max_abs_diff: float  # over the example input and, with dynamic_batch, a batch one larger
    seconds: float  # export + save + re-load + check


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _as_args(example_input: ExampleInput, device: torch.device) -> tuple[Any, ...]:
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    return tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)


def _grown_batch(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The same inputs with one more sample (the first repeated) in every tensor's dim 0."""
    return tuple(torch.cat([a, a[:1]]) if isinstance(a, torch.Tensor) and a.ndim else a for a in args)


def _check_batch(args: tuple[Any, ...]) -> None:
    sizes = {a.shape[0] for a in args if isinstance(a, torch.Tensor) and a.ndim}
    if sizes and min(sizes) < 2:
        raise InvalidArgumentError(
            "example_input needs a batch of at least 2 samples for a dynamic batch dimension "
            "(torch.export fixes size-1 dimensions); pass 2+ samples, or dynamic_batch=False "
            "when dim 0 of the inputs is not the batch (e.g. graph node features)"
        )


def output_tensors(output: Any) -> list[torch.Tensor]:
    """Every tensor in a model output (tensor, or nested tuple/list/dict)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, Mapping):
        return [t for v in output.values() for t in output_tensors(v)]
    if isinstance(output, (tuple, list)):
        return [t for v in output for t in output_tensors(v)]
    raise InvalidArgumentError(f"cannot compare model outputs of type {type(output).__name__}")


@torch.no_grad()
def _max_diff(
    reference: nn.Module, candidate: Callable[..., Any], inputs: Sequence[tuple[Any, ...]], rtol: float, atol: float
) -> float:
    """Largest absolute difference between the two models' outputs over ``inputs``; raises
    ExportMismatchError beyond ``atol + rtol * |reference|``."""
    worst = 0.0
    for args in inputs:
        expected, actual = output_tensors(reference(*args)), output_tensors(candidate(*args))
        if len(expected) != len(actual):
            raise ExportMismatchError(f"the export returns {len(actual)} tensors, the eager model {len(expected)}")
        for e, a in zip(expected, actual):
            if e.shape != a.shape:
                raise ExportMismatchError(f"output shape {tuple(a.shape)} differs from eager {tuple(e.shape)}")
            diff = (e.float() - a.float().to(e.device)).abs()
            worst = max(worst, diff.max().item() if diff.numel() else 0.0)
            if not torch.all(diff <= atol + rtol * e.float().abs()):
                raise ExportMismatchError(
                    f"re-loaded export differs from eager by up to {diff.max().item():.3g} "
                    f"(rtol={rtol}, atol={atol}) on inputs of shape "
                    f"{[tuple(t.shape) for t in args if isinstance(t, torch.Tensor)]}"
                )
    return worst


def _write_bytes(path: Path, save: Callable[[io.BytesIO], None]) -> int:
    """Serialize with ``save(buffer)`` and write the bytes to ``path``; returns the size."""
    buffer = io.BytesIO()
    save(buffer)
    path.write_bytes(buffer.getvalue())
    return buffer.getbuffer().nbytes


@contextmanager
def _staged(path: Path) -> Iterator[Path]:
    """Where to write the export of ``path`` and check it: a file of that name in a staging
    folder beside ``path``, moved over ``path`` (with an ONNX file's ``.data``) only when the
    block ends cleanly. A failed export or check leaves ``path`` as it was, and no file."""
    with atomic_files(path.parent, last=(path.name,)) as staging:
        yield staging / path.name


def _batch_checks(args: tuple[Any, ...], dynamic_batch: bool) -> list[tuple[Any, ...]]:
    """The inputs an export is compared with eager on: the example and, with a dynamic batch,
    the example grown by one sample (a batch size baked into the export fails there)."""
    if not dynamic_batch:
        return [args]
    _check_batch(args)
    return [args, _grown_batch(args)]


@contextmanager
def _fixed_batch_hint(model: nn.Module, dynamic_batch: bool, exporter: str) -> Iterator[None]:
    """Turn an exporter's failure with a dynamic batch (code that depends on the batch size, such
    as an MoE's ``capacity_factor``) into one error saying to fix the batch size."""
    try:
        yield
    except Exception as error:
        if not dynamic_batch or isinstance(error, ZooError) and not isinstance(error, ExportMismatchError):
            raise
        problem = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise ExportMismatchError(
            f"{exporter} could not export {type(model).__name__} for any batch size ({problem}): its code depends "
            "on the batch size (an MoE's capacity_factor does); pass dynamic_batch=False (--batch-size N) for a file "
            "that takes the example's batch size only"
        ) from None


def export_torchscript(
    model: nn.Module,
    example_input: ExampleInput,
    path: str | os.PathLike,
    *,
    dynamic_batch: bool = True,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> ExportResult:
    """Trace ``model`` (eval mode) on ``example_input`` (a tensor or a tuple of positional
    arguments), save it with ``torch.jit.save``, re-load it and check that its outputs equal
    eager's on the example and, with ``dynamic_batch``, on a batch one sample larger (a traced
    batch size would fail there). Load it with ``torch.jit.load`` or libtorch in C++."""
    path = Path(path)
    start = time.perf_counter()
    args = _as_args(example_input, model_device(model))
    check = [args, _grown_batch(args)] if dynamic_batch else [args]
    hint = _fixed_batch_hint(model, dynamic_batch, "TorchScript")
    with _eval_mode(model), warnings.catch_warnings(), hint, _staged(path) as staged:
        # torch 2.14 deprecates torch.jit in favour of torch.export (see the module docstring);
        # the tracer's shape-check warnings are covered by the re-load comparison below.
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        with torch.no_grad():
            traced = torch.jit.trace(model, args, check_trace=False)
        size = _write_bytes(staged, lambda buffer: torch.jit.save(traced, buffer))
        loaded = torch.jit.load(str(staged), map_location=model_device(model))
        diff = _max_diff(model, loaded, check, rtol, atol)
    return ExportResult(str(path), size, diff, time.perf_counter() - start)


def export_program(
    model: nn.Module,
    example_input: ExampleInput,
    path: str | os.PathLike,
    *,
    dynamic_batch: bool = True,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> ExportResult:
    """``torch.export.export`` the model (eval mode) on ``example_input``, with dim 0 of every
    tensor argument dynamic when ``dynamic_batch``, save the ExportedProgram as ``.pt2``,
    re-load it with ``torch.export.load`` and check it against eager as `export_torchscript`
    does. The ``.pt2`` feeds AOTInductor, ExecuTorch and ``torch.export.load(...).module()``."""
    path = Path(path)
    if path.suffix != ".pt2":
        raise InvalidArgumentError(f"torch.export.load only reads files ending in .pt2, got {path.name!r}")
    start = time.perf_counter()
    args = _as_args(example_input, model_device(model))
    check = _batch_checks(args, dynamic_batch)
    dynamic_shapes = None
    if dynamic_batch:
        dynamic_shapes = tuple({0: Dim.AUTO} if isinstance(a, torch.Tensor) and a.ndim else None for a in args)
    hint = _fixed_batch_hint(model, dynamic_batch, "torch.export")
    with _eval_mode(model), hint, _staged(path) as staged:
        program = torch.export.export(model, args, dynamic_shapes=dynamic_shapes)
        size = _write_bytes(staged, lambda buffer: torch.export.save(program, buffer))
        loaded = torch.export.load(str(staged)).module()
        diff = _max_diff(model, loaded, check, rtol, atol)
    return ExportResult(str(path), size, diff, time.perf_counter() - start)


def onnx_packages() -> tuple[Any, Any]:
    """The onnx and onnxruntime modules, after checking that every package the ONNX export
    needs is installed (the optional extra ``zoo[onnx]``)."""
    try:
        import onnx
        import onnxruntime
        import onnxscript  # noqa: F401 - torch.onnx.export(dynamo=True) translates with it
    except ImportError as error:
        raise ZooError(
            f"exporting to ONNX needs onnx, onnxscript and onnxruntime ({error.name} is missing): {ONNX_INSTALL_HINT}"
        ) from None
    return onnx, onnxruntime


def _onnx_runner(path: Path, device: torch.device, shown: Path) -> Callable[..., list[torch.Tensor]]:
    """A callable that runs the ONNX file ``path`` (staged: messages name it ``shown``, where it
    goes) in onnxruntime (CPU) on the tensor arguments of a model call, in order, and returns its
    outputs as tensors on ``device``."""
    _, onnxruntime = onnx_packages()
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's errors derive from Exception only
        raise ExportMismatchError(
            f"onnxruntime {onnxruntime.__version__} cannot load {shown}: {error}; an older opset may load"
        ) from None
    names = [node.name for node in session.get_inputs()]

    def run(*args: Any) -> list[torch.Tensor]:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if len(tensors) != len(names):
            raise ExportMismatchError(
                f"the ONNX graph takes {len(names)} inputs ({', '.join(names)}), the model call {len(tensors)} tensors"
            )
        feeds = {name: t.detach().cpu().numpy() for name, t in zip(names, tensors)}
        try:
            outputs = session.run(None, feeds)
        except Exception as error:  # as above
            shapes = [tuple(t.shape) for t in tensors]
            raise ExportMismatchError(f"onnxruntime cannot run {shown} on inputs of shape {shapes}: {error}") from None
        return [torch.from_numpy(out).to(device) for out in outputs]

    return run


def export_onnx(
    model: nn.Module,
    example_input: ExampleInput,
    path: str | os.PathLike,
    *,
    dynamic_batch: bool = True,
    opset: int | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> ExportResult:
    """Export ``model`` (eval mode) to ONNX with the dynamo exporter
    (``torch.onnx.export(..., dynamo=True)``) at ``opset`` (torch's default when None), with
    dim 0 of every tensor argument a symbolic ``batch`` dimension when ``dynamic_batch``; save
    it, then run the file in onnxruntime and check it against eager on the example and, with
    ``dynamic_batch``, a batch one larger. Weights past protobuf's 2 GB limit go to
    ``<file>.data`` next to it, which must travel with the ``.onnx`` file."""
    onnx, _ = onnx_packages()
    newest = onnx.defs.onnx_opset_version()
    if opset is not None and not MIN_ONNX_OPSET <= opset <= newest:
        raise InvalidArgumentError(
            f"opset {opset} is out of reach: the dynamo ONNX exporter writes opsets {MIN_ONNX_OPSET} to {newest} "
            f"(onnx {onnx.__version__}); leave opset out for the exporter's default"
        )
    path = Path(path)
    start = time.perf_counter()
    device = model_device(model)
    args = _as_args(example_input, device)
    check = _batch_checks(args, dynamic_batch)
    dynamic_shapes = None
    if dynamic_batch:
        batch = Dim("batch")
        dynamic_shapes = tuple({0: batch} if isinstance(a, torch.Tensor) and a.ndim else None for a in args)
    with _eval_mode(model):
        program = torch.onnx.export(
            model, args, dynamo=True, dynamic_shapes=dynamic_shapes, opset_version=opset, verbose=False
        )
        written_opset = program.model.opset_imports.get("")
        if opset is not None and written_opset != opset:  # the exporter falls back instead of failing
            raise InvalidArgumentError(
                f"the ONNX exporter could not convert {type(model).__name__} to opset {opset} (it produced opset "
                f"{written_opset}); ask for a newer opset, or leave opset out for the exporter's default"
            )
        fixed = [
            node.name
            for node in program.model.graph.inputs
            if dynamic_batch and len(node.shape) and isinstance(node.shape[0], int)
        ]
        if fixed:  # the exporter falls back to the example's sizes where the code depends on the batch size
            raise ExportMismatchError(
                f"the ONNX exporter could not keep the batch dimension of {', '.join(fixed)} dynamic: "
                f"{type(model).__name__}'s code depends on the batch size; pass dynamic_batch=False (--batch-size N) "
                "for a file that takes the example's batch size only"
            )
        with _staged(path) as staged:
            program.save(staged)
            size = staged.stat().st_size
            diff = _max_diff(model, _onnx_runner(staged, device, path), check, rtol, atol)
    return ExportResult(str(path), size, diff, time.perf_counter() - start)


def example_input_for(
    model: nn.Module,
    batch: int = EXAMPLE_BATCH,
    *,
    preprocess: dict[str, Any] | None = None,
    sequence_length: int = EXAMPLE_SEQUENCE_LENGTH,
) -> torch.Tensor:
    """A random batch of what ``model`` reads, by the input kind its architecture registered:
    images with its channels at its weights' preprocessing crop (else its cfg's ``input_size``),
    ``sequence_length`` token ids, or visible units; ``preprocess`` stands in for the weights'
    own (a new entry's crop). Raises for graph models (their input is a torch_geometric
    ``Data``, which no export format takes) and for image models of unknown input size."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    arch = cfg.get("architecture")
    if arch is None:
        raise InvalidArgumentError(
            f"{type(model).__name__} is not a zoo model (no pretrained_cfg['architecture']), so its input is "
            "unknown; pass example_input=, a batch of 2+ samples"
        )
    kind = weight_entries.input_kind(arch)
    device = model_device(model)
    if kind == "images":
        preprocess = (cfg.get("preprocess") or {}) if preprocess is None else preprocess
        side = preprocess.get("crop", preprocess.get("resize"))
        if side is None and "input_size" in cfg:  # timm's (C, H, W), for models built without weights
            side = list(cfg["input_size"][1:])
        if side is None:
            raise InvalidArgumentError(
                f"{arch} carries no preprocessing or input_size, so its input size is unknown; "
                f"pass example_input=torch.randn({batch}, {model.in_chans}, HEIGHT, WIDTH) at the size it will run on"
            )
        height, width = (side, side) if isinstance(side, int) else side
        return torch.randn(batch, model.in_chans, height, width, device=device)
    if kind == "text":
        return torch.randint(0, model.config.vocab_size, (batch, sequence_length), device=device)
    if kind == "vectors":
        return torch.rand(batch, model.sizes[0], device=device)
    raise InvalidArgumentError(f"{arch} reads graphs, passed as a torch_geometric Data object: {NOT_TENSORS_REASON}")


def check_destination(
    path: str | os.PathLike,
    format: str,
    overwrite: bool = False,
    *,
    inputs: Iterable[str | os.PathLike] = (),
    folders: Iterable[str | os.PathLike] = (),
) -> Path:
    """``path`` as a Path once ``format`` is known and ``path`` can be written: not a folder, none
    of what the model is read from (``inputs``, a file of ``folders``: `check_output`; refused
    even with ``overwrite``), not an existing file unless ``overwrite``, inside a folder that
    exists or can be made and is writable. Checked before any work (the command line calls it
    before loading the model)."""
    if format not in FORMATS:
        raise InvalidArgumentError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    path = Path(path)
    if path.is_dir():
        example = path / f"model{FORMAT_SUFFIXES[format]}"
        raise InvalidArgumentError(f"{path} is a folder; give the file to write, e.g. {example}")
    check_output(path, inputs, folders)  # before "pass --overwrite", which would destroy it
    if os.path.lexists(path) and not overwrite:  # a dangling link too: replacing it is the user's call
        raise InvalidArgumentError(f"{path} already exists; pass overwrite=True (--overwrite) to replace it")
    if format == "exported-program" and path.suffix != ".pt2":
        raise InvalidArgumentError(
            f"torch.export.load only reads files ending in .pt2, got {path.name!r}; "
            f"name it {path.with_suffix('.pt2').name}"
        )
    other = {suffix: name for name, suffix in FORMAT_SUFFIXES.items() if name != format}
    if path.suffix in other:
        raise InvalidArgumentError(
            f"{path.name!r} is named like a {other[path.suffix]} file, but the format is {format}: "
            f"name it {path.with_suffix(FORMAT_SUFFIXES[format]).name}, or pick that format"
        )
    return path


def export(
    model: nn.Module,
    path: str | os.PathLike,
    format: str = "onnx",
    *,
    example_input: ExampleInput | None = None,
    dynamic_batch: bool = True,
    opset: int | None = None,
    overwrite: bool = False,
) -> ExportResult:
    """Export ``model`` to ``path`` as ``format`` ("onnx", "torchscript" or "exported-program",
    which needs a ``.pt2`` path), re-load the file and check it against the eager model
    (onnxruntime for ONNX). ``example_input`` (a tensor or a tuple of positional arguments)
    defaults to a random batch of 2 of what the model reads (`example_input_for`); with
    ``dynamic_batch`` the file takes any batch size, else only the example's. ``opset`` applies
    to ONNX only. An existing ``path`` is refused unless ``overwrite``."""
    path = check_destination(path, format, overwrite)
    if opset is not None and format != "onnx":
        raise InvalidArgumentError(f"opset applies to ONNX only, not to format {format!r}; leave it out")
    if example_input is None:
        example_input = example_input_for(model)
    if format == "onnx":
        return export_onnx(model, example_input, path, dynamic_batch=dynamic_batch, opset=opset)
    if format == "torchscript":
        return export_torchscript(model, example_input, path, dynamic_batch=dynamic_batch)
    return export_program(model, example_input, path, dynamic_batch=dynamic_batch)
