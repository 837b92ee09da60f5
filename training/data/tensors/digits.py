"""The "nudged digits" set of scikit-learn's example "Restricted Boltzmann Machine features for
digit classification": the 8x8 digits of ``load_digits``, plus copies shifted by one pixel in
each of four directions (5 x 1797 images), min-max scaled to [0, 1] and split 80/20 with
``random_state=0``. Needs scikit-learn (its digits ship with it, so no download)."""

from __future__ import annotations

import numpy as np
from scipy.ndimage import convolve
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import minmax_scale

# The example's kernels: convolving with each moves the image by one pixel (up, left, right, down).
SHIFT_KERNELS = np.array(
    [
        [[0, 1, 0], [0, 0, 0], [0, 0, 0]],
        [[0, 0, 0], [1, 0, 0], [0, 0, 0]],
        [[0, 0, 0], [0, 0, 1], [0, 0, 0]],
        [[0, 0, 0], [0, 0, 0], [0, 1, 0]],
    ]
)


def nudge_dataset(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The example's ``nudge_dataset``: X (N, 64) and its four 1-pixel shifts (zeros shifted in),
    stacked to (5N, 64), and y repeated. The example convolves image by image; convolving the
    stack with a kernel that is 1 along the image axis gives the same numbers in one call."""
    images = X.reshape(-1, 8, 8)
    shifted = [convolve(images, kernel[None], mode="constant").reshape(len(X), -1) for kernel in SHIFT_KERNELS]
    return np.concatenate([X, *shifted]), np.concatenate([y] * 5)


def load_nudged_digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``X_train, X_test, y_train, y_test`` exactly as the example builds them: float32 pixels in
    [0, 1] of shape (7188, 64) and (1797, 64), int labels 0-9."""
    X, y = load_digits(return_X_y=True)
    X, y = nudge_dataset(np.asarray(X, "float32"), y)
    X = minmax_scale(X, feature_range=(0, 1))
    return tuple(train_test_split(X, y, test_size=0.2, random_state=0))
