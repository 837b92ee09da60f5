"""``zoo predict`` for models fine-tuned on molecules: SMILES in, the predicted value (in the
target's units), the top classes or the labels over their thresholds out, one block per SMILES
(the answers of `zoo.loading.outputs`, as ``zoo serve`` gives them)."""

from __future__ import annotations

import argparse

import torch

import zoo
from zoo.cli.predict_files import answer_lines
from zoo.loading.outputs import output_meaning
from zoo.loading.smiles import check_molecule_model, smiles_batch


def predict_smiles(args: argparse.Namespace) -> int:
    """Each SMILES of ``args.images`` through the model ``args.name``; every SMILES is checked
    (RDKit parses it) before the model loads."""
    smiles = list(args.images)
    for start in range(0, len(smiles), args.batch_size):
        smiles_batch(smiles[start : start + args.batch_size], "SMILES")  # a bad one is named before loading
    model = zoo.load(args.name, device=args.device)
    check_molecule_model(model, args.name)
    meaning = output_meaning(model.pretrained_cfg)
    device = next(model.parameters()).device
    for start in range(0, len(smiles), args.batch_size):
        chunk = smiles[start : start + args.batch_size]
        with torch.no_grad():
            answers = meaning.answers(model(smiles_batch(chunk, "SMILES").to(device)), args.top_k)
        print(
            "\n".join(
                line for text, answer in zip(chunk, answers) for line in answer_lines(text, answer, with_index=False)
            )
        )
    return 0
