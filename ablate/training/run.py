"""One run: build the corpus, the batch order, the model and a Lightning Trainer; fit; store.

:func:`execute_run` is the only entry point the executor calls. It writes the run's folder (see
:mod:`ablate.core.store`) and returns the summary, whose keys are a documented contract (README,
"summary.json"). Divergence is a result (``status: diverged``); an exception inside training is
stored as ``failed`` with the error; Ctrl-C stores ``interrupted`` and re-raises; a search's
pruner stops a trial as ``pruned``. The stability verdict (:mod:`ablate.core.stability`) is recorded
with every run, and so are the probes (``probes.csv``), the peak memory and the Lightning
loggers' files (``logs/``).
"""

from __future__ import annotations

import logging
import math
import os
import platform
import signal
import subprocess
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import pandas as pd
import torch

from ablate.core import folders, store
from ablate.core.config import RunConfig
from ablate.core.folders import RunFolder
from ablate.core.plan import RunSpec
from ablate.core.stability import Verdict, final_loss_verdict
from ablate.nn.convert import convert_weights
from ablate.nn.model import (
    GPT,
    build_model,
    count_parameters,
    name_seed,
    parameter_digests,
    shared_init_digest,
)
from ablate.nn.norms import used_impls
from ablate.training.data import (
    Corpus,
    batch_digest,
    batch_offsets,
    eval_offsets,
    gather_windows,
    load_corpus,
)
from ablate.training.loggers import build_loggers, flatten
from ablate.training.probes import (
    PROBE_COLUMNS,
    DivergenceMonitor,
    EarlyStop,
    MetricsRecorder,
    ModelProbe,
    PeakMemory,
    ProgressFn,
    Stop,
)
from ablate.training.task import LanguageModelTask, RunData

FINAL_TRAIN_WINDOW = 10  # final_train_loss is the mean over this many last steps
WEIGHTS_GROUPS = ("main", "convert")


@dataclass
class Prepared:
    """Everything a run trains on, built deterministically from its spec."""

    corpus: Corpus
    model: GPT
    train_offsets: torch.Tensor
    val_offsets: torch.Tensor
    steps: int
    start: dict[str, Any] | None = None  # continued training: the source and the swap


def prepare(spec: RunSpec, root: Path | None = None) -> Prepared:
    """Corpus, batch order, validation windows and the initialized model of a run.

    A continued-training run (``spec.init_from``) starts from the source run's stored weights
    under ``root``, mapped by :func:`ablate.nn.convert.convert_weights`, and draws its batches from
    a generator of its own (the source's batches are not repeated in order).
    """
    cfg = spec.config
    seq_len, batch = cfg.model.seq_len, cfg.train.batch_size
    corpus = load_corpus(cfg.data, seq_len)
    steps = cfg.steps()
    data_seed = spec.data_seed if spec.init_from is None else name_seed(spec.data_seed, "continue")
    train_offsets = batch_offsets(len(corpus.train), seq_len, batch, steps, data_seed)
    val_offsets = eval_offsets(len(corpus.val), seq_len, batch, cfg.train.eval_batches)
    model = build_model(cfg.model, corpus.vocab_size, spec.seed)
    prepared = Prepared(corpus, model, train_offsets, val_offsets, steps)
    if spec.init_from is not None:
        if root is None:
            raise ValueError("a continued-training run needs the results root of its source")
        prepared.start = start_from_source(spec, prepared, root)
    return prepared


def load_source(spec: RunSpec, root: Path, vocab_size: int) -> tuple[RunSpec, GPT]:
    """The source run's spec and its final model (``model.pt``), or a clear error."""
    source_dir = store.run_folder(root, spec.experiment, str(spec.init_from))
    problem = store.weights_missing(source_dir.path)
    if problem is not None:
        raise ValueError(f"source run {spec.init_from} {problem}: nothing to continue from")
    source_spec = RunSpec.from_json(source_dir.read_config() or {})
    source = GPT(source_spec.config.model, vocab_size)
    source.load_state_dict(torch.load(source_dir.weights, map_location="cpu", weights_only=True))
    return source_spec, source


def start_from_source(spec: RunSpec, prepared: Prepared, root: Path) -> dict[str, Any]:
    """Load, map and measure: the val loss of the source model and right after the swap."""
    source_spec, source = load_source(spec, root, prepared.corpus.vocab_size)
    mapping = convert_weights(source, prepared.model, spec.bias_mapping or "fold")
    seq_len = spec.config.model.seq_len
    return {
        "source_run_id": spec.init_from,
        "source_variant": source_spec.variant,
        "loss_before_swap": evaluate(source, prepared.corpus, prepared.val_offsets, seq_len),
        "loss_after_swap": evaluate(prepared.model, prepared.corpus, prepared.val_offsets, seq_len),
        "params_folded": mapping["folded"],
        "params_dropped": mapping["dropped"],
    }


@torch.no_grad()
def evaluate(model: GPT, corpus: Corpus, val_offsets: torch.Tensor, seq_len: int) -> float:
    """Mean validation loss over the run's fixed windows (as the trainer's evaluation), in fp32."""
    model.eval()
    losses = [
        float(model.loss(gather_windows(corpus.val, offsets, seq_len))) for offsets in val_offsets
    ]
    model.train()
    return sum(losses) / len(losses)


def environment(spec: RunSpec) -> dict[str, Any]:
    """Everything that could differ between two machines running the same spec."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "platform": platform.platform(),
        "processor": platform.machine(),
        "accelerator": spec.config.runtime.accelerator,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "precision": spec.config.train.precision,
        "default_dtype": str(torch.get_default_dtype()),
        "torch_threads": torch.get_num_threads(),
        "processes": spec.config.runtime.processes(),
        "strategy": spec.config.runtime.strategy,
        "git_commit": git_commit(),
        "hostname": platform.node(),
        "pid": os.getpid(),
    }


def git_commit() -> str | None:
    """The commit of the ablate checkout in use, when it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def quiet_lightning() -> None:
    """Silence Lightning's start-up banners and tips; ablate prints its own progress."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def build_trainer(
    spec: RunSpec, steps: int, callbacks: list[L.Callback], run: RunFolder
) -> L.Trainer:
    """A quiet Trainer: no checkpoints, progress bar or summary; ablate records itself.

    The loggers (CSV and those named in ``runtime.loggers``) get the run's configuration now and
    its metrics from the callbacks (:mod:`ablate.training.loggers`).
    """
    cfg = spec.config
    quiet_lightning()
    loggers = build_loggers(spec, run)
    for logger in loggers:
        logger.log_hyperparams(flatten(spec.to_json()))
    runtime = cfg.runtime
    several = runtime.processes() > 1
    return L.Trainer(
        accelerator=runtime.accelerator,
        devices=runtime.devices,
        num_nodes=runtime.num_nodes,
        strategy="ddp_spawn" if several and runtime.strategy == "auto" else runtime.strategy,
        use_distributed_sampler=False,  # RunData gives each process its share of every batch
        precision=cfg.train.precision,
        max_steps=steps,
        max_epochs=1,
        val_check_interval=min(cfg.train.eval_interval, steps),
        num_sanity_val_steps=0,
        logger=loggers,
        log_every_n_steps=cfg.runtime.log_every_n_steps,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )


def metrics_frame(recorder: MetricsRecorder) -> pd.DataFrame:
    """Per-step rows with ``val_loss`` filled at the steps where an evaluation ran."""
    steps = pd.DataFrame(
        recorder.steps,
        columns=["step", "tokens", "train_loss", "lr", "grad_norm", "step_time_s", "elapsed_s"],
    )
    evals = pd.DataFrame(recorder.evals, columns=["step", "val_loss"])
    evals = evals.drop_duplicates("step", keep="last")
    return steps.merge(evals, on="step", how="left")


@dataclass
class Outcome:
    """How training ended: status, the early stop that ended it (if any), the error (if any)."""

    status: str
    stop: Stop | None = None
    error: str | None = None


def verdict_of(
    outcome: Outcome, final_val_loss: float | None, cfg: RunConfig, steps: int, corpus: Corpus
) -> Verdict | None:
    """The stability verdict of a run; None when it cannot be judged (pruned, failed, ...)."""
    if outcome.status == "diverged" and outcome.stop is not None:
        return Verdict(False, f"diverged: {outcome.stop.reason}", outcome.stop.step)
    if outcome.status != "finished":
        return None
    return final_loss_verdict(
        final_val_loss,
        cfg.train.stability,
        math.log(corpus.vocab_size),
        corpus.unigram_loss,
        steps,
    )


@dataclass
class Observed:
    """What the observing callbacks measured besides the per-step metrics."""

    probe: ModelProbe
    memory: PeakMemory
    divergence: DivergenceMonitor


def summarize(
    spec: RunSpec,
    prepared: Prepared,
    frame: pd.DataFrame,
    outcome: Outcome,
    observed: Observed,
    wall_time_s: float,
    digests: tuple[str, str],
) -> dict[str, Any]:
    """The run's summary.json (see the README for each key)."""
    tokens_per_step = spec.config.tokens_per_step()
    steps_done = int(frame["step"].max()) if len(frame) else 0
    val = frame["val_loss"].dropna()
    final_val = float(val.iloc[-1]) if len(val) else None
    train_time = float(frame["step_time_s"].sum())
    initial_loss = math.log(prepared.corpus.vocab_size)
    diverged = outcome.stop if outcome.status == "diverged" else None
    verdict = verdict_of(outcome, final_val, spec.config, steps_done, prepared.corpus)
    return {
        "experiment": spec.experiment,
        "run_id": spec.run_id,
        "family": spec.family,
        "variant": spec.variant,
        "seed": spec.seed,
        "data_seed": spec.data_seed,
        "group": spec.group,
        "lr": spec.config.train.lr,
        "warmup_steps": spec.config.train.warmup_steps,
        "status": outcome.status,
        "stable": verdict.stable if verdict else None,
        "unstable_reason": verdict.reason if verdict else None,
        "unstable_step": verdict.step if verdict else None,
        "final_val_loss": final_val,
        "best_val_loss": float(val.min()) if len(val) else None,
        "final_train_loss": (
            float(frame["train_loss"].tail(FINAL_TRAIN_WINDOW).mean()) if len(frame) else None
        ),
        "diverged_step": diverged.step if diverged else None,
        "diverged_reason": diverged.reason if diverged else None,
        "stopped_reason": outcome.stop.reason if outcome.stop else None,
        "steps": steps_done,
        "planned_steps": prepared.steps,
        "tokens": steps_done * tokens_per_step,
        "planned_tokens": prepared.steps * tokens_per_step,
        "n_params": count_parameters(prepared.model),
        "vocab_size": prepared.corpus.vocab_size,
        "initial_loss": initial_loss,
        "unigram_loss": prepared.corpus.unigram_loss,
        "entropy_floor": prepared.corpus.entropy_floor,
        "divergence_threshold": observed.divergence.threshold,
        "norm_kind": spec.config.model.norm.kind,
        "norm_placement": spec.config.model.norm.placement,
        "norm_impl": ",".join(used_impls(prepared.model)) or None,
        "wall_time_s": wall_time_s,
        "train_time_s": train_time,
        "tokens_per_s": steps_done * tokens_per_step / train_time if train_time > 0 else None,
        "step_time_median_s": float(frame["step_time_s"].median()) if len(frame) else None,
        "peak_memory_mb": observed.memory.peak_mb,
        "memory_kind": observed.memory.kind,
        "probe_steps": observed.probe.probe_steps,
        "nonfinite_activations": observed.probe.nonfinite["activations"],
        "nonfinite_grads": observed.probe.nonfinite["grads"],
        "init_digest": digests[0],
        "data_digest": digests[1],
        "error": outcome.error,
        **(prepared.start or {}),
    }


def evaluate_last_step(
    trainer: L.Trainer,
    task: LanguageModelTask,
    data: RunData,
    recorder: MetricsRecorder,
    spawned: bool,
) -> None:
    """Evaluate the last step when the evaluation cadence did not.

    In-process training: ``trainer.validate``. After ``ddp_spawn`` the model here holds rank
    0's final weights, and a second spawn would restart the loggers' files, so the evaluation
    runs in this process (in the precision plugin's forward context) and is recorded in
    ``metrics.csv`` only, not in the Lightning loggers.
    """
    if not spawned:
        trainer.validate(task, datamodule=data, verbose=False)
        return
    with torch.no_grad(), trainer.precision_plugin.forward_context():
        loss = evaluate(task.model, data.corpus, data.val_offsets, data.seq_len)
    recorder.evals.append({"step": recorder.steps[-1]["step"], "val_loss": loss})


class RankZeroHandBack(L.Callback):
    """Brings the observers' state back from spawned DDP processes.

    Under ``ddp_spawn`` the callbacks that record a run live in the spawned processes; at the
    end of fit or validate rank 0 writes their state (their pickled ``__dict__``) to ``path``,
    and :meth:`restore`, in the process that built them, loads it into the originals.
    """

    def __init__(self, observers: list[L.Callback], path: Path) -> None:
        self.observers = observers
        self.path = path
        self.owner = os.getpid()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if os.getpid() != self.owner:
            quiet_lightning()  # a spawned process starts with Lightning's default logging

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if os.getpid() != self.owner and trainer.is_global_zero:
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            torch.save([cb.__getstate__() for cb in self.observers], tmp)
            os.replace(tmp, self.path)

    def restore(self) -> bool:
        """Load rank 0's state into the observers; whether spawned processes left one."""
        if not self.path.exists():
            return False
        for observer, state in zip(
            self.observers, torch.load(self.path, weights_only=False), strict=True
        ):
            observer.__dict__.update(state)
        self.path.unlink()
        return True


def fit(
    trainer: L.Trainer,
    task: LanguageModelTask,
    data: RunData,
    recorder: MetricsRecorder,
    stoppers: list[EarlyStop],
    handback: RankZeroHandBack,
) -> Outcome:
    """Train, evaluate the last step, and say how it ended; exceptions become outcomes."""
    try:
        trainer.fit(task, datamodule=data)
        spawned = handback.restore()
        if not recorder.evals or recorder.evals[-1]["step"] != recorder.steps[-1]["step"]:
            evaluate_last_step(trainer, task, data, recorder, spawned)  # always the last step
    except (KeyboardInterrupt, SystemExit):
        return Outcome("interrupted")
    except Exception as exc:  # a crash inside training is stored as a failed run
        return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
    for stopper in stoppers:
        if stopper.stop is not None:
            return Outcome(stopper.status, stopper.stop)
    return Outcome("finished")


def save_weights(model: GPT, path: Path) -> None:
    """The model's state_dict, written to a temporary name and renamed (never half a file)."""
    folders.write_atomic(path, lambda tmp: torch.save(model.state_dict(), tmp))


def execute_run(
    spec: RunSpec,
    root: Path,
    progress: ProgressFn | None = None,
    stoppers: Sequence[EarlyStop] = (),
    take_over: bool = False,
) -> dict[str, Any]:
    """Train ``spec`` into ``root/<experiment>/<run_id>/`` and return its summary.

    ``stoppers`` are extra early-stop callbacks (the search's pruner); divergence is built in.
    The run is claimed first (:func:`ablate.core.store.claim_run`, ``take_over`` passed on): a run
    another live process is training raises :class:`ablate.core.store.RunClaimed`, and one that
    finished meanwhile is not trained again.
    """
    exp_dir = store.experiment_dir(root, spec.experiment)
    store.claim_run(exp_dir, spec.run_id, take_over)  # RunClaimed: another process trains it
    try:
        return _train_and_store(spec, root, progress, stoppers)
    finally:
        store.release_run(exp_dir, spec.run_id)


def _train_and_store(
    spec: RunSpec,
    root: Path,
    progress: ProgressFn | None,
    stoppers: Sequence[EarlyStop],
) -> dict[str, Any]:
    """The body of :func:`execute_run`, under the run's claim."""
    start = time.perf_counter()
    run = store.run_folder(root, spec.experiment, spec.run_id)
    if run.is_done():  # another process finished it after this one planned it
        raise store.RunClaimed(f"run {spec.run_id} was finished meanwhile by another process")
    run.reset()
    folders.write_json_atomic(run.config, spec.to_json())
    folders.write_json_atomic(
        run.status,
        {"status": "running", "pid": os.getpid(), "hostname": platform.node()},
    )
    torch.manual_seed(spec.seed)
    prepared = prepare(spec, root)
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
    observers = [recorder, observed.probe, observed.memory, *all_stoppers]
    handback = RankZeroHandBack(observers, run.handback)
    trainer = build_trainer(spec, prepared.steps, [*observers, handback], run)
    task = LanguageModelTask(prepared.model, cfg.train, prepared.steps)
    data = RunData(prepared.corpus, prepared.train_offsets, prepared.val_offsets, cfg.model.seq_len)
    on_interrupt = signal.getsignal(signal.SIGINT)  # Lightning ignores Ctrl-C once it got one
    outcome = fit(trainer, task, data, recorder, all_stoppers, handback)
    frame = metrics_frame(recorder)
    folders.write_frame_atomic(run.metrics, frame)
    folders.write_frame_atomic(run.probes, pd.DataFrame(observed.probe.rows, columns=PROBE_COLUMNS))
    elapsed = time.perf_counter() - start
    summary = summarize(spec, prepared, frame, outcome, observed, elapsed, digests)
    if outcome.status == "finished" and cfg.runtime.save_weights and spec.group in WEIGHTS_GROUPS:
        save_weights(prepared.model, run.weights)
    folders.write_json_atomic(run.summary, summary)
    run.status.unlink(missing_ok=True)
    if outcome.status == "interrupted":
        if on_interrupt is not None:
            signal.signal(signal.SIGINT, on_interrupt)
        raise KeyboardInterrupt
    return summary
