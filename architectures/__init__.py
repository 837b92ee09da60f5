"""Model families; importing this package registers every architecture with zoo.registry."""
from . import densenet, resnet

__all__ = ["densenet", "resnet"]
