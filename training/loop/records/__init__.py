"""What a `zoo.training.loop.trainer.Trainer` run leaves to read: train.log and TensorBoard points (`run_logs`), curves as pictures (`curves`), and runs logged to MLflow (`tracking`)."""
