"""zoo: one registry of PyTorch models with verified, offline-loadable weights.

    >>> import zoo
    >>> zoo.list_models("resnet*", pretrained=True)
    >>> model = zoo.load("resnet50.tv_in1k", num_classes=7)   # ImageNet body, fresh 7-way head
    >>> result = zoo.finetune("resnet20.fmnist", "my_images/", "runs/mine", epochs=3)  # zoo finetune's flags

The public names are imported when first used (PEP 562), so ``import zoo`` and ``zoo list``
don't wait for torch's model families, torchvision or torch_geometric (nor for the training
loop: ``zoo.finetune``, ``zoo.Trainer``, ``zoo.TrainConfig``).
"""

from typing import TYPE_CHECKING

from zoo.errors import UnknownModelError, WeightsMismatchError, ZooError

__version__ = "0.1.0"

# public name -> the module that defines it
_PUBLIC = {
    "ByteTokenizer": "zoo.tokenizer",
    "TrainConfig": "zoo.training.loop.train_config",
    "Trainer": "zoo.training.loop.trainer",
    "WeightInfo": "zoo.store.weight_entries",
    "create_model": "zoo.peers.timm",
    "evaluate": "zoo.training.scoring",
    "export": "zoo.deploy.exporter",
    "export_hf": "zoo.interop.hf_export",
    "finetune": "zoo.training.finetune.keywords",
    "get_model": "zoo.peers.torchvision_models",
    "get_model_weights": "zoo.peers.torchvision_models",
    "get_weight": "zoo.peers.torchvision_models",
    "info": "zoo.loading.info",
    "list_models": "zoo.store.weight_entries",
    "load": "zoo.loading.build",
    "optimize": "zoo.deploy.inference",
    "predict": "zoo.inference.predictor",
    "register_model": "zoo.architectures",
    "save": "zoo.loading.saved",
    "transforms": "zoo.loading.transforms",
    "tune": "zoo.training.tuning.tune",
}
__all__ = [
    "ByteTokenizer",
    "TrainConfig",
    "Trainer",
    "UnknownModelError",
    "WeightInfo",
    "WeightsMismatchError",
    "ZooError",
    "create_model",
    "evaluate",
    "export",
    "export_hf",
    "finetune",
    "get_model",
    "get_model_weights",
    "get_weight",
    "info",
    "list_models",
    "load",
    "optimize",
    "predict",
    "register_model",
    "save",
    "transforms",
    "tune",
]

if TYPE_CHECKING:
    from zoo.architectures import register_model
    from zoo.deploy.exporter import export
    from zoo.deploy.inference import optimize
    from zoo.inference.predictor import predict
    from zoo.interop.hf_export import export_hf
    from zoo.loading.build import load
    from zoo.loading.info import info
    from zoo.loading.saved import save
    from zoo.loading.transforms import transforms
    from zoo.peers.timm import create_model
    from zoo.peers.torchvision_models import get_model, get_model_weights, get_weight
    from zoo.store.weight_entries import WeightInfo, list_models
    from zoo.tokenizer import ByteTokenizer
    # zoo.finetune, zoo.tune, zoo.Trainer and zoo.TrainConfig come from zoo.training, above the facade: imported
    # by name only (the rooms' order, tests/test_imports.py), never here


def __getattr__(name: str) -> object:
    import importlib  # here, not at the top: `zoo.importlib` is no attribute of the API

    if name not in _PUBLIC:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")  # internal: PEP 562's __getattr__ protocol
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # once found, a plain attribute
    return value


def __dir__() -> list[str]:
    """The API (`__all__`), the version and the module's own dunders; not the submodules
    imported so far."""
    return sorted({*__all__, "__version__", *(name for name in globals() if name.startswith("__"))})


del TYPE_CHECKING  # read once, above: not an attribute of the API
