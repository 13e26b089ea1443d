"""The curve's early stop: at ``curve.stop_step`` every curve run is held, and the LR points
whose val loss there lies more than ``curve.stop_margin`` nats above the best point's, paired
by seed, stop; the rest train on to the budget.

A point's value at the step is the run's val loss at that evaluation, an unstable one counted
as min(loss, ℓ0) and a run that diverged before it as ℓ0, as every stage selects
(:func:`ablate.core.stability.clipped_loss`). Its gap is the mean over the seeds it shares with
the best point (the lowest mean) of its value minus the best's on the same seed. Only a gap
stops a point, never a rank: on the real curves stored with the reports the best point at step
64 of 256 is not the best at the end in 6 of 10 curves (Marin's ranking flips), while no point
more than 0.15 nats above the best at step 64 ended within ``min_effect`` of the best
(docs/early-stop.md gives the replay; the default experiments stop at 0.15, the field's
default is 0.2).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ablate.core.folders import ExperimentFolder, RunFolder
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.core.stability import Stop, StopKind, clipped_loss

# lr -> seed -> the run's value at the stop step
StepValues = Mapping[float, Mapping[int, float]]


@dataclass(frozen=True)
class PointStop:
    """A point the rule stops: its ``lr`` and its ``gap`` above the best point (nats)."""

    lr: float
    gap: float


def gaps(values: StepValues) -> dict[float, float]:
    """Each point's mean paired gap above the point of the lowest mean value (0 for it); a
    point sharing no seed with the best has none (NaN: it is never stopped)."""
    if not values:
        return {}
    best = min(values, key=lambda lr: statistics.fmean(values[lr].values()))
    found = {}
    for lr, by_seed in values.items():
        shared = sorted(set(by_seed) & set(values[best]))
        found[lr] = (
            statistics.fmean(by_seed[s] - values[best][s] for s in shared) if shared else math.nan
        )
    return found


def points_to_stop(values: StepValues, margin: float) -> list[PointStop]:
    """The points whose gap above the best exceeds ``margin``, by LR."""
    return [PointStop(lr, gap) for lr, gap in sorted(gaps(values).items()) if gap > margin]


def value_at(run: RunFolder, record: RunRecord, step: int) -> float:
    """The run's value at ``step``: its val loss at that evaluation (from its metrics), min(loss,
    ℓ0); ℓ0 where it diverged at or before the step or has no evaluation there."""
    if record.diverged_step is not None and record.diverged_step <= step:
        return record.initial_loss
    frame = run.read_frame(run.metrics)
    if frame is None or "val_loss" not in frame:
        return record.initial_loss
    at = frame.loc[frame["step"] == step, "val_loss"].dropna()
    return clipped_loss(float(at.iloc[0]) if len(at) else None, record.initial_loss)


def stop_of(point: PointStop, step: int, margin: float) -> Stop:
    """The stop a paused run of ``point`` is stored with."""
    return Stop(step, StopKind.FAR_ABOVE, loss=point.gap, threshold=margin)


def held_at(spec: RunSpec, step: int) -> RunSpec:
    """``spec`` held at ``step`` (``runtime.pause_step``): the same run, paused there."""
    runtime = spec.config.runtime.model_copy(update={"pause_step": step})
    return replace(spec, config=spec.config.model_copy(update={"runtime": runtime}))


def step_values(
    specs: list[RunSpec], records: Mapping[str, RunRecord], folder: ExperimentFolder, step: int
) -> dict[str, dict[float, dict[int, float]]]:
    """``{variant: {lr: {seed: value at step}}}`` of the specs with a record (:func:`value_at`)."""
    found: dict[str, dict[float, dict[int, float]]] = {}
    for spec in specs:
        record = records.get(spec.run_id)
        if record is not None:
            value = value_at(folder.run(spec.run_id), record, step)
            found.setdefault(spec.variant, {}).setdefault(spec.config.train.lr, {})[spec.seed] = (
                value
            )
    return found


def stopped_points(
    specs: list[RunSpec],
    records: Mapping[str, RunRecord],
    folder: ExperimentFolder,
    step: int,
    margin: float,
) -> dict[tuple[str, float], PointStop]:
    """``{(variant, lr): stop}`` of every variant's points the rule stops at ``step``."""
    return {
        (variant, point.lr): point
        for variant, values in step_values(specs, records, folder, step).items()
        for point in points_to_stop(values, margin)
    }


HELD_GROUPS = ("curve", "usable", "max_lr")  # the stages whose pruned runs were held at a step


def held_short(record: RunRecord) -> bool:
    """Whether a stage held the run short of its budget: paused at its step, or stopped there
    for good (pruned: a curve run, a walk point held at ``max_lr.walk_step`` or a max-LR probe
    held at ``max_lr.stop_step``)."""
    return record.status == "paused" or (record.status == "pruned" and record.group in HELD_GROUPS)


def result_of(run: RunFolder, spec: RunSpec) -> RunRecord | None:
    """The stored record that is ``spec``'s result: the run's done record, but one the early
    stop held short only for a spec held at the same step. Any other spec of the run (the
    curve trained whole, another stage that needs the same run) trains it on: from its
    checkpoint where it was paused, else from the start."""
    record = run.read_record()
    if record is not None and held_short(record):
        return record if record.steps == spec.config.runtime.pause_step else None
    return record
