"""Model families; importing this package registers every architecture with zoo.registry."""
from . import densenet, mobilenet, resnet

__all__ = ["densenet", "mobilenet", "resnet"]
