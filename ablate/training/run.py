"""One run: build the corpus, the batch order and the model; train; store the run's folder.

:func:`execute_run` is the only entry point the executor calls. It claims the run, writes its
folder (:class:`ablate.core.folders.RunFolder`) and returns the summary
(:mod:`ablate.training.summary`). Divergence is a result (``status: diverged``); an exception
inside training is stored as ``failed`` with the error; Ctrl-C stores ``interrupted`` and
re-raises; a search's pruner stops a trial as ``pruned``; a run held at ``runtime.pause_step``
(the curve's early stop) is stored as ``paused`` with its checkpoint. The stability verdict
(:mod:`ablate.core.stability`) is recorded with every run, and so are the probes, the peak
memory and the Lightning loggers' files. A run cut by Ctrl-C or SIGTERM keeps its last
checkpoint (``runtime.checkpoint_minutes``): trained again, it resumes there and stores what the
uninterrupted run would have, plus ``resumed_from_step``; stored with any other status, it loses
its checkpoint and status.json just before its summary is written, the run's last file.
"""

from __future__ import annotations

import math
import os
import platform
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import lightning as L
import pandas as pd
import torch
from torch import nn

from ablate.core import folders, store
from ablate.core.folders import RunFolder
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.nn.model import (
    parameter_digests,
    shared_init_digest,
)
from ablate.training.callbacks import (
    Checkpointer,
    DivergenceMonitor,
    EarlyStop,
    MetricsRecorder,
    PeakMemory,
    ProgressFn,
)
from ablate.training.data import (
    batch_digest,
)
from ablate.training.prepare import Prepared, prepare
from ablate.training.probes import ModelProbe
from ablate.training.summary import Observed, environment, summarize
from ablate.training.task import LanguageModelTask, RunData
from ablate.training.trainer import (
    RankZeroHandBack,
    build_trainer,
    evaluate_final,
    fit,
    metrics_frame,
)

WEIGHTS_GROUPS = ("main", "convert")
KEEPS_CHECKPOINT = ("interrupted", "paused")


def save_weights(model: nn.Module, path: Path) -> None:
    """The model's state_dict, written to a temporary name and renamed (never half a file)."""
    folders.write_atomic(path, lambda tmp: torch.save(model.state_dict(), tmp))


def execute_run(
    spec: RunSpec,
    root: Path,
    progress: ProgressFn | None = None,
    stoppers: Sequence[EarlyStop] = (),
    take_over: bool = False,
) -> RunRecord:
    """Train ``spec`` into its folder under ``root`` (``<experiment>/<run_id>/``) and return its
    record.

    ``stoppers`` are extra early-stop callbacks (the search's pruner); divergence is built in.
    The run is claimed first (:func:`ablate.core.store.claim_run`, ``take_over`` passed on): a run
    another live process is training raises :class:`ablate.core.store.RunClaimed`, and one that
    finished meanwhile is not trained again.
    """
    with store.claimed_run(root, spec, take_over) as run:  # RunClaimed: another process has it
        return _train_and_store(spec, run, progress, stoppers)


def _train_and_store(
    spec: RunSpec,
    run: RunFolder,
    progress: ProgressFn | None,
    stoppers: Sequence[EarlyStop],
) -> RunRecord:
    """The body of :func:`execute_run`, under the run's claim, into its emptied folder."""
    start = time.perf_counter()
    folders.write_json_atomic(
        run.status,
        {"status": "running", "pid": os.getpid(), "hostname": platform.node()},
    )
    torch.manual_seed(spec.seed)
    prepared = prepare(spec, run.experiment)
    folders.write_json_atomic(run.env, environment(spec))
    folders.write_json_atomic(run.init_params, parameter_digests(prepared.model))
    digests = (
        shared_init_digest(prepared.model),
        batch_digest(prepared.corpus, prepared.train_offsets),
    )
    cfg = spec.config
    criterion = cfg.train.stability
    monitor = DivergenceMonitor(
        criterion, math.log(prepared.corpus.vocab_size), cfg.train.warmup_steps
    )
    all_stoppers = [monitor, *stoppers]
    recorder = MetricsRecorder(
        cfg.tokens_per_step(), progress, log_every=cfg.runtime.log_every_n_steps
    )
    observed = Observed(
        ModelProbe(cfg.train.probes.interval, cfg.train.probes.attention), PeakMemory(), monitor
    )
    every = cfg.runtime.checkpoint_steps, cfg.runtime.checkpoint_minutes * 60
    checkpointer = Checkpointer(run.checkpoint, *every, start, cfg.runtime.pause_step)
    observers = [recorder, observed.probe, observed.memory, checkpointer, *all_stoppers]
    handback = RankZeroHandBack(observers, run.handback)
    trainer = build_trainer(spec, prepared.steps, [*observers, handback], run)
    task = LanguageModelTask(prepared.model, cfg.train, prepared.steps)
    data = RunData(
        prepared.corpus,
        prepared.train_offsets,
        prepared.val_offsets,
        cfg.model.seq_len,
        prepared.test_offsets,
    )
    on_interrupt = signal.getsignal(signal.SIGINT)  # Lightning ignores Ctrl-C once it got one
    resume = run.checkpoint if run.checkpoint.is_file() else None
    outcome = fit(trainer, task, data, recorder, all_stoppers, handback, resume)
    with ctrl_c_held() as caught:  # the stop of a pool sends a second Ctrl-C: store first
        final = final_split_losses(trainer, prepared, outcome.status, cfg.model.seq_len)
        frame = metrics_frame(recorder)
        folders.write_frame_atomic(run.metrics, frame)
        probes = pd.DataFrame(observed.probe.rows, columns=folders.PROBE_COLUMNS)
        folders.write_frame_atomic(run.probes, probes)
        elapsed = checkpointer.wall_s + time.perf_counter() - start
        summary = summarize(spec, prepared, frame, outcome, observed, elapsed, digests, final)
        if checkpointer.resumed_from is not None:
            resumed = {"resumed_from_step": checkpointer.resumed_from}
            summary = replace(summary, extra={**summary.extra, **resumed})
        if outcome.status == "finished" and cfg.runtime.save_weights:
            if spec.group in WEIGHTS_GROUPS:
                save_weights(prepared.model, run.weights)
        # what a rerun would read instead of the record goes first: a kill before the record
        # leaves a run that is redone, never a stored one beside a stale status or checkpoint
        run.status.unlink(missing_ok=True)
        if outcome.status not in KEEPS_CHECKPOINT:  # a cut or paused run resumes from it
            run.checkpoint.unlink(missing_ok=True)
        summary = run.write_record(summary)
    if outcome.status == "interrupted" or caught:
        if on_interrupt is not None:
            signal.signal(signal.SIGINT, on_interrupt)
        raise KeyboardInterrupt
    return summary


def final_split_losses(
    trainer: L.Trainer, prepared: Prepared, status: str, seq_len: int
) -> dict[str, float]:
    """The finished model's loss on the whole val split and, where there is one, the whole test
    split (``train.final_eval: split``; a second or so each, under the caller's Ctrl-C hold, so
    that Ctrl-C keeps the run); empty when evaluation windows decide the final losses."""
    if status != "finished":
        return {}
    corpus, losses = prepared.corpus, {}
    if prepared.final_offsets is not None:
        losses["val"] = evaluate_final(
            trainer, prepared.model, corpus.val, prepared.final_offsets, seq_len
        )
    if corpus.test is not None and prepared.final_test_offsets is not None:
        losses["test"] = evaluate_final(
            trainer, prepared.model, corpus.test, prepared.final_test_offsets, seq_len
        )
    return losses


@contextmanager
def ctrl_c_held() -> Iterator[list[int]]:
    """Hold Ctrl-C off while a run's files are written; the list says whether one came.

    Lightning's teardown puts back the SIGINT handler it found, so after an interrupted fit a
    second Ctrl-C (``ablate`` stopping its pool sends one to every worker) would cut the
    storing of the interrupted run and lose it. Off the main thread nothing changes.
    """
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)
