"""Data for training: built-in sets (Fashion-MNIST, the standard-library corpus, digits, generated
graphs), users' files opened as a `DataSource` (`kinds.open_data`), and the loaders the Trainer reads."""
