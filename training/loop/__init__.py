"""The training loop every zoo model trains through: `Trainer` with a `TrainConfig`, its steps,
optimizer, meters, logs, checkpoints and processes."""
