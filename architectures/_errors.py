"""The base of zoo's errors, defined here so that the model families (which import nothing of
the rest of zoo) refuse an option with the same `InvalidArgumentError` as the loaders;
`zoo.errors` re-exports both with the other error classes."""

from __future__ import annotations


class ZooError(Exception):
    """Base of zoo's own errors: the message names the problem, the argument or file, and the fix."""


class InvalidArgumentError(ZooError, TypeError, ValueError):
    """An argument that does not apply to the model or the call, or has an unusable value."""


for _error in (ZooError, InvalidArgumentError):
    _error.__module__ = "zoo.errors"  # where users import them from (and pickle finds them)
