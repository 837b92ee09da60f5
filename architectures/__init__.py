"""Model families: pure `nn.Module` code, one module per family, importing nothing from the
rest of zoo. Importing this package imports no family: `ARCHS` (every architecture zoo ships, as
its ``@register_model`` declares it) is read from the derived index, and the registry imports a
family's module when one of its models is built."""

from ._registry import ArchSpec, model_builders, read_index, register_model, registered_specs

ARCHS: dict[str, ArchSpec] = read_index()

__all__ = ["ARCHS", "ArchSpec", "model_builders", "register_model", "registered_specs"]
