"""``python -m zoo.training.finetune``: the same options as ``zoo finetune``."""

import sys

from zoo.training.finetune import main

sys.exit(main())
