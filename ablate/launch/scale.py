"""An experiment with a ``scale:`` section: every size through the whole pipeline, then the
scaling report.

Each size is an experiment of its own (:func:`ablate.core.load.size_experiment`), named
``<name>.<label>`` and stored in ``results/<name>/<name>.<label>/``, so a size's runs are found
and reused by id like any others: adding a size to the file trains only that size. Under
``scale.tokens_per_parameter`` a size's ``train.tokens`` is that many times the parameter count
of its baseline variant's model. ``results/<name>/scale.json`` lists the sizes; the scaling
report (:mod:`ablate.report.scaling`) goes to ``reports/<name>/``, each size's own report to
``reports/<name>/<name>.<label>/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ablate.core import folders
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.load import size_experiment
from ablate.launch.pipeline import PipelineResult, run_experiment
from ablate.nn.model import count_parameters
from ablate.nn.sources import build_model
from ablate.training.data import load_corpus


@dataclass(frozen=True)
class Size:
    """One resolved size: its label, its experiment, its budget and parameter count."""

    label: str
    experiment: Experiment
    tokens: int
    n_params: int


def parameter_count(experiment: Experiment) -> int:
    """Parameters of the baseline (first) variant's model."""
    config = next(iter(experiment.variants.values()))
    vocab = load_corpus(config.data, config.model.seq_len).vocab_size
    return count_parameters(build_model(config.model, vocab, seed=0))


def resolve_sizes(experiment: Experiment) -> list[Size]:
    """Every size of the ``scale:`` section, with its budget rule applied."""
    scale = experiment.scale
    if scale is None:
        raise ValueError(f"{experiment.name} has no scale: section")
    sizes = []
    for index, size in enumerate(scale.sizes):
        fixed = size_experiment(experiment, index)
        n_params = parameter_count(fixed)
        if scale.tokens_per_parameter is None:
            resolved = fixed
        else:
            tokens = round(scale.tokens_per_parameter * n_params)
            resolved = size_experiment(experiment, index, tokens)
        sizes.append(Size(size.label(), resolved, resolved.base.train.tokens, n_params))
    return sizes


def scale_manifest(experiment: Experiment, sizes: list[Size]) -> dict[str, Any]:
    """``scale.json``: what the scaling report needs to find and label every size."""
    assert experiment.scale is not None
    return {
        "name": experiment.name,
        "description": experiment.description,
        "variants": list(experiment.variants),
        "seeds": experiment.seeds,
        "tokens_per_parameter": experiment.scale.tokens_per_parameter,
        "sizes": [
            {
                "label": size.label,
                "experiment": size.experiment.name,
                "d_model": size.experiment.base.model.d_model,
                "n_layers": size.experiment.base.model.n_layers,
                "n_heads": size.experiment.base.model.n_heads,
                "tokens": size.tokens,
                "n_params": size.n_params,
            }
            for size in sizes
        ],
    }


@dataclass
class ScaleResult:
    """What :func:`run_scaled` did: each size's pipeline result and the scaling report."""

    sizes: dict[str, PipelineResult]
    report: Path

    @property
    def missing(self) -> list[str]:
        """'size: variant seed=N' of every planned run without a result."""
        return [
            f"{label}: {spec.variant} seed={spec.seed}"
            for label, result in self.sizes.items()
            for spec in result.missing
        ]


def run_scaled(
    experiment: Experiment,
    results_dir: Path = Path("results"),
    report_dir: Path = Path("reports"),
    workers: int | None = None,
    threads: int | None = None,
    storage: str | None = None,
    console: Console | None = None,
) -> ScaleResult:
    """Every size, smallest first as the file lists them, then the scaling report."""
    from ablate.report.builder import build_scaling_report  # scipy, matplotlib: at the end

    console = console or Console(stderr=True)
    sizes = resolve_sizes(experiment)
    scale_dir = ExperimentFolder.of(results_dir, experiment.name)
    scale_dir.path.mkdir(parents=True, exist_ok=True)
    folders.write_json_if_changed(scale_dir.scale, scale_manifest(experiment, sizes))
    results = {}
    for i, size in enumerate(sizes, 1):
        console.print(
            f"[bold]size {size.label}[/bold] ({i}/{len(sizes)}): {size.n_params:,} parameters, "
            f"{size.tokens:,} tokens per run"
        )
        results[size.label] = run_experiment(
            size.experiment,
            scale_dir.path,
            report_dir / experiment.name,
            workers,
            threads,
            storage,
            console,
        )
    report = build_scaling_report(scale_dir, report_dir / experiment.name)
    return ScaleResult(results, report)
