"""Benchmark: the step-time cost of the model probes, runner with and without them, back to back.

Each repetition trains the experiment's first variant twice through
:func:`ablate.training.run.execute_run` on the same weights and batches: once with
``train.probes.interval`` at the file's value (the default 25 unless the file sets it), once with
the probes off (interval 0), alternating which goes first. It prints the training time (the sum of
step times, evaluations excluded) of each, the overhead (with / without − 1) and the final train
losses, which must be equal: the probes only read the model. It also prints a less noisy estimate
from within the probed runs: the extra time of a probe step over the median plain step, times the
share of probe steps.

    python -m ablate.bench.probes experiments/ln_vs_rms.yaml --steps 200 --repeats 3
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import pandas as pd
import torch

from ablate.bench.runner import benchmark_arguments, benchmark_spec
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.training.run import execute_run


def train_time(spec: RunSpec) -> tuple[float, float, pd.DataFrame]:
    """(seconds of training steps, final train loss, per-step metrics) of one scratch run."""
    with tempfile.TemporaryDirectory() as root:
        summary = execute_run(spec, Path(root))
        run = ExperimentFolder.of(Path(root), spec.experiment).run(spec.run_id)
        metrics = pd.read_csv(run.metrics)
    return summary.train_time_s, summary.final_train_loss, metrics


def within_run_overhead(metrics: pd.DataFrame, spec: RunSpec) -> tuple[float, int]:
    """(estimated overhead, probe steps): extra time of probe steps over the median other step."""
    from ablate.training.probes import ModelProbe

    probe = ModelProbe(spec.config.train.probes.interval)
    last = int(metrics["step"].max())
    is_probe = metrics["step"].map(lambda s: probe.due(int(s), last))
    plain = float(metrics.loc[~is_probe, "step_time_s"].median())
    extra = float((metrics.loc[is_probe, "step_time_s"] - plain).sum())
    return extra / (plain * len(metrics)), int(is_probe.sum())


def without_probes(spec: RunSpec) -> RunSpec:
    """The same run with the probes off."""
    config = spec.config.model_copy(deep=True)
    config.train.probes.interval = 0
    return RunSpec(spec.experiment, spec.variant, spec.seed, config)


def main(argv: list[str] | None = None) -> None:
    """Print each pair's training times and the median probe overhead."""
    args = benchmark_arguments(__doc__.splitlines()[0], steps=200).parse_args(argv)
    torch.set_num_threads(args.threads)
    probed = benchmark_spec(args.experiment, args.steps)
    bare = without_probes(probed)
    interval = probed.config.train.probes.interval
    print(
        f"{probed.experiment}/{probed.variant}: {probed.config.steps()} steps, probe interval "
        f"{interval}, {args.threads} thread(s), torch {torch.__version__}"
    )
    train_time(bare)  # warm-up
    overheads, estimates = [], []
    for rep in range(args.repeats):
        order = (probed, bare) if rep % 2 == 0 else (bare, probed)
        timed = {id(spec): train_time(spec) for spec in order}
        (t_on, loss_on, metrics), (t_off, loss_off, _) = timed[id(probed)], timed[id(bare)]
        overheads.append(t_on / t_off - 1)
        estimate, n_probes = within_run_overhead(metrics, probed)
        estimates.append(estimate)
        print(
            f"rep {rep}: with probes {t_on:.2f}s ({n_probes} probe steps, loss {loss_on:.4f}) | "
            f"without {t_off:.2f}s (loss {loss_off:.4f}) | overhead {overheads[-1]:+.1%}, "
            f"within-run estimate {estimate:+.1%}"
        )
    print(
        f"probe overhead on training time, median of {args.repeats}: back to back "
        f"{statistics.median(overheads):+.1%}, within-run {statistics.median(estimates):+.1%}"
    )


if __name__ == "__main__":
    main()
