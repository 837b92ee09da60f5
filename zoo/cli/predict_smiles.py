"""``zoo predict`` for models fine-tuned on molecules: SMILES in, the predicted value (in the
target's units), the top classes or the labels over their thresholds out, one block per SMILES
(the answers of `zoo.inference.Predictor`, as ``zoo serve`` gives them)."""

from __future__ import annotations

import argparse

from zoo.cli.predict_files import answer_lines
from zoo.inference import Predictor
from zoo.inference.samples import molecule_sample
from zoo.loading.smiles import check_molecule_model


def predict_smiles(args: argparse.Namespace) -> int:
    """Each SMILES of ``args.images`` through the model ``args.name``; every SMILES is checked
    and made a graph (RDKit parses it) before the model loads."""
    smiles = list(args.images)
    graphs = [molecule_sample(text, f"SMILES[{i}]") for i, text in enumerate(smiles)]  # a bad one is named first
    predictor = Predictor(args.name, device=args.device, batch_size=args.batch_size)
    check_molecule_model(predictor.model, args.name)
    for start in range(0, len(smiles), args.batch_size):
        chunk = smiles[start : start + args.batch_size]
        outputs = predictor.forward(predictor.collate(graphs[start : start + args.batch_size]))
        answers = predictor.answers(outputs, args.top_k)
        print(
            "\n".join(
                line for text, answer in zip(chunk, answers) for line in answer_lines(text, answer, with_index=False)
            )
        )
    return 0
