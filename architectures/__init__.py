"""Model families: pure `nn.Module` code, one module per family, importing nothing from the
rest of zoo. Importing this package imports no family: `_families.ARCHS` declares every
architecture, and the registry imports a family's module when one of its models is built."""

from ._families import ARCHS, ArchSpec
from ._registry import model_builders, register_model, registered_specs

__all__ = ["ARCHS", "ArchSpec", "model_builders", "register_model", "registered_specs"]
