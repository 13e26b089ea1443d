"""The ``runtime`` section of a run: where and how it executes (backend, accelerator, workers
and threads, processes, runs per device, launcher and its Slurm section, the simulator's
truth, loggers). It never enters a run's identity: a run trained anywhere is the same run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ablate.core.cluster import SlurmConfig
from ablate.core.launchers import DEFAULT as DEFAULT_LAUNCHER
from ablate.core.launchers import launcher_names
from ablate.core.section import StrictSection
from ablate.core.truth import SimulateConfig

LoggerName = Literal["tensorboard", "mlflow", "wandb"]


class WandbConfig(StrictSection):
    """Where the ``wandb`` logger files a run (none of it changes a result)."""

    project: str | None = Field(None, description="W&B project; null: the experiment's name")
    entity: str | None = Field(None, description="W&B team or user; null: W&B's default")
    group: str | None = Field(
        None, description="W&B group of every run of the experiment; null: its name"
    )
    tags: list[str] = Field(default_factory=list, description="tags on every run")


class RuntimeConfig(StrictSection):
    """Where and how runs execute; does not change results (except accelerator)."""

    accelerator: Literal["cpu", "auto", "cuda"] = "cpu"
    workers: int | None = Field(None, ge=1, le=256, description="default: chosen for the machine")
    threads: int | None = Field(None, ge=1, le=1024, description="torch threads per worker")
    loggers: list[LoggerName] = Field(
        default_factory=list,
        description="Lightning loggers besides CSV (always on): tensorboard, mlflow, wandb",
    )
    log_every_n_steps: int = Field(10, ge=1, le=100_000, description="logger cadence")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="the wandb logger's run")
    save_weights: bool = Field(
        True, description="store each finished main run's final weights (model.pt) for convert:"
    )
    heartbeat_s: int = Field(
        30,
        ge=1,
        le=3600,
        description="search on an RDB storage: a trial's worker records a heartbeat this often; "
        "one silent for 3x this long is failed and retried",
    )
    trial_retries: int = Field(
        3, ge=0, le=100, description="how often a trial whose worker died is retried"
    )
    devices: int = Field(
        1, ge=1, le=1024, description="processes (CPU) or GPUs per node that train one run (DDP)"
    )
    strategy: Literal["auto", "ddp_spawn"] = Field(
        "auto",
        description="Lightning strategy; auto: one process, or ddp_spawn for several devices",
    )
    num_nodes: int = Field(1, ge=1, le=1024, description="machines that train one run together")
    runs_per_device: int = Field(
        1,
        ge=1,
        le=64,
        description="runs trained at once on each GPU (workers by default: GPUs x this), "
        "refused where they would not fit its free memory; CPU runs: runtime.workers",
    )
    backend: Literal["train", "simulate"] = Field(
        "train",
        description="train: real runs; simulate: the known-truth simulator (docs/simulator.md)",
    )
    simulate: SimulateConfig = Field(default_factory=SimulateConfig)
    launcher: str = Field(
        DEFAULT_LAUNCHER,
        description="local: runs train on this machine; slurm: each stage's runs are Slurm "
        "jobs (runtime.slurm, docs/distributed.md); or a launcher another package registers",
    )
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    checkpoint_minutes: float = Field(
        5.0,
        ge=0,
        le=10_000,
        description="save a resumable checkpoint of a training run this often (0: never); a "
        "run cut by Ctrl-C, scancel, preemption or a time limit resumes from it, bitwise equal",
    )
    checkpoint_steps: int = Field(
        0,
        ge=0,
        le=100_000_000,
        description="save the checkpoint every this many optimizer steps instead (0: by time)",
    )
    pause_step: int | None = Field(
        None,
        ge=1,
        description="hold the run at this step: its checkpoint saved and kept, stored as "
        "paused (the curve's early stop sets it: curve.stop_step)",
    )

    @field_validator("launcher")
    @classmethod
    def _registered_launcher(cls, name: str) -> str:
        names = launcher_names()
        if name not in names:
            allowed = ", ".join(repr(n) for n in names)
            raise ValueError(f"runtime.launcher: got {name!r}; input should be one of {allowed}")
        return name

    @model_validator(mode="after")
    def _packs_single_gpu_runs(self) -> RuntimeConfig:
        if self.runs_per_device == 1:
            return self
        if self.accelerator == "cpu":
            raise ValueError(
                f"runtime.runs_per_device: {self.runs_per_device} packs runs onto GPUs "
                "(runtime.accelerator cuda or auto); on CPU, runs at once are runtime.workers"
            )
        if self.processes() > 1:
            raise ValueError(
                f"runtime.runs_per_device: {self.runs_per_device} packs one-GPU runs; a run of "
                f"{self.processes()} processes (runtime.devices x runtime.num_nodes) takes "
                "whole GPUs"
            )
        return self

    def processes(self) -> int:
        """Processes that train one run together (the DDP world size)."""
        return self.devices * self.num_nodes
