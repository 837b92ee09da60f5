"""Graphs for training: PyG datasets as a `DataSource` (`graph_datasets`) and the generated graph tasks (`generated_graphs`)."""
