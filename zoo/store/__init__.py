"""The weight store: weight entries (`registry`), verified downloads and state-dict files
(`download`), key converters (`convert`) and atomic file writes (`files`)."""
