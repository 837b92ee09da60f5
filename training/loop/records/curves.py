"""Pictures of training: loss, accuracy (or regression error and R²) and learning-rate curves (PNG, matplotlib's Agg canvas,
no pyplot state), written atomically."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.errors import InvalidArgumentError
from zoo.store.files import write_bytes_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def figure(**kwargs: Any) -> Figure:
    """A matplotlib Figure on the Agg canvas (imported here: matplotlib takes ~0.7 s to import,
    which every ``zoo`` command would pay)."""
    from matplotlib.figure import Figure

    return Figure(layout="constrained", **kwargs)


def save_figure(fig: Figure, path: str | os.PathLike) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    return write_bytes_atomic(path, buffer.getvalue())


_PANELS = (
    ("loss", ("loss",)),
    ("accuracy / F1 / mAP", ("acc", "f1", "_map")),
    ("MAE / RMSE", ("mae", "rmse")),
    ("R²", ("_r2",)),
    ("learning rate", ("lr",)),
)


def _spans_decades(values: list[float], decades: float = 2.0) -> bool:
    """Whether ``values`` are all positive and their largest is at least 10**decades times their smallest."""
    return bool(values) and min(values) > 0 and max(values) >= 10**decades * min(values)


def plot_curves(rows: list[dict[str, float]], path: str | os.PathLike, x: str = "epoch") -> Path:
    """PNG of training curves from per-epoch (or per-step) rows such as ``{"epoch": 1,
    "train_loss": ..., "val_loss": ..., "val_acc": ..., "lr": ...}``: one panel for the keys
    containing "loss", one for "acc"/"f1"/"_map" (a multi-label's), one for a regression's "mae"/"rmse", one for its
    "_r2", one for "lr"; the loss and learning-rate panels are
    on a log scale when their values are positive and span two decades or more (a regression's
    loss falling from 1 to 1e-6 is flat otherwise); other keys are ignored.
    A key missing from some rows (validation every few epochs) is drawn where present."""
    if not rows:
        raise InvalidArgumentError("plot_curves needs at least one row of metrics")
    if any(x not in row for row in rows):
        raise InvalidArgumentError(f"every row needs the x-axis key {x!r}; pass x= with the key your rows use")
    keys = list(dict.fromkeys(k for row in rows for k, v in row.items() if k != x and isinstance(v, (int, float))))
    panels = [(title, [k for k in keys if any(tag in k.lower() for tag in tags)]) for title, tags in _PANELS]
    panels = [(title, names) for title, names in panels if names]
    if not panels:
        raise InvalidArgumentError(
            f"no key containing 'loss', 'acc', 'f1', '_map', 'mae', 'rmse', '_r2' or 'lr' among {keys}; nothing to plot"
        )
    fig = figure(figsize=(5.0 * len(panels), 4.0))
    for index, (title, names) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), index + 1)
        for name in names:
            points = [(row[x], row[name]) for row in rows if name in row]
            ax.plot(*zip(*points), marker="o" if len(points) <= 50 else None, markersize=3, label=name)
        if title in ("loss", "learning rate") and _spans_decades([row[n] for row in rows for n in names if n in row]):
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(x)
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, path)
