"""One image reader for every command (``zoo predict``, the training image folders, the
server): a file that is missing, not an image, truncated, or a decompression bomb is one
`DataError` naming it, and images come out through the one channel conversion
(`ConvertChannels`: 16-bit gray scaled, not clipped)."""

from __future__ import annotations

import os
import stat
import warnings
from typing import IO

from PIL import Image

from zoo.errors import DataError
from zoo.loading.transforms import ConvertChannels

MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS or 89_478_485  # PIL's bound (about 9,459 x 9,459): over it is refused


class ImageTooLargeError(DataError):
    """An image over the pixel limit, or a decompression bomb: too large to decode, not broken."""


def open_image(
    source: str | os.PathLike | IO[bytes],
    channels: int | None = None,
    decode: bool = True,
    *,
    max_pixels: int = MAX_IMAGE_PIXELS,
    name: str | None = None,
) -> Image.Image:
    """The image at ``source`` (a path, or an open binary file such as a request's bytes, named
    ``name`` in errors), decoded and converted to ``channels`` (1, 3 or 4; None keeps its mode);
    with ``decode=False`` only checked whole (PIL's ``verify``: a truncated PNG fails, a JPEG's
    data is read only when decoded) and returned undecoded. Over ``max_pixels`` it is refused
    before it is decoded (`ImageTooLargeError`)."""
    shown = name or (str(source) if isinstance(source, str | os.PathLike) else "the image's bytes")
    if isinstance(source, str | os.PathLike):
        check_regular_file(source, shown)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source) as image:
                _check_size(shown, image, max_pixels)
                if decode:
                    image.load()
                else:
                    image.verify()
    except FileNotFoundError:
        raise DataError(f"{shown}: no such image file") from None
    except IsADirectoryError:
        raise DataError(f"{shown} is a folder; pass the image files in it, e.g. {shown.rstrip('/')}/*") from None
    except DataError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageTooLargeError(f"{shown} is refused as a decompression bomb ({error})") from None
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, EOFError... for bad bytes
        reason = _first_line(error) if "cannot identify image file" not in str(error) else "no image format PIL reads"
        raise DataError(f"{shown} is not a readable image ({reason}); remove it or replace it") from None
    return image if channels is None or not decode else _converter(channels)(image)


def check_regular_file(path: str | os.PathLike, shown: str | None = None) -> None:
    """Refuse, before anything opens it, a path that is not a regular file once links are
    followed: a FIFO, a socket or a device (``/dev/zero``, ``/dev/stdin``) would hang or never end."""
    shown = shown or str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"{shown}: no such image file") from None
    except OSError as error:
        raise DataError(f"{shown}: cannot read the image file ({_first_line(error)})") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{shown} is a folder; pass the image files in it, e.g. {shown.rstrip('/')}/*")
    if not stat.S_ISREG(mode):
        raise DataError(f"{shown} is not a regular file (a FIFO, a socket or a device); pass an image file")


_CONVERTERS: dict[int, ConvertChannels] = {}


def _converter(channels: int) -> ConvertChannels:
    """The one `ConvertChannels` to ``channels`` (made once: a module per image cost 5% of a
    small JPEG's decoding); refused channel counts raise as ConvertChannels does."""
    if channels not in _CONVERTERS:
        _CONVERTERS[channels] = ConvertChannels(channels)
    return _CONVERTERS[channels]


def _check_size(name: str, image: Image.Image, max_pixels: int) -> None:
    pixels = image.width * image.height
    if pixels > max_pixels:
        raise ImageTooLargeError(
            f"{name} is {image.width}x{image.height} = {pixels:,} pixels, over the limit of {max_pixels:,} "
            "(a decompression bomb, or an image to shrink first)"
        )


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
