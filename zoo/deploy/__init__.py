"""After the model is built: export to files (`exporter`), fast inference (`inference`,
`zoo.optimize`) and the results table (`bench`)."""
