"""Recipes for the weights the project trains itself: one command per weight file, fixed seed,
recorded hyperparameters; each trains, measures the held-out test split and publishes the
file, its model card, curves and registry entry into ``weights/`` (`zoo.training.recipes.publish`).

    python -m zoo.training.recipes.fmnist resnet20      # Fashion-MNIST image classifiers
    python -m zoo.training.recipes.dbn_weights digits           # deep belief nets (digits, fashion-mnist)
    python -m zoo.training.recipes.graph_weights triangles-er   # graph model on triangle counting
"""
