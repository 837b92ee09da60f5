"""The peers' formats, below `zoo.loading`: torchvision's weight names, Hugging Face checkpoints,
their export, and the Hub. (The peers' entry points, which load by name, are `zoo.peers`.)"""
