"""Model families; importing this package registers every architecture with zoo.registry."""
from . import dbn, densenet, graph, mobilenet, moe_transformer, resnet

__all__ = ["dbn", "densenet", "graph", "mobilenet", "moe_transformer", "resnet"]
