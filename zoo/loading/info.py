"""``zoo.info``: what is known of a name before anything loads, light enough for ``zoo list``
and ``zoo info`` (no torch): a registered name's weight entry, or a saved or fine-tuned folder's
``config.json`` (`zoo.loading.resolve.folder_info`, read only for a folder)."""

from __future__ import annotations

import os
from pathlib import Path

from zoo.errors import InvalidArgumentError
from zoo.store import weight_entries
from zoo.store.weight_entries import WeightInfo


def info(name: str | os.PathLike) -> WeightInfo:
    """``zoo.info``: the weight entry of a registered name (`weight_entries.info`), or for a saved
    or fine-tuned folder what its ``config.json`` records, as a `WeightInfo` named ``ARCH.FOLDER``
    (its file, classes count, options, preprocessing, target and card). A folder wins over a
    registry name of the same spelling, as in `zoo.load`."""
    if not isinstance(name, str | os.PathLike):
        raise InvalidArgumentError(
            f"a model is named by a string such as 'resnet20.fmnist' or a folder's path, got {name!r:.60}"
        )
    if Path(name).is_dir():
        from zoo.loading.resolve import SavedFolder, folder_info, resolve  # torch: only for a folder

        source = resolve(name)
        if isinstance(source, SavedFolder):
            return folder_info(source.path)
    return weight_entries.info(os.fspath(name))
