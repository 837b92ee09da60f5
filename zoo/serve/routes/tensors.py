"""Tensors in and out of Open Inference Protocol v2 requests: JSON data (flat or nested, in
row-major order) and the binary tensor extension (raw little-endian bytes after the JSON
header, whose length the ``Inference-Header-Content-Length`` header gives; BYTES elements each
prefixed by a 4-byte length), checked against the declared shape and datatype."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from zoo.serve.protocol import DIMENSION, RequestInput, ResponseOutput
from zoo.serve.request_errors import bad_request

HEADER_LENGTH = "Inference-Header-Content-Length"
NUMPY_TYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}  # fmt: skip
DATATYPES = {np.dtype(t): name for name, t in NUMPY_TYPES.items()}


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview]:
    """The JSON header and the binary data after it (empty without the extension)."""
    if header_length is None:
        return body, memoryview(b"")
    try:
        length = int(header_length)
    except ValueError:
        raise bad_request(f"{HEADER_LENGTH} must be a whole number of bytes, got {header_length!r}") from None
    if not 0 < length <= len(body):
        raise bad_request(f"{HEADER_LENGTH} is {length}, but the body holds {len(body)} bytes")
    return body[:length], memoryview(body)[length:]


def decode_inputs(inputs: list[RequestInput], binary: memoryview) -> dict[str, np.ndarray]:
    """Each input's array by name, its binary data taken in order from ``binary``."""
    arrays, offset = {}, 0
    for item in inputs:
        if item.name in arrays:
            raise bad_request(f"input {item.name!r} is given twice", param=item.name)
        size = (item.parameters or {}).get("binary_data_size")
        if size is not None:
            if item.data is not None:
                raise bad_request(
                    f"input {item.name!r} has both data and parameters.binary_data_size; send its values one way",
                    param=item.name,
                )
            if DIMENSION.problem(size) or not size <= len(binary) - offset:
                raise bad_request(
                    f"input {item.name!r}: binary_data_size {size!r} is more than the "
                    f"{len(binary) - offset} bytes left after the JSON header",
                    param=item.name,
                )
            arrays[item.name] = _from_binary(item, binary[offset : offset + size])
            offset += size
        else:
            arrays[item.name] = _from_json(item)
    if offset != len(binary):
        raise bad_request(f"{len(binary) - offset} bytes after the JSON header belong to no input's binary_data_size")
    return arrays


def _from_json(item: RequestInput) -> np.ndarray:
    if item.data is None:
        raise bad_request(f"input {item.name!r} has neither data nor parameters.binary_data_size", param=item.name)
    flat = _flatten(item.data, item)
    _check_count(item, len(flat))
    if item.datatype == "BYTES":
        if not all(isinstance(x, str) for x in flat):
            raise bad_request(f"input {item.name!r} is BYTES: its data are strings", param=item.name)
        return np.array([x.encode("utf-8") for x in flat], dtype=object).reshape(item.shape)
    if not all(isinstance(x, int | float) and not isinstance(x, str) for x in flat):
        raise bad_request(f"input {item.name!r} is {item.datatype}: its data are numbers", param=item.name)
    try:
        return np.asarray(flat, dtype=NUMPY_TYPES[item.datatype]).reshape(item.shape)
    except OverflowError:
        raise bad_request(f"input {item.name!r}: a value does not fit {item.datatype}", param=item.name) from None


def _flatten(data: list[Any], item: RequestInput) -> list[Any]:
    """The values of JSON data in row-major order: a flat list, or lists nested exactly as
    the input's shape (a ragged or differently nested list is refused, not flattened)."""
    if not any(isinstance(value, list) for value in data):
        return data
    flat: list[Any] = []
    stack: list[tuple[list[Any], int]] = [(data, 0)]  # a list and its depth in the shape
    while stack:
        values, depth = stack.pop()
        last = depth == len(item.shape) - 1
        if (
            depth >= len(item.shape)
            or len(values) != item.shape[depth]
            or any(isinstance(value, list) == last for value in values)
        ):
            raise bad_request(
                f"input {item.name!r}: data is nested, but not as its shape {item.shape}: send lists of exactly "
                "those lengths, or the values as one flat list",
                param=item.name,
            )
        if last:
            flat.extend(values)
        else:
            stack.extend((value, depth + 1) for value in reversed(values))
    return flat


def _from_binary(item: RequestInput, raw: memoryview) -> np.ndarray:
    if item.datatype == "BYTES":
        values = deserialize_bytes(raw, item.name)
        _check_count(item, len(values))
        return np.array(values, dtype=object).reshape(item.shape)
    dtype = np.dtype(NUMPY_TYPES[item.datatype]).newbyteorder("<")
    if len(raw) % dtype.itemsize:
        raise bad_request(f"input {item.name!r}: {len(raw)} bytes are not whole {item.datatype} values", item.name)
    _check_count(item, len(raw) // dtype.itemsize)
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(item.shape)


def _check_count(item: RequestInput, count: int) -> None:
    if any(d < 0 for d in item.shape):
        raise bad_request(f"input {item.name!r}: shape {item.shape} has a negative dimension", param=item.name)
    expected = math.prod(item.shape)
    if count != expected:
        raise bad_request(
            f"input {item.name!r}: shape {item.shape} holds {expected} values, the data has {count}", param=item.name
        )


def deserialize_bytes(raw: memoryview, name: str) -> list[bytes]:
    """BYTES elements from the binary extension: each a little-endian uint32 length, then the bytes."""
    values, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise bad_request(f"input {name!r}: BYTES data ends inside an element's length", param=name)
        (length,) = struct.unpack_from("<I", raw, offset)
        if offset + 4 + length > len(raw):
            raise bad_request(f"input {name!r}: a BYTES element of {length} bytes runs past the data", param=name)
        values.append(bytes(raw[offset + 4 : offset + 4 + length]))
        offset += 4 + length
    return values


def serialize_bytes(values: np.ndarray) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in (_as_bytes(x) for x in values.ravel()))


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def encode_output(name: str, array: np.ndarray, binary: bool) -> tuple[ResponseOutput, bytes]:
    """The output's JSON part and, with ``binary``, its bytes to append after the header."""
    datatype = "BYTES" if array.dtype == object else DATATYPES[array.dtype]
    shape = list(array.shape)
    if not binary:
        data = (
            [_as_bytes(x).decode("utf-8", "replace") for x in array.ravel()]
            if datatype == "BYTES"
            else array.ravel().tolist()
        )
        return ResponseOutput(name=name, shape=shape, datatype=datatype, data=data), b""
    raw = (
        serialize_bytes(array)
        if datatype == "BYTES"
        else np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
    )
    return ResponseOutput(name=name, shape=shape, datatype=datatype, parameters={"binary_data_size": len(raw)}), raw
