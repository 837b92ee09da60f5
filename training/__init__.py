"""Training zoo models, in rooms: `zoo.training.loop` (the `Trainer`, its `TrainConfig`,
steps, optimizer, checkpoints and processes), `zoo.training.data` (built-in data sets and users'
files as a `DataSource`, loaders), `zoo.training.finetune` (``zoo finetune``: modes, distillation,
reports, cards, the run folder), `zoo.training.belief_nets` (RBMs and deep belief nets) and
`zoo.training.recipes` (the project's own weights); `demo` and `transfer` are the commands on top."""
