"""Tensors for training: tensor files and in-memory tensors as a `DataSource` (`tensor_files`), and the nudged digits set (`digits`)."""
