"""Mordred's 2D molecular descriptors (the ``mordredcommunity`` package): the about 1,600
targets chemprop's CheMeleon pretrains its MPNN on, as further names of
`zoo.training.data.molecules.corpus.descriptor_targets` (``mordred:NAME``, e.g.
``mordred:SLogP``). They cost about 75 ms a molecule, against about 5 ms for RDKit's 217."""

from __future__ import annotations

import functools
import importlib.metadata
import math
import numbers
from collections.abc import Sequence
from typing import Any

from zoo.errors import ZooError

PREFIX = "mordred:"  # a descriptor name with it is Mordred's, without it RDKit's
INSTALL_HINT = "pip install 'zoo[mordred]'"
# an RDKit descriptor left out (a downstream target) -> Mordred's of the same quantity, or closer
# still to it (Filter-it's logS estimates the solubility that MolLogP is left out for)
EQUIVALENTS = {"TPSA": ("TopoPSA(NO)", "TopoPSA"), "MolLogP": ("SLogP", "FilterItLogS")}


def require_mordred() -> str:
    """Mordred's version, or a `ZooError` naming the extra to install."""
    try:
        import mordred  # noqa: F401

        return importlib.metadata.version("mordredcommunity")
    except ImportError:  # PackageNotFoundError too: a `mordred` of another distribution
        raise ZooError(f"Mordred descriptors are computed by mordredcommunity, not installed: {INSTALL_HINT}") from None


@functools.cache
def _descriptors() -> dict[str, Any]:
    """``mordred:NAME`` -> descriptor, each of Mordred's 2D descriptors in its own order."""
    require_mordred()
    from mordred import Calculator, descriptors

    return {PREFIX + str(d): d for d in Calculator(descriptors, ignore_3D=True).descriptors}


def mordred_names(exclude: Sequence[str] = ()) -> tuple[str, ...]:
    """Every 2D Mordred descriptor (``mordred:NAME``) but those in ``exclude`` and those of the
    quantities of the RDKit names there (`EQUIVALENTS`: excluding TPSA leaves out TopoPSA too)."""
    return tuple(name for name in _descriptors() if name not in left_out(exclude))


def left_out(exclude: Sequence[str]) -> tuple[str, ...]:
    """The Mordred descriptors ``exclude`` leaves out: its own ``mordred:`` names and `EQUIVALENTS`'."""
    named = [name for name in exclude if name.startswith(PREFIX)]
    return (*named, *(PREFIX + same for name in exclude for same in EQUIVALENTS.get(name, ())))


@functools.cache
def calculator(names: tuple[str, ...]) -> Any:
    """A Mordred calculator of ``names`` (each ``mordred:NAME``, as `mordred_names` lists them), in their order."""
    from mordred import Calculator

    known = _descriptors()
    return Calculator([known[name] for name in names], ignore_3D=True)


def mordred_values(calc: Any, mol: Any) -> list[float]:
    """The calculator's values on one RDKit molecule; NaN where Mordred gives an error or a missing
    value, or all NaN where it fails on the molecule itself (e.g. its kekulization)."""
    try:
        values = calc(mol)
    except Exception:  # noqa: BLE001  (Mordred prepares the molecule outside its own per-descriptor guard)
        return [math.nan] * len(calc.descriptors)
    return [float(value) if isinstance(value, numbers.Real) else math.nan for value in values]
