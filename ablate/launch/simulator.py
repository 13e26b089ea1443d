"""The simulator backend (``runtime.backend: simulate``): an :class:`Executor` whose runs are drawn
from the experiment's stated truth (:mod:`ablate.core.simulate`) in milliseconds.

Each run is claimed, written and released through the same store as a trained run — config,
metrics, (empty) probes, summary with every :data:`ablate.core.store.SUMMARY_KEYS` key — so every
stage, study, claim, resume and report works on it unchanged, and the estimators can be scored
against the truth. Simulated runs have run ids of their own (the ``simulate`` section is hashed
into them), so they never stand in for trained runs.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from rich.console import Console

from ablate.core import folders, store
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.core.simulate import SIMULATED_IMPL, SimulatedRun, simulate_run, verdict_of
from ablate.launch.execute import (
    EvalWatch,
    Obtained,
    ProgressFn,
    Request,
    SayFn,
    obtain_each,
    obtain_with,
    say_done,
    split_done,
)


def simulated_parameters(spec: RunSpec) -> int:
    """The parameter count a simulated run reports: 12·layers·d² + vocab·d (embeddings and
    blocks of a GPT-style model; a formula, not a built model)."""
    model = spec.config.model
    vocab = spec.config.runtime.simulate.vocab_size
    return 12 * model.n_layers * model.d_model**2 + vocab * model.d_model


def metrics_of(spec: RunSpec, run: SimulatedRun) -> pd.DataFrame:
    """The run's metrics.csv rows, as a trained run writes them (built by column: a frame of
    row dicts took about a fifth of a simulated run's time)."""
    cfg = spec.config
    per_step = cfg.tokens_per_step()
    step_s = per_step / cfg.runtime.simulate.tokens_per_s
    steps = np.array([int(row["step"]) for row in run.steps], dtype=np.int64)
    columns = {
        "step": steps,
        "tokens": steps * per_step,
        "train_loss": np.array([row["train_loss"] for row in run.steps], dtype=float),
        "lr": np.full(len(steps), cfg.train.lr),
        "grad_norm": np.full(len(steps), math.nan),
        "step_time_s": np.full(len(steps), step_s),
        "elapsed_s": steps * step_s,
    }
    evaluated = dict(run.evals)
    columns["val_loss"] = np.array([evaluated.get(int(step), math.nan) for step in steps])
    return pd.DataFrame(columns, columns=[*folders.METRIC_COLUMNS, "val_loss"])


def summary_of(spec: RunSpec, run: SimulatedRun, frame: pd.DataFrame, wall_s: float) -> RunRecord:
    """The run's record: every key a trained run's has, from the simulation."""
    cfg = spec.config
    sim = cfg.runtime.simulate
    verdict = verdict_of(cfg, run)
    val = frame["val_loss"].dropna()
    steps = int(frame["step"].max()) if len(frame) else 0
    train_time = float(frame["step_time_s"].sum())
    initial = math.log(sim.vocab_size)
    diverged = run.stop if run.status == "diverged" else None
    return RunRecord(
        **spec.summary_keys(),
        status=run.status,
        stable=verdict.stable if verdict else None,
        unstable_reason=verdict.reason if verdict else None,
        unstable_step=verdict.step if verdict else None,
        final_val_loss=float(val.iloc[-1]) if len(val) else None,
        best_val_loss=float(val.min()) if len(val) else None,
        final_test_loss=None,  # the simulator models no test split
        best_test_loss=None,
        final_train_loss=(
            float(frame["train_loss"].tail(store.FINAL_TRAIN_WINDOW).mean()) if len(frame) else None
        ),
        diverged_step=diverged.step if diverged else None,
        diverged_reason=diverged.reason if diverged else None,
        stopped_reason=run.stop.reason if run.stop else None,
        steps=steps,
        planned_steps=cfg.steps(),
        tokens=steps * cfg.tokens_per_step(),
        planned_tokens=cfg.steps() * cfg.tokens_per_step(),
        n_params=simulated_parameters(spec),
        vocab_size=sim.vocab_size,
        initial_loss=initial,
        unigram_loss=sim.unigram_loss,
        entropy_floor=None,
        tokens_per_byte=None,
        divergence_threshold=run.threshold,
        norm_kind=cfg.model.norm_kind(),
        norm_placement=cfg.model.norm_placement(),
        norm_impl=SIMULATED_IMPL,
        kernel_target=None,
        torch_version=None,
        torch_threads=None,
        cpu_capability=None,
        wall_time_s=wall_s,
        train_time_s=train_time,
        tokens_per_s=sim.tokens_per_s if steps else None,
        step_time_median_s=float(frame["step_time_s"].median()) if len(frame) else None,
        peak_memory_mb=None,
        memory_kind=None,
        probe_steps=0,
        nonfinite_activations=0,
        nonfinite_grads=0,
        init_digest=None,
        data_digest=None,
        error=None,
    )


def take_the_pace(spec: RunSpec, steps: int) -> None:
    """Sleep the share of ``runtime.simulate.pace_s`` that ``steps`` of the planned steps take
    (a run stopped early takes less), so a run can be killed or interrupted while it lasts."""
    pace = spec.config.runtime.simulate.pace_s
    if pace > 0:
        time.sleep(pace * steps / max(spec.config.steps(), 1))


def simulate_and_store(
    spec: RunSpec, root: Path, watch: EvalWatch | None = None, take_over: bool = False
) -> RunRecord:
    """Claim the run, simulate it, write its folder as a trained run would; its record."""
    start = time.perf_counter()
    with store.claimed_run(root, spec, take_over) as folder:
        folders.write_json_atomic(
            folder.env, {"backend": "simulate", "hostname": platform.node(), "pid": os.getpid()}
        )
        run = simulate_run(spec.config, spec.variant, spec.seed, spec.run_id, watch)
        frame = metrics_of(spec, run)
        take_the_pace(spec, int(frame["step"].max()) if len(frame) else 0)
        folders.write_frame_atomic(folder.metrics, frame)
        folders.write_frame_atomic(folder.probes, pd.DataFrame(columns=folders.PROBE_COLUMNS))
        return folder.write_record(summary_of(spec, run, frame, time.perf_counter() - start))


@dataclass
class SimulatedExecutor:
    """Runs drawn from the truth, one after another in this process (each takes milliseconds)."""

    imports: ClassVar[tuple[str, ...]] = ()  # its study workers train nothing themselves
    root: Path
    console: Console | None = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "console": None}

    def prepare(self) -> None:
        """Nothing to load."""

    def obtain(
        self,
        request: Request,
        wait: bool = False,
        say: SayFn = print,
        progress: ProgressFn | None = None,
    ) -> RunRecord:
        """The stored record of the request's run, else simulate and store it (a simulated
        run reports no steps: ``progress`` is not called)."""
        spec = request.spec
        attempt = lambda: simulate_and_store(spec, self.root, request.watch, request.take_over)  # noqa: E731
        return obtain_with(attempt, spec, self.root, wait, say)

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        """Each request in turn (a simulated run takes milliseconds)."""
        return obtain_each(self, requests, say)

    def run(self, specs: list[RunSpec]) -> list[RunRecord]:
        """Every spec not yet stored, simulated; the records of all."""
        done, pending = split_done(specs, self.root)
        if self.console is not None:
            say_done(self.console, len(done), len(pending), self.root)
        summaries = list(done)
        claimed = 0
        for spec in pending:
            try:
                summaries.append(self.obtain(Request(spec)))
            except store.RunClaimed:
                claimed += 1
        if pending and self.console is not None:
            said = f"simulated {len(pending) - claimed} runs"
            if claimed:
                said += f"; skipped {claimed} that another process claimed or finished"
            self.console.print(said, markup=False, highlight=False)
        return summaries
