"""``zoo finetune``: a zoo model fine-tuned on your data, saved with its card, metrics and exports.

The room holds the run, `finetuning` (`finetune_with_config`, from a `FinetuneOptions` and a
`TrainConfig`; `run` and `main`, the command line, also ``python -m zoo.training.finetune``), and
`keywords`, `zoo.finetune`: the one `finetune` signature, the command's flags as keywords. Around
them: what a run is asked (`options`, and `defaults`, the data's own), what trains and how
(`stages`: modes, layer decay, the head; `distill`: a teacher), what it writes (`run_folder`, the
output folder and its manifest; `card`; `report`, the evaluation and a multi-label model's
thresholds; `post_training`, exports, int8 and pruning) and ``--track`` (`mlflow_run`,
`mlflow_model`). This face re-exports the names other rooms import from ``zoo.training.finetune``.
"""

from zoo.training.finetune.distill import Distillation, distillation_step
from zoo.training.finetune.finetuning import (
    FinetuneResult,
    finetune_with_config,
    load_for_data,
    main,
    module_main,
    run,
)
from zoo.training.finetune.keywords import finetune
from zoo.training.finetune.options import FinetuneOptions, add_arguments
from zoo.training.finetune.stages import MODES, apply_mode, layer_decay_scale, parameter_levels

__all__ = [
    "MODES",
    "Distillation",
    "FinetuneOptions",
    "FinetuneResult",
    "add_arguments",
    "apply_mode",
    "distillation_step",
    "finetune",
    "finetune_with_config",
    "layer_decay_scale",
    "load_for_data",
    "main",
    "module_main",
    "parameter_levels",
    "run",
]
