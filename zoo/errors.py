"""The errors a user can cause on the weights side, under one base class `ZooError`."""
from __future__ import annotations


class ZooError(Exception):
    """Base of zoo's own errors: the message names the problem, the argument or file, and the fix."""


class UnknownModelError(ZooError, KeyError, ValueError):
    """An architecture or weight name that the registry does not know."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class WeightsMismatchError(ZooError, ValueError):
    """A state dict whose keys or shapes don't fit the model it is loaded into."""
