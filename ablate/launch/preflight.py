"""The one pre-flight step, before any stage: :func:`preflight` checks, in this order, that

1. every variant's corpus loads and every litgpt or python model builds (:func:`check_inputs`:
   a missing or bad data file, an unknown litgpt name or field, a factory that does not import
   or returns the wrong shape);
2. the stored runs of the experiment trained on the data its variants name now
   (:func:`ablate.launch.freshness.check_stored_data`);
3. the studies' storage opens, for a file with a search, max-LR probes or a curve
   (:func:`ablate.launch.storage.check_storage_opens`);

each failure one line and exit 2 before anything is written. A simulated experiment reads no
data and builds no model: only its storage is checked. ``ablate validate`` checks the inputs
through its estimate (:func:`ablate.launch.estimate.describe_plan`).

Where runs share a GPU (``runtime.runs_per_device``), whether they fit is checked as the
executor's pool starts (:func:`check_fit`), where the GPUs it has are known. The corpora and
model builders (torch), and Optuna, are imported by the check that needs them, so importing
this module loads neither, and a simulated experiment never loads torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ablate.core.config import RunConfig
from ablate.core.errors import ConfigError, DataError
from ablate.core.experiment import Experiment
from ablate.launch.devices import CONTEXT_MB, Measured, fit_error, shape_key
from ablate.launch.resources import Resources
from ablate.launch.workers import in_worker, sigint_deferred, worker_pool

if TYPE_CHECKING:
    from ablate.training.data import Corpus


def preflight(experiment: Experiment, results_dir: Path, storage: str | None) -> None:
    """Every check above, once, before the first stage."""
    if experiment.base.runtime.backend != "simulate":
        from ablate.launch.freshness import check_stored_data

        check_stored_data(experiment, results_dir, check_inputs(experiment))
    if studies_configured(experiment):
        from ablate.launch.storage import check_storage_opens

        check_storage_opens(experiment, results_dir, storage)


def studies_configured(experiment: Experiment) -> bool:
    """Whether the file has an Optuna study: a search, max-LR probes or a curve."""
    return any(s is not None for s in (experiment.search, experiment.max_lr, experiment.curve))


def check_corpora(experiment: Experiment) -> dict[str, Corpus]:
    """Load every variant's corpus once; a bad source raises DataError with one line that names
    the experiment file and the variant."""
    from ablate.training.data import load_corpus

    cache: dict[str, Corpus] = {}
    corpora = {}
    for name, cfg in experiment.variants.items():
        key = f"{cfg.data.model_dump_json()}|{cfg.model.seq_len}"
        if key not in cache:
            try:
                cache[key] = load_corpus(cfg.data, cfg.model.seq_len)
            except DataError as exc:
                raise DataError(f"{experiment.path}: variants.{name}: {exc}") from None
        corpora[name] = cache[key]
        check_epochs(experiment, cfg, corpora[name], f"{experiment.path}: variants.{name}")
    return corpora


STAGE_BUDGETS = ("sweep", "search", "curve", "max_lr")  # sections with a tokens: of their own


def check_epochs(experiment: Experiment, cfg: RunConfig, corpus: Corpus, where: str) -> None:
    """Refuse a token file, shard set or text dataset too small for a budget: a run (of the
    main runs or of a stage with ``tokens:`` of its own) that would read its training ids more
    than once (windows are drawn at random, so more than one epoch of them repeats what the
    model saw), saying how many epochs the plan would read."""
    if cfg.data.source not in ("tokens_file", "text_dataset"):
        return
    budgets = {"train.tokens": cfg.train.tokens}
    for name in STAGE_BUDGETS:
        section = getattr(experiment, name, None)
        if section is not None and section.tokens is not None:
            budgets[f"{name}.tokens"] = section.tokens
    for key, tokens in budgets.items():
        read = tokens // cfg.tokens_per_step() * cfg.tokens_per_step()
        if read > len(corpus.train):
            raise DataError(
                f"{where}: data.path: {key} {read:,} would read its {len(corpus.train):,} "
                f"training ids {read / len(corpus.train):.2f} times over (epochs); give more "
                f"data or fewer {key}"
            )


def check_models(experiment: Experiment, corpora: dict[str, Corpus]) -> None:
    """Build each litgpt or python model once (ablate's own are checked by the schema); a model
    its source cannot build raises ConfigError with one line naming the file and variant."""
    from ablate.nn.sources import ModelSourceError, build_model

    seen: set[str] = set()
    for name, cfg in experiment.variants.items():
        vocab = corpora[name].vocab_size
        key = f"{cfg.model.model_dump_json()}|{vocab}"
        if cfg.model.source == "ablate" or key in seen:
            continue
        seen.add(key)
        try:
            build_model(cfg.model, vocab, seed=0)
        except ModelSourceError as exc:
            raise ConfigError(f"{experiment.path}: variants.{name}: {exc}") from None


def check_inputs(experiment: Experiment) -> dict[str, Corpus]:
    """:func:`check_corpora`, then :func:`check_models`; the corpora by variant."""
    corpora = check_corpora(experiment)
    check_models(experiment, corpora)
    return corpora


MEASURED_STEPS = 3  # training steps of the memory measurement (the first one warms up)


def step_memory(cfg: RunConfig) -> Measured:
    """In a worker that sees one GPU: train :data:`MEASURED_STEPS` steps of ``cfg``'s model
    there; the allocator's reserved peak plus a CUDA context, and the device's free memory
    with this process's context given back (it ends before the runs start)."""
    import torch

    from ablate.nn.sources import build_model
    from ablate.training.data import load_corpus
    from ablate.training.timing import time_steps

    device = torch.device("cuda", 0)
    free_before, _ = torch.cuda.mem_get_info(device)
    corpus = load_corpus(cfg.data, cfg.model.seq_len)
    model = build_model(cfg.model, corpus.vocab_size, seed=0).to(device)
    torch.cuda.reset_peak_memory_stats(device)
    time_steps(model, cfg, corpus, MEASURED_STEPS, device)
    peak = torch.cuda.max_memory_reserved(device) / 2**20
    return Measured(peak + CONTEXT_MB, free_before / 2**20 + CONTEXT_MB)


_MEASURED: dict[str, Measured] = {}  # each run shape's GPU memory, measured once per process


def check_fit(configs: list[RunConfig], gpus: tuple[str, ...], threads: int) -> None:
    """Raise :class:`ConfigError` where ``runtime.runs_per_device`` runs of any of
    ``configs``'s shapes would not fit the first GPU's free memory; each shape is measured once
    per process, in a worker of its own (:func:`step_memory`), so that this process never holds
    a CUDA context."""
    for cfg in configs:
        per_device = cfg.runtime.runs_per_device
        if per_device == 1 or not gpus:
            continue
        key = shape_key(cfg)
        if key not in _MEASURED:
            with worker_pool(Resources(1, threads, gpus[:1])) as pool:
                with sigint_deferred():
                    future = pool.submit(in_worker, step_memory, cfg)
                _MEASURED[key] = future.result()
        if (error := fit_error(per_device, _MEASURED[key], gpus[0])) is not None:
            raise ConfigError(error)
