"""What a plan is expected to cost, not at most: its whole protocol run on the simulator, counted.

A study stage's run count is not known before it runs (a bracket stops where its seeds' edges
are, ``decide:`` where its verdicts are reached), so the estimate's maximum prices every stage
at its cap. :func:`simulate_design` runs the file's design on the simulator (at the truth its
``runtime.simulate`` states, else the simulator's defaults) in a folder it then removes, its
studies in a journal file there, through a :class:`CountingExecutor` that records what each
stage asked for: the runs per variant and stage it trained
(:class:`ablate.launch.stored.Stored`, as a results folder's would be counted), and how many
tasks and submissions the Slurm launcher would have needed for them
(:meth:`CountingExecutor.queue`: its queue's model). The same run gives ``validate
--simulate`` the Answer that design would give (:func:`simulated_lines`), with its verdicts
and what would change them.
"""

from __future__ import annotations

import io
import math
import tempfile
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rich.console import Console

from ablate.core.cluster import SlurmConfig
from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.launch.execute import Obtained, ProgressFn, Request, SayFn, split_done
from ablate.launch.pipeline import run_experiment
from ablate.launch.simulator import SimulatedExecutor
from ablate.launch.stored import Stored, stored_counts
from ablate.report.answer import HEADING


@dataclass
class CountingExecutor:
    """The simulator, counting the Slurm submissions and tasks each stage's calls would be."""

    imports: ClassVar[tuple[str, ...]] = ()
    root: Path
    slurm: SlurmConfig
    submissions: int = 0
    tasks: int = 0
    alive: int = 0  # tasks serving the queue
    left: int = 0  # runs they may still take (runs_per_task on each slot)
    slots: int = 1  # runs a task trains at once (SlurmConfig.task_slots)
    inner: SimulatedExecutor = field(init=False)

    def __post_init__(self) -> None:
        self.inner = SimulatedExecutor(self.root)

    def prepare(self) -> None:
        """Nothing to load."""

    def obtain(
        self,
        request: Request,
        wait: bool = False,
        say: SayFn = print,
        progress: ProgressFn | None = None,
    ) -> RunRecord:
        """The run, queued where it is not stored yet (a trial or probe)."""
        _, pending = split_done([request.spec], self.root)
        self.queue(len(pending))
        return self.inner.obtain(request, wait, say, progress)

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        """The requests not stored yet, queued at once (a search round's trials)."""
        _, pending = split_done([r.spec for r in requests], self.root)
        self.queue(len(pending))
        return self.inner.obtain_all(requests, say)

    def run(self, specs: list[RunSpec]) -> list[RunRecord]:
        """The pending specs, queued at once."""
        _, pending = split_done(specs, self.root)
        self.queue(len(pending))
        return self.inner.run(specs)

    def queue(self, runs: int) -> None:
        """Count what ``runs`` queued at once cost: one submission of the tasks they need
        beyond those serving the queue (one per ``slots`` runs, up to ``array_parallelism``),
        and one for each fresh task that replaces one whose slots took ``runs_per_task`` runs
        each. Tasks are taken to wait between calls (``task_idle_s`` is longer than the
        controller's step from one call to the next; with 0 they end whenever the queue is
        empty)."""
        if not runs:
            return
        most = self.slurm.runs_per_task * self.slots
        wanted = math.ceil(runs / self.slots)
        new = max(0, min(self.slurm.array_parallelism, wanted) - self.alive)
        if new:
            self.submissions += 1
            self.tasks += new
            self.alive += new
            self.left += new * most
        if runs > self.left:
            fresh = math.ceil((runs - self.left) / most)
            self.submissions += fresh
            self.tasks += fresh
            self.left += fresh * most
        self.left -= runs
        if self.slurm.task_idle_s == 0:
            self.alive = self.left = 0


@dataclass(frozen=True)
class Design:
    """What the design did on the simulator: its report's Answer, the runs it trained
    per (variant, stage), and the Slurm submissions and tasks they would have been."""

    truth: str
    summary: list[str]
    counts: Stored
    submissions: int
    tasks: int


def simulate_design(experiment: Experiment) -> Design:
    """Run ``experiment`` (loaded with backend simulate) through every stage on the simulator
    in a temporary folder, its studies in a journal file; what it did."""
    assert experiment.base.runtime.backend == "simulate"
    simulate = experiment.file.get("runtime", {}).get("simulate")
    truth = (
        "the file's runtime.simulate"
        if simulate
        else "the simulator's defaults: every variant the same truth (Δ = 0), iid run noise "
        f"{experiment.base.runtime.simulate.run_sd:g}, far lighter than real runs "
        "(docs/simulator.md); state the truth you expect in runtime.simulate"
    )
    quiet = io.StringIO()  # the stages' own lines (the studies print theirs)
    with tempfile.TemporaryDirectory(prefix="ablate-simulate-") as folder, redirect_stdout(quiet):
        root = Path(folder)
        runtime = experiment.base.runtime
        slots = runtime.slurm.task_slots(runtime.runs_per_device)
        counter = CountingExecutor(root / "results", runtime.slurm, slots=slots)
        result = run_experiment(
            experiment,
            root / "results",
            root / "reports",
            storage=f"journal:{root / 'studies.log'}",
            console=Console(file=quiet),
            executor=counter,
        )
        report = (result.report_dir / "report.md").read_text(encoding="utf-8")
        counts = stored_counts(experiment, root / "results")
    summary = report.split(f"{HEADING}\n", 1)[1].split("\n## ", 1)[0].strip()
    return Design(truth, summary.splitlines(), counts, counter.submissions, counter.tasks)


def simulated_lines(design: Design) -> list[str]:
    """``validate --simulate``: the report's Answer the design gave on the simulator."""
    return [f"on the simulator ({design.truth}), this design would report:", *design.summary]
