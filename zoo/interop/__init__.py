"""The peers' names and formats: timm's `create_model` and config, torchvision's weight names
and enums, Hugging Face checkpoints and the Hub."""
