"""``zoo export``: the model NAME names, exported by `zoo.deploy.exporter` to ``--out`` and checked.
The file appears only when the export and its check succeed (`zoo.deploy.exporter` stages it),
and an ``--out`` that is one of the files the model is read from (a file of the run folder NAME,
the registered weights) is refused before the model loads, ``--overwrite`` or not."""

from __future__ import annotations

import argparse
from pathlib import Path

import zoo
from zoo.cli.catalog import format_size
from zoo.devices import resolve_device
from zoo.errors import InvalidArgumentError
from zoo.store.download import weight_folders


def run_export(args: argparse.Namespace) -> int:
    """Export NAME (a weight name or a run folder) as ``--format`` (default: the one ``--out``'s
    suffix names) to ``--out``, on ``--device`` (default: cuda if available, else cpu; an ONNX
    file on the CPU, where it is exported and checked), and say how it compares."""
    from zoo.deploy import exporter

    args.format = args.format or format_of(args.out)
    folder = Path(args.name).expanduser()
    reads = [folder, *weight_folders()] if folder.is_dir() else weight_folders()  # a run folder, else registered
    out = exporter.check_destination(args.out, args.format, args.overwrite, folders=reads)  # before the model loads
    if args.format == "onnx" and args.device not in (None, "cpu"):
        raise InvalidArgumentError(
            f"--device {args.device}: an ONNX file runs on any device (onnxruntime chooses), and is exported and "
            "checked on the CPU; leave --device out (it applies to torchscript and exported-program files)"
        )
    device = resolve_device(args.device, cpu_only=args.format == "onnx")  # the default: the CPU for ONNX
    model = zoo.load(args.name, device=device)
    example = exporter.example_input_for(model, batch=args.batch_size or exporter.EXAMPLE_BATCH)
    result = zoo.export(
        model,
        out,
        args.format,
        example_input=example,
        dynamic_batch=args.batch_size is None,
        opset=args.opset,
        overwrite=args.overwrite,
    )
    checked_in = "onnxruntime" if args.format == "onnx" else "the re-loaded file"
    batch = f"fixed batch of {args.batch_size}" if args.batch_size else "any batch size"
    print(
        f"wrote {result.path} ({args.format}, {format_size(result.size_bytes)}, {batch}); {checked_in} matches "
        f"PyTorch within {result.max_abs_diff:.2g} (max abs diff), {result.seconds:.1f} s"
    )
    return 0


def format_of(out: str) -> str:
    """The export format the ``--out`` file's suffix names (``.onnx``, ``.pt``, ``.pt2``), for an
    export without ``--format``; another suffix is refused, naming those there are."""
    from zoo.deploy.exporter import FORMAT_SUFFIXES

    suffix = Path(out).suffix.lower()
    named = {file_suffix: name for name, file_suffix in FORMAT_SUFFIXES.items()}
    if suffix not in named:
        choices = ", ".join(f"{file_suffix} ({name})" for file_suffix, name in named.items())
        raise InvalidArgumentError(
            f"--out {out}: its suffix {suffix or '(none)'} names no export format; end it in {choices}, "
            "or pass --format"
        )
    return named[suffix]
