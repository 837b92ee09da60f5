"""Molecules for training: users' SMILES and SDF files as a `DataSource` of graphs (`molecule_files`) and the real molecule sets shipped in wheels (`molecule_sets`)."""
