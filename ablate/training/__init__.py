"""One training run: data windows, the LightningModule, probes and callbacks, loggers, the run.

:func:`ablate.training.run.execute_run` turns one run spec into a stored run folder.
"""
