"""Lightning loggers of a run: CSV always, TensorBoard, MLflow or W&B when named and installed.

ablate records its own metrics (``metrics.csv``, ``probes.csv``); the loggers are a view of the
same numbers for the tools researchers already use: the callbacks of :mod:`ablate.training.probes`
hand them the train loss, learning rate and gradient norm every ``runtime.log_every_n_steps``
steps, the val loss at each evaluation and the probes at each probe step (:func:`log_metrics`);
the run logs its flattened configuration once. Each logger writes under the run's folder
(``<run>/logs/<logger>/``); MLflow uses ``MLFLOW_TRACKING_URI`` when set, else a file store in the
experiment's folder (``<experiment>/mlruns``). W&B files each run under ``runtime.wandb``'s
project, entity, group and tags (:func:`wandb_settings`) and follows its own environment
(``WANDB_MODE=offline`` for machines without network).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ablate.core.folders import RunFolder

if TYPE_CHECKING:
    import lightning as L
    from lightning.pytorch.loggers import Logger

    from ablate.core.plan import RunSpec


def _csv(spec: RunSpec, run: RunFolder) -> Logger:
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(save_dir=run.logs, name="csv", version="")


def _tensorboard(spec: RunSpec, run: RunFolder) -> Logger:
    from lightning.pytorch.loggers import TensorBoardLogger

    return TensorBoardLogger(
        save_dir=run.logs, name="tensorboard", version="", default_hp_metric=False
    )


def _mlflow(spec: RunSpec, run: RunFolder) -> Logger:
    import os

    from lightning.pytorch.loggers import MLFlowLogger

    default = f"file:{run.experiment.mlruns}"
    tracking = os.environ.get("MLFLOW_TRACKING_URI") or default
    return MLFlowLogger(
        experiment_name=spec.experiment,
        run_name=f"{spec.variant}-seed{spec.seed}-{spec.run_id}",
        tracking_uri=tracking,
        tags={"variant": spec.variant, "seed": str(spec.seed), "group": spec.group},
    )


def _wandb(spec: RunSpec, run: RunFolder) -> Logger:
    from lightning.pytorch.loggers import WandbLogger

    return WandbLogger(**wandb_settings(spec), save_dir=str(run.logs))


def wandb_settings(spec: RunSpec) -> dict[str, Any]:
    """The W&B run of ``spec`` (``runtime.wandb``): the project and group the file names (by
    default the experiment's name: one group per experiment), a run named by stage, variant and
    seed, the stage, variant and seed also as tags, and the run id as W&B's."""
    cfg = spec.config.runtime.wandb
    return {
        "project": cfg.project or spec.experiment,
        "entity": cfg.entity,
        "group": cfg.group or spec.experiment,
        "name": f"{spec.group}-{spec.variant}-seed{spec.seed}",
        "tags": [*cfg.tags, spec.group, spec.variant, f"seed{spec.seed}"],
        "id": spec.run_id,
    }


BUILDERS: dict[str, Callable[[RunSpec, RunFolder], Logger]] = {
    "tensorboard": _tensorboard,
    "mlflow": _mlflow,
    "wandb": _wandb,
}


def build_loggers(spec: RunSpec, run: RunFolder) -> list[Logger]:
    """The CSV logger and every logger named in ``runtime.loggers``, writing under the run."""
    return [_csv(spec, run), *(BUILDERS[n](spec, run) for n in spec.config.runtime.loggers)]


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as one level of dotted keys (``model.norm.kind``), for hyperparameters."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value if isinstance(value, int | float | str | bool) else str(value)
    return flat


def log_metrics(trainer: L.Trainer, metrics: dict[str, float], step: int) -> None:
    """Send ``metrics`` at ``step`` to every logger of the Trainer."""
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step)
