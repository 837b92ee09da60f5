"""``zoo tune``: an Optuna search over ``zoo finetune``'s settings (`tune`), the space it searches (`tune_space`), its study file (`tune_study`) and what it reports (`tune_report`)."""
