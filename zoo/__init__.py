"""zoo: one registry of PyTorch models with verified, offline-loadable weights.

    >>> import zoo
    >>> zoo.list_models("resnet*", pretrained=True)
    >>> model = zoo.load("resnet50.tv_in1k", num_classes=7)   # ImageNet body, fresh 7-way head
"""
from zoo.api import info, load, save, transforms
from zoo.architectures import register_model
from zoo.errors import UnknownModelError, WeightsMismatchError, ZooError
from zoo.hf import export_hf
from zoo.registry import WeightInfo, list_models
from zoo.tokenizer import ByteTokenizer

__version__ = "0.1.0"
__all__ = [
    "ByteTokenizer",
    "UnknownModelError",
    "WeightInfo",
    "WeightsMismatchError",
    "ZooError",
    "export_hf",
    "info",
    "list_models",
    "load",
    "register_model",
    "save",
    "transforms",
]
