"""The cluster's section of a run's config (``runtime.slurm``): how the Slurm launcher
(:mod:`ablate.launch.slurm`) asks for jobs. Like the rest of ``runtime`` it never enters a run
id: a run trained on a cluster is the run trained here."""

from __future__ import annotations

from pydantic import Field, field_validator

from ablate.core.section import StrictSection


class SlurmConfig(StrictSection):
    """The runs queued for Slurm tasks that each train several, one after another
    (docs/distributed.md)."""

    partition: str | None = Field(None, description="sbatch --partition; default: the cluster's")
    account: str | None = Field(None, description="sbatch --account")
    qos: str | None = Field(None, description="sbatch --qos")
    time_min: int = Field(60, ge=1, le=525_600, description="each task's time limit, minutes")
    cpus_per_task: int = Field(
        1, ge=1, le=1024, description="CPUs of each task; its torch threads (runtime.threads)"
    )
    gpus_per_task: int = Field(0, ge=0, le=64, description="GPUs of each task (--gpus-per-node)")
    mem_gb: float | None = Field(None, gt=0, le=65_536, description="memory of each task, GB")
    array_parallelism: int = Field(
        64, ge=1, le=100_000, description="tasks of one array that run at once (--array=...%N)"
    )
    runs_per_task: int = Field(
        16,
        ge=1,
        le=100_000,
        description="most runs one task takes from the queue and trains, one after another in "
        "one process (on each of its slots: runtime.runs_per_device), before it ends and a "
        "fresh task takes its place",
    )
    task_idle_s: float = Field(
        60.0,
        ge=0,
        le=86_400,
        description="how long a task with nothing queued waits for the controller's next run "
        "(the next trial, probe or stage) before it ends",
    )
    sbatch: dict[str, str] = Field(
        default_factory=dict,
        description="further sbatch options by name, e.g. {constraint: a100, exclusive: user}",
    )
    setup: list[str] = Field(
        default_factory=list,
        description="shell lines each job runs before ablate (module load ..., source venv)",
    )
    retries: int = Field(
        2, ge=0, le=100, description="resubmissions of a task cancelled, preempted or lost"
    )
    poll_s: float = Field(5.0, gt=0, le=600, description="how often the controller reads squeue")
    result_wait_s: float = Field(
        10.0,
        ge=0,
        le=600,
        description="how long an ended job's result may take to appear (a shared file system)",
    )
    log_dir: str | None = Field(
        None, description="job scripts and logs; default: <results>/<experiment>/.slurm/submitit"
    )

    def task_slots(self, runs_per_device: int) -> int:
        """How many runs a task trains at once, as expected before it starts: one, or with
        ``runs_per_device`` above 1 that many on each of its ``gpus_per_task`` GPUs (at least
        one; a task started says its own, from the GPUs Slurm bound to it)."""
        if runs_per_device == 1:
            return 1
        return max(1, self.gpus_per_task) * runs_per_device

    @field_validator("sbatch")
    @classmethod
    def _options_are_names(cls, options: dict[str, str]) -> dict[str, str]:
        for name in options:
            if not name or name.startswith("-") or " " in name:
                raise ValueError(
                    f"runtime.slurm.sbatch key {name!r}: give an sbatch option's name without "
                    "dashes, e.g. constraint"
                )
        return options
