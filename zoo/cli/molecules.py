"""``zoo predict`` for models fine-tuned on molecules: SMILES in, the predicted value (in the
target's units) or the top classes out, one block per SMILES."""

from __future__ import annotations

import argparse

import zoo
from zoo.loading.molecules import check_molecule_model, predict_molecules, smiles_batch


def predict_smiles(args: argparse.Namespace) -> int:
    """Each SMILES of ``args.images`` through the model ``args.name``; every SMILES is checked
    (RDKit parses it) before the model loads."""
    smiles = list(args.images)
    for start in range(0, len(smiles), args.batch_size):
        smiles_batch(smiles[start : start + args.batch_size], "SMILES")  # a bad one is named before loading
    model = zoo.load(args.name, device=args.device)
    check_molecule_model(model, args.name)
    target = model.pretrained_cfg.get("target")
    unit = f" ({target['name']})" if target else ""
    for start in range(0, len(smiles), args.batch_size):
        chunk = smiles[start : start + args.batch_size]
        for text, result in zip(chunk, predict_molecules(model, chunk, "SMILES")):
            if not isinstance(result, dict):
                print(f"{text}\t{result:.6g}{unit}" if isinstance(result, float) else f"{text}\t{result}")
                continue
            top = sorted(result.items(), key=lambda item: -item[1])[: args.top_k]
            print("\n".join([text, *(f"  {p:7.2%}  {name}" for name, p in top)]))
    return 0
