"""Stored runs never outlive their inputs: a run is reused only if it trained on the data the
experiment file names now.

A run is found by its id, which hashes the data *section* (a path, a tokenizer), not the data.
Before anything trains, every finished run stored for the experiment whose data section one of
the file's variants still uses has its recorded ``data_digest`` (the corpus's ids and the batch
table, :func:`ablate.training.data.batch_digest`) recomputed from the corpus as it is now. A
mismatch (the text file was edited, a token file replaced, another Python's built-in text) is
refused with one line and exit 2: those results describe other data, and nothing is deleted.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ablate.core.errors import DataError
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.training.data import Corpus, expected_data_digest


def data_key(data: dict, seq_len: int) -> str:
    """What a corpus depends on: the data section (as JSON) and the window length."""
    return f"{sorted(data.items())}|{seq_len}"


class StaleRun(NamedTuple):
    """A finished run whose data is no longer the file's: its id, the ``data_digest`` it
    stored and the digest of the corpus as it is now."""

    run_id: str
    stored: str
    now: str


class StaleDataError(DataError):
    """Stored runs trained on data other than what the file names now: which (``stale``)."""

    def __init__(self, message: str, stale: list[StaleRun]) -> None:
        super().__init__(message)
        self.stale = stale


def stale_runs(folder: ExperimentFolder, corpora: dict[str, Corpus]) -> list[StaleRun]:
    """Each finished run whose data section is in ``corpora`` (by :func:`data_key`) and whose
    batches were drawn from other ids."""
    stale = []
    for run in folder.runs():
        record, stored = run.read_record(), run.read_config()
        if not record or not stored or not record.data_digest:
            continue
        spec = RunSpec.from_json(stored)
        corpus = corpora.get(data_key(stored["config"]["data"], spec.config.model.seq_len))
        if corpus is None:
            continue
        now = expected_data_digest(spec, corpus)
        if now != record.data_digest:
            stale.append(StaleRun(spec.run_id, record.data_digest, now))
    return stale


def check_stored_data(
    experiment: Experiment, results_dir: Path, corpora: dict[str, Corpus]
) -> None:
    """Raise :class:`StaleDataError` when stored runs of ``experiment`` trained on data other
    than what its variants (``corpora`` by variant) name now."""
    by_key = {
        data_key(cfg.data.model_dump(mode="json"), cfg.model.seq_len): corpora[name]
        for name, cfg in experiment.variants.items()
    }
    folder = ExperimentFolder.of(results_dir, experiment.name)
    stale = stale_runs(folder, by_key)
    if stale:
        run_id, then, now = stale[0]
        raise StaleDataError(
            f"{experiment.path}: data: {len(stale)} stored run(s) in {folder.path} trained on "
            f"other data than the file names now (run {run_id}: data_digest {then}, now {now}); "
            "move that folder aside, or delete those runs, to train on the new data",
            stale,
        )
