"""From a name to a model: `resolve` turns a name or path into one typed source, `build` loads
it; saved folders, preprocessing transforms and the model's configuration live beside them."""
