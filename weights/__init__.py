"""Weight files, model cards and weight entries (JSON data read by `zoo.registry`)."""
