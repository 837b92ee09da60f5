"""Model families; importing this package registers every architecture with zoo.registry."""
from . import densenet
from . import resnet

__all__ = ["resnet"]
