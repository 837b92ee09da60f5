"""ONNX Runtime and OpenVINO as `zoo.optimize` candidates, each in fp32 and in static int8.

``onnxruntime``: the model exported to ONNX (``torch.onnx.export(..., dynamo=True)``, the batch a
symbolic dimension) and run in an ``InferenceSession`` on the CPU provider with every graph
optimization. ``onnxruntime-int8``: that file quantized with ONNX Runtime's own tools
(``quant_pre_process``, then ``quantize_static``: QDQ, per-channel int8 weights, uint8
activations, MinMax calibration on optimize's calibration batches; ``reduce_range`` on a CPU
without VNNI, as ONNX Runtime advises). ``openvino``: the model converted with
``openvino.convert_model`` (the batch dynamic, the other dimensions the example's) and compiled
for the CPU in f32 (``INFERENCE_PRECISION_HINT``: otherwise an AMX CPU would run it in bf16).
``openvino-int8``: that model quantized by NNCF's post-training quantization on the same
calibration batches (with NNCF's full bias correction, ``fast_bias_correction=False``: on
resnet20.fmnist it kept 99.4% top-1 agreement with fp32 where the fast one kept 98.2%, for two
to three times the seconds). Both runtimes use torch's thread count (``torch.get_num_threads()``).

ONNX Runtime's threads spin after each call by default (``session.intra_op.allow_spinning``),
busy-waiting for the next one: in a loop of its own calls that saves a wake-up, but it takes the
cores from whatever runs next, which on a 2-core machine tripled the time of the eager model
timed after it. Here spinning is off, so that timing candidates in turn measures each one, not
the one before it.

The module each candidate becomes (`zoo.deploy.optimized.OptimizedModel`) takes torch tensors
of any batch size and returns one torch tensor; a model whose output is not one tensor is not a
candidate for these runtimes. The exported or converted model is made once per `optimize` call
(`Conversion`) and shared by a runtime's fp32 and int8 candidates.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import io
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from zoo.deploy.optimized import OptimizedModel, quiet_logger
from zoo.devices import cpu_features
from zoo.errors import InvalidArgumentError

RUNTIMES = ("onnxruntime", "onnxruntime-int8", "openvino", "openvino-int8")
# what each runtime imports, and the extra that installs it
PACKAGES = {
    "onnxruntime": (("onnx", "onnxscript", "onnxruntime"), "pip install 'zoo[onnx]'"),
    "openvino": (("openvino",), "pip install 'zoo[openvino]'"),
    "openvino-int8": (("openvino", "nncf"), "pip install 'zoo[openvino]'"),
}
PACKAGES["onnxruntime-int8"] = PACKAGES["onnxruntime"]
# largest relative output difference that passes for outputs that are not class scores (see inference)
RELATIVE_TOLERANCE = {"onnxruntime": 1e-3, "onnxruntime-int8": 1e-1, "openvino": 1e-3, "openvino-int8": 1e-1}


def runtime_of(name: str) -> str:
    """``"openvino"`` for ``"openvino-int8"``: the runtime a candidate runs in."""
    return name.removesuffix("-int8")


def missing(name: str) -> str | None:
    """Why candidate ``name`` cannot run here (a package not installed, and the extra that has
    it), or None. Looks the packages up without importing them."""
    modules, hint = PACKAGES[name]
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return f"{name} needs {', '.join(absent)}, which {'is' if len(absent) == 1 else 'are'} not installed: {hint}"


def candidates(args: tuple[Any, ...], device: torch.device, include: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """The runtime candidates that apply to a call with ``args`` on ``device`` (name ->
    the `Conversion` shared by a runtime's fp32 and int8 candidates), and why the others do not.
    ``include`` False (``optimize(..., runtimes=False)``) leaves them all out, saying so."""
    available: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    conversions = {runtime: Conversion(runtime) for runtime in ("onnxruntime", "openvino")}
    for name in RUNTIMES:
        if device.type != "cpu":
            unavailable[name] = f"{name} is measured on the CPU only: move the model to the CPU"
        elif not args or not all(isinstance(a, torch.Tensor) and a.ndim for a in args):
            unavailable[name] = f"{name} takes tensor inputs with a batch dimension only"
        elif (reason := missing(name)) is not None:
            unavailable[name] = reason
        elif not include:
            unavailable[name] = f"not measured: runtimes=False (optimize(..., '{name}') measures it alone)"
        else:
            available[name] = conversions[runtime_of(name)]
    return available, unavailable


class Conversion:
    """A model in one runtime's form (ONNX bytes, or an OpenVINO model), made on first use and
    kept for the runtime's other candidate."""

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime
        self._converted: Any = None

    def get(self, model: nn.Module, args: tuple[Any, ...]) -> Any:
        if self._converted is None:
            with torch.no_grad():
                output = model(*args)
            if not isinstance(output, torch.Tensor):
                raise InvalidArgumentError(
                    f"{self.runtime} candidates return one tensor per call; {type(model).__name__} returns "
                    f"{type(output).__name__}"
                )
            args = _two_rows(args)
            self._converted = _export_onnx(model, args) if self.runtime == "onnxruntime" else _to_openvino(model, args)
        return self._converted


def build_runtime(
    name: str, model: nn.Module, args: tuple[Any, ...], batches: list[tuple[Any, ...]], conversion: Conversion
) -> OptimizedModel:
    """Candidate ``name`` ready to run: the session or compiled model behind an `OptimizedModel`."""
    with keeping_signal_stack():
        converted = conversion.get(model, args)
        if name == "onnxruntime":
            run: Any = _SessionRun(_session(converted), model)
        elif name == "onnxruntime-int8":
            run = _SessionRun(_session(_quantize_onnx(converted, batches)), model)
        elif name == "openvino":
            run = _OpenVINORun(_compile_openvino(converted), model)
        else:
            run = _OpenVINORun(_compile_openvino(_quantize_nncf(converted, batches)), model)
    return OptimizedModel(model, run)


PEER_NAMES = {
    "onnxruntime": "ONNX Runtime fp32",
    "onnxruntime-int8": "ONNX Runtime int8 (quantize_static)",
    "openvino": "OpenVINO fp32",
    "openvino-int8": "OpenVINO int8 (NNCF)",
}


def build_peers(
    model: nn.Module, args: tuple[Any, ...], batches: list[tuple[Any, ...]]
) -> tuple[dict[str, OptimizedModel], dict[str, float]]:
    """Each runtime's fp32 and int8 built from ``model`` with the runtime's own tools (what a user
    of ONNX Runtime or OpenVINO would run), by `PEER_NAMES`, and the seconds each took to build;
    a runtime not installed is said on one line and left out. For the benchmarks' side-by-side tables."""
    built, seconds = {}, {}
    for runtime in ("onnxruntime", "openvino"):
        conversion = Conversion(runtime)
        for name in (runtime, f"{runtime}-int8"):
            if (reason := missing(name)) is not None:
                print(f"  {PEER_NAMES[name]}: not measured: {reason}")
                continue
            start = time.perf_counter()
            built[PEER_NAMES[name]] = build_runtime(name, model, args, batches, conversion)
            seconds[PEER_NAMES[name]] = time.perf_counter() - start
    return built, seconds


class _SignalStack(ctypes.Structure):  # Linux's stack_t
    _fields_ = (("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t))


SS_DISABLE = 2


@contextlib.contextmanager
def keeping_signal_stack() -> Iterator[None]:
    """Runs its block, then puts back this thread's alternate signal stack as it found it.

    OpenVINO's CPU plugin installs a signal stack of its own for each plugin instance (one per
    ``openvino.Core``; NNCF makes its own) and, when the instance goes, puts back the stack it
    found if its own is still current. Instances released out of order (as Python's collector
    does) leave an unmapped stack current, and the next signal this thread handles (SIGCHLD under
    torch's DataLoader handler, say) kills the process with SIGSEGV. With the stack put back here,
    the plugin's stacks are never current when it releases them."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    found = _SignalStack()
    if libc is None or libc.sigaltstack(None, ctypes.byref(found)) != 0:
        yield
        return
    try:
        yield
    finally:
        now = _SignalStack()
        if libc.sigaltstack(None, ctypes.byref(now)) == 0 and (now.ss_sp, now.ss_size) != (found.ss_sp, found.ss_size):
            found.ss_flags &= SS_DISABLE
            libc.sigaltstack(ctypes.byref(found), None)


def versions() -> str:
    """The installed runtimes' versions (for optimize's cache key), without importing them."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("onnxruntime", "openvino", "nncf"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


def _two_rows(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with a batch of one repeated to two rows: an exporter fixes a size-1 batch."""
    return tuple(torch.cat([a, a]) if len(a) == 1 else a for a in args)


def _export_onnx(model: nn.Module, args: tuple[Any, ...]) -> bytes:
    """The model as ONNX bytes, the batch dimension of every input symbolic."""
    batch = torch.export.Dim("batch")
    with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():  # the exporter's progress lines
        program = torch.onnx.export(
            model, args, dynamo=True, verbose=False, dynamic_shapes=tuple({0: batch} for _ in args)
        )
    return program.model_proto.SerializeToString()


def _session(model_bytes: bytes) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # see the module docstring
    return onnxruntime.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _quantize_onnx(model_bytes: bytes, batches: list[tuple[Any, ...]]) -> bytes:
    """ONNX Runtime's static int8 quantization of the model, calibrated on ``batches``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    names = [i.name for i in _session(model_bytes).get_inputs()]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([_feeds(names, batch) for batch in batches])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory(prefix="zoo-onnx-") as folder:
        source, prepared, quantized = (Path(folder) / f"{n}.onnx" for n in ("model", "prepared", "int8"))
        source.write_bytes(model_bytes)
        quant_pre_process(str(source), str(prepared))  # shape inference and graph optimizations first, as advised
        # the root logger: a warning per BatchNorm before a convolution (DenseNet's), whose 1-D
        # weight gets no per-channel axis; ONNX Runtime quantizes it per tensor
        with quiet_logger(""):
            quantize_static(
                str(prepared),
                str(quantized),
                Reader(),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                reduce_range=not cpu_features().vnni,
            )
        return quantized.read_bytes()


def _to_openvino(model: nn.Module, args: tuple[Any, ...]) -> Any:
    """The model converted by OpenVINO, batch dynamic and the other dimensions the example's."""
    import openvino

    with torch.no_grad(), warnings.catch_warnings(), quiet_logger("torch.utils.cpp_extension"):
        # convert_model traces with torch.jit, which torch 2.14 deprecates on every call, and imports
        # torch's C++ extension helper, which logs a CPU-only machine's CUDA_HOME
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        converted = openvino.convert_model(model, example_input=args[0] if len(args) == 1 else args)
    converted.reshape({i: openvino.PartialShape([-1, *a.shape[1:]]) for i, a in enumerate(args)})
    return converted


def _compile_openvino(converted: Any) -> Any:
    import openvino

    config = {
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": torch.get_num_threads(),
        "PERFORMANCE_HINT": "LATENCY",
    }
    return openvino.Core().compile_model(converted, "CPU", config)


def _quantize_nncf(converted: Any, batches: list[tuple[Any, ...]]) -> Any:
    """NNCF's post-training int8 quantization of the OpenVINO model, calibrated on ``batches``."""
    # NNCF loads torch's C++ extension helper, which logs a CPU-only machine's CUDA_HOME, and
    # draws progress bars on stdout
    with quiet_logger("torch.utils.cpp_extension"), quiet_logger("nncf"), contextlib.redirect_stdout(io.StringIO()):
        import nncf

        data = nncf.Dataset([[a.numpy() for a in batch] for batch in batches])
        return nncf.quantize(converted, data, subset_size=len(batches), fast_bias_correction=False)


def _feeds(names: list[str], args: tuple[Any, ...]) -> dict[str, Any]:
    return {name: a.detach().cpu().contiguous().numpy() for name, a in zip(names, args, strict=True)}


class _SessionRun:
    """An ONNX Runtime session called like the model: tensors in, one tensor out."""

    def __init__(self, session: Any, model: nn.Module) -> None:
        self.session, self.model = session, model
        self.names = [i.name for i in session.get_inputs()]

    def __call__(self, *args: Any) -> torch.Tensor:
        if len(args[0]) == 0:  # nothing to run: the model gives the empty output's shape
            return self.model(*args)
        (output,) = self.session.run(None, _feeds(self.names, args))
        return torch.from_numpy(output)


class _OpenVINORun:
    """An OpenVINO compiled model called like the model: tensors in, one tensor out. An infer
    request serves one call at a time, so each thread gets its own."""

    def __init__(self, compiled: Any, model: nn.Module) -> None:
        self.compiled, self.model = compiled, model
        self._local = threading.local()

    def __call__(self, *args: Any) -> torch.Tensor:
        if len(args[0]) == 0:
            return self.model(*args)
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        inputs = [a.detach().cpu().contiguous().numpy() for a in args]
        result = request.infer(inputs, share_inputs=True, share_outputs=False)
        return torch.from_numpy(result[0])
