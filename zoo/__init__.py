"""zoo: one registry of PyTorch models with verified, offline-loadable weights.

    >>> import zoo
    >>> zoo.list_models("resnet*", pretrained=True)
    >>> model = zoo.load("resnet50.tv_in1k", num_classes=7)   # ImageNet body, fresh 7-way head
"""
from zoo.api import create_model, info, load, save, transforms
from zoo.architectures import register_model
from zoo.deploy import export
from zoo.errors import UnknownModelError, WeightsMismatchError, ZooError
from zoo.hf import export_hf
from zoo.inference import optimize
from zoo.registry import WeightInfo, list_models
from zoo.tokenizer import ByteTokenizer
from zoo.weights_enum import get_model, get_model_weights

__version__ = "0.1.0"
__all__ = [
    "ByteTokenizer",
    "UnknownModelError",
    "WeightInfo",
    "WeightsMismatchError",
    "ZooError",
    "create_model",
    "export",
    "export_hf",
    "get_model",
    "get_model_weights",
    "info",
    "list_models",
    "load",
    "optimize",
    "register_model",
    "save",
    "transforms",
]
