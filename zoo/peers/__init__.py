"""Drop-in entry points of the peers, built on `zoo.load`: timm's ``create_model`` and
torchvision's ``get_model`` / ``get_model_weights`` / ``get_weight`` with their weight enums."""
