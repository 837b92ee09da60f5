"""Model families: pure `nn.Module` code. Importing this package registers every architecture
in `zoo.architectures._registry`; it imports nothing from the rest of zoo."""
from . import dbn, densenet, graph, mobilenet, moe_experts, moe_transformer, resnet
from ._registry import model_builders, model_heads, model_inputs, register_model

__all__ = ["dbn", "densenet", "graph", "mobilenet", "model_builders", "model_heads", "model_inputs", "moe_experts", "moe_transformer", "register_model", "resnet"]
