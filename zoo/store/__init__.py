"""The weight store: weight entries (`weight_entries`), verified downloads and state-dict files
(`download`), key converters (`convert`) and atomic file writes (`files`)."""
