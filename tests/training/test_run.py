"""One run end to end on a tiny model: fairness, determinism, divergence and the stored files."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import REPO, tiny_config

from ablate.core import store
from ablate.core.folders import RunFolder
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec, with_train
from ablate.core.stability import IMPROVING_DROP, DivergenceRule, Instability, run_verdict
from ablate.training.prepare import prepare
from ablate.training.run import ctrl_c_held, execute_run
from ablate.training.trainer import evaluate


def _spec(variant: str = "layernorm", seed: int = 0, **overrides) -> RunSpec:
    return RunSpec("tiny", variant, seed, tiny_config(**{"model.norm.kind": variant, **overrides}))


@pytest.fixture(scope="module")
def ab_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("results")
    return {
        "ln": execute_run(_spec("layernorm"), root),
        "rms": execute_run(_spec("rmsnorm"), root),
        "ln_again": execute_run(_spec("layernorm"), root / "again"),
        "root": root,
    }


@pytest.mark.trains
def test_summary_contract_and_files(ab_runs: dict) -> None:
    summary = ab_runs["ln"]
    assert set(summary.to_json()) == set(store.SUMMARY_KEYS)  # the contract, exactly
    assert summary.status == "finished" and summary.diverged_step is None
    assert summary.tokens == 20 * 4 * 16
    assert summary.final_val_loss < math.log(256)
    run_dir = ab_runs["root"] / "tiny" / summary.run_id
    names = {p.name for p in run_dir.iterdir()}
    assert names == {
        "config.json",
        "env.json",
        "init_params.json",
        "metrics.csv",
        "probes.csv",
        "logs",
        "model.pt",
        "summary.json",
    }
    weights = torch.load(run_dir / "model.pt", weights_only=True)
    model = prepare(_spec("layernorm")).model
    assert set(weights) == set(model.state_dict())
    assert not torch.equal(weights["blocks.0.attn.qkv.weight"], model.blocks[0].attn.qkv.weight)
    assert summary.memory_kind == "process_peak_rss" and summary.peak_memory_mb > 50
    assert summary.probe_steps == 2 and summary.nonfinite_activations == 0  # steps 1, 20
    env = json.loads((run_dir / "env.json").read_text())
    assert env["torch"] == torch.__version__ and env["precision"] == "32"
    assert env["torch_threads"] == torch.get_num_threads()  # the run trained in this process
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert list(metrics["step"]) == list(range(1, 21))
    assert list(metrics.dropna(subset=["val_loss"])["step"]) == [10, 20]
    assert metrics["val_loss"].dropna().iloc[-1] == pytest.approx(summary.final_val_loss)
    assert metrics["train_loss"].tail(10).mean() == pytest.approx(summary.final_train_loss)
    assert (metrics["grad_norm"] > 0).all() and (metrics["step_time_s"] > 0).all()
    assert metrics["elapsed_s"].is_monotonic_increasing
    assert metrics["elapsed_s"].iloc[-1] >= metrics["step_time_s"].sum()
    assert summary.step_time_median_s == pytest.approx(metrics["step_time_s"].median())
    assert metrics["lr"].iloc[0] == pytest.approx(3e-3 / 3)  # first warmup step


@pytest.mark.trains
def test_norm_variants_share_init_batches_and_budget(ab_runs: dict) -> None:
    ln, rms = ab_runs["ln"], ab_runs["rms"]
    assert ln.init_digest == rms.init_digest
    assert ln.data_digest == rms.data_digest
    assert ln.tokens == rms.tokens
    assert ln.n_params - rms.n_params == 3 * 16  # LayerNorm's biases


@pytest.mark.trains
def test_same_config_and_seed_gives_an_identical_loss_curve(ab_runs: dict) -> None:
    root = ab_runs["root"]
    first = pd.read_csv(root / "tiny" / ab_runs["ln"].run_id / "metrics.csv")
    second = pd.read_csv(root / "again" / "tiny" / ab_runs["ln_again"].run_id / "metrics.csv")
    pd.testing.assert_series_equal(first["train_loss"], second["train_loss"])
    pd.testing.assert_series_equal(first["val_loss"], second["val_loss"])


def test_other_seed_changes_init_and_batches() -> None:
    a, b = prepare(_spec(seed=0)), prepare(_spec(seed=1))
    assert not torch.equal(a.train_offsets, b.train_offsets)
    assert not torch.equal(a.model.tok_emb.weight, b.model.tok_emb.weight)
    c = prepare(_spec(seed=1, **{"data.seed": 0}))  # pin the data seed: batches follow it
    assert torch.equal(a.train_offsets, c.train_offsets)


@pytest.mark.trains
def test_huge_learning_rate_diverges_as_a_result_not_a_crash(tmp_path: Path) -> None:
    spec = _spec(**{"train.lr": 50.0, "train.grad_clip": None, "train.tokens": 4 * 16 * 200})
    summary = execute_run(spec, tmp_path)
    assert summary.status == "diverged"
    assert summary.steps == summary.diverged_step  # stopped right there
    # the stored losses, replayed through the criterion, diverge at the stored step for the
    # stored reason
    losses = pd.read_csv(tmp_path / "tiny" / spec.run_id / "metrics.csv")["train_loss"]
    rule = DivergenceRule(
        spec.config.train.stability, math.log(256), spec.config.train.warmup_steps
    )
    stop = next(s for s in map(rule.check, losses.index + 1, losses) if s is not None)
    assert (stop.step, stop.reason) == (summary.diverged_step, summary.diverged_reason)
    assert summary.unstable_reason == f"diverged: {stop.reason}"
    assert summary.divergence_threshold == pytest.approx(rule.threshold)
    assert RunFolder(tmp_path / "tiny" / spec.run_id).is_done()


def _smoke_file_spec(**train: object) -> RunSpec:
    experiment = load_experiment(REPO / "experiments" / "smoke.yaml")
    return RunSpec("smoke", "layernorm", 0, with_train(experiment.variants["layernorm"], **train))


@pytest.mark.trains
def test_warmup_0_at_lr_1e_3_on_the_smoke_model_is_stable(tmp_path: Path) -> None:
    summary = execute_run(_smoke_file_spec(lr=1e-3, warmup_steps=0), tmp_path)
    metrics = pd.read_csv(tmp_path / "smoke" / summary.run_id / "metrics.csv")
    first = float(metrics["train_loss"].iloc[0])
    assert first > math.log(256)  # the untrained model starts above ln(vocab) ...
    assert summary.divergence_threshold == pytest.approx(first + 0.5)  # ... and is judged so
    assert summary.status == "finished" and summary.stable is True
    assert summary.final_val_loss < summary.unigram_loss - 0.1


@pytest.mark.trains
def test_a_run_at_too_small_an_lr_has_not_learned_yet(tmp_path: Path) -> None:
    spec = _smoke_file_spec(lr=1e-4, warmup_steps=0)
    summary = execute_run(spec, tmp_path)
    assert summary.status == "finished" and summary.stable is False
    assert summary.final_val_loss >= summary.unigram_loss - 0.1  # not below the line
    # the stored evaluations, replayed through the criterion: still falling at its end, not a
    # collapse, for the stored reason
    val = pd.read_csv(tmp_path / "smoke" / summary.run_id / "metrics.csv")["val_loss"].dropna()
    losses = (summary.initial_loss, summary.unigram_loss)
    verdict = run_verdict("finished", None, list(val), spec.config.train.stability, losses, 0)
    assert verdict is not None and verdict.kind is Instability.NOT_LEARNED_YET
    assert verdict.miss is not None and verdict.miss.drop > IMPROVING_DROP
    assert summary.unstable_reason == verdict.reason


@pytest.mark.trains
def test_a_run_clears_its_status_and_checkpoint_before_it_stores_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill between the record and the clean-up left a stored run beside a stale status.json
    and checkpoint (seen once in CI): both go first now, so a kill as the record is written
    leaves a run that is redone, never a stored one with debris."""
    write = RunFolder.write_record
    seen = {}

    def record_after_clean_up(run: RunFolder, record: object) -> object:
        seen[run.path.name] = (run.status.exists(), run.checkpoint.exists())
        return write(run, record)

    monkeypatch.setattr(RunFolder, "write_record", record_after_clean_up)
    spec = _spec(**{"train.tokens": 4 * 16 * 13, "runtime.checkpoint_steps": 5})
    summary = execute_run(spec, tmp_path)
    assert summary.status == "finished"
    assert seen == {spec.run_id: (False, False)}


@pytest.mark.trains
def test_last_step_is_always_evaluated(tmp_path: Path) -> None:
    spec = _spec(**{"train.tokens": 4 * 16 * 13})  # 13 steps, evaluation every 10
    execute_run(spec, tmp_path)
    metrics = pd.read_csv(tmp_path / "tiny" / spec.run_id / "metrics.csv")
    assert list(metrics.dropna(subset=["val_loss"])["step"]) == [10, 13]


@pytest.mark.trains
def test_training_reaches_near_the_synthetic_entropy_floor(tmp_path: Path) -> None:
    spec = RunSpec(
        "syn",
        "v",
        0,
        tiny_config(
            **{
                "data.source": "synthetic",
                "data.synthetic_vocab": 16,
                "data.synthetic_branching": 2,
                "data.synthetic_tokens": 20_000,
                "model.d_model": 32,
                "train.tokens": 8 * 16 * 150,
                "train.batch_size": 8,
                "train.lr": 1e-2,
                "train.eval_interval": 50,
            }
        ),
    )
    summary = execute_run(spec, tmp_path)
    assert summary.entropy_floor is not None
    gap = summary.final_val_loss - summary.entropy_floor
    assert -0.05 < gap < 0.25, summary


@pytest.mark.trains
def test_bf16_mixed_precision_trains(tmp_path: Path) -> None:
    spec = _spec(**{"train.precision": "bf16-mixed"})
    summary = execute_run(spec, tmp_path)
    assert summary.status == "finished" and summary.final_val_loss < math.log(256)
    env = json.loads((tmp_path / "tiny" / spec.run_id / "env.json").read_text())
    assert env["precision"] == "bf16-mixed"


@pytest.mark.trains
def test_fp16_trains_in_fp16_on_a_cpu_too(tmp_path: Path) -> None:
    """16-mixed (fp16 autocast, loss scaling) trains and is neither bf16 nor fp32 in disguise
    (Lightning alone turns 16-mixed on a CPU into bf16-mixed). 16-true runs and breaks at once,
    as pure fp16 with AdamW does: the tiny second moments and eps 1e-8 round to 0 in fp16, so
    the first update divides by zero and the loss of step 2 is NaN: a diverged run, stored."""
    smoke = load_experiment(REPO / "experiments" / "smoke.yaml").variants["layernorm"]
    specs = {  # the smoke model, 60 steps
        precision: RunSpec(
            "smoke", "layernorm", 0, with_train(smoke, tokens=8 * 32 * 60, precision=precision)
        )
        for precision in ("32", "bf16-mixed", "16-mixed", "16-true")
    }
    runs = {precision: execute_run(spec, tmp_path) for precision, spec in specs.items()}
    mixed = runs["16-mixed"]
    assert mixed.status == "finished" and mixed.final_val_loss < math.log(256) - 1
    losses = [runs[p].final_val_loss for p in ("32", "bf16-mixed", "16-mixed")]
    assert len(set(losses)) == 3, losses
    true = runs["16-true"]
    assert (true.status, true.diverged_step) == ("diverged", 2)
    assert true.diverged_reason == "non-finite loss (nan)"
    env = json.loads((tmp_path / "smoke" / true.run_id / "env.json").read_text())
    assert env["precision"] == "16-true"


@pytest.mark.trains
def test_exception_in_training_is_stored_as_failed_and_redone_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ablate.training.task import LanguageModelTask

    def boom(self, batch, batch_idx):  # noqa: ANN001, ANN202
        raise RuntimeError("boom at step 1")

    monkeypatch.setattr(LanguageModelTask, "training_step", boom)
    spec = _spec()
    summary = execute_run(spec, tmp_path)
    assert summary.status == "failed" and "RuntimeError: boom at step 1" in summary.error
    assert not RunFolder(tmp_path / "tiny" / spec.run_id).is_done()


def _smoke_spec(kind: str, placement: str, **overrides) -> RunSpec:
    """A run at the size of experiments/smoke.yaml with this norm kind and placement."""
    from conftest import REPO

    from ablate.core.load import build_run_config, load_experiment
    from ablate.core.overrides import apply_overrides

    base = load_experiment(REPO / "experiments" / "smoke.yaml").base.model_dump(mode="json")
    del base["model"]["norm"]["bias"]  # resolved for the base's kind; let each kind choose
    short = {  # 40 steps at a moderate LR: does it train at all, in every placement
        "train.tokens": 10240,
        "train.lr": 3e-3,
        "train.warmup_steps": 5,
        "train.eval_interval": 10,
    }
    changes = {"model.norm.kind": kind, "model.norm.placement": placement, **short, **overrides}
    config = build_run_config(apply_overrides(base, changes, "test"), "test")
    return RunSpec("smoke", f"{placement}-{kind}", 0, config)


PLACEMENTS = ("pre", "post", "sandwich", "deepnorm")


@pytest.mark.slow
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_every_kind_trains_in_every_placement_at_smoke_size(placement: str, tmp_path: Path) -> None:
    initial = math.log(256)
    for kind in ("layernorm", "rmsnorm", "dyt"):
        summary = execute_run(_smoke_spec(kind, placement), tmp_path)
        assert summary.status == "finished", summary
        assert summary.final_val_loss < initial - 1.0, (kind, summary.final_val_loss)
        assert summary.norm_placement == placement and summary.norm_kind == kind
        assert summary.nonfinite_activations == 0 and summary.nonfinite_grads == 0


@pytest.mark.slow
def test_no_norm_baseline_and_qk_norm_train_at_smoke_size(tmp_path: Path) -> None:
    none = execute_run(_smoke_spec("layernorm", "none"), tmp_path)
    qk = execute_run(_smoke_spec("rmsnorm", "pre", **{"model.norm.qk_norm": True}), tmp_path)
    for summary in (none, qk):
        assert summary.status == "finished" and summary.final_val_loss < math.log(256) - 1
    assert none.norm_impl is None  # no norm ran at all
    plain = prepare(_smoke_spec("rmsnorm", "pre")).model
    assert qk.n_params - sum(p.numel() for p in plain.parameters()) == 2 * 2 * 16


@pytest.mark.trains
def test_bf16_true_feeds_the_norms_bf16_and_the_reduction_setting_matters(tmp_path: Path) -> None:
    runs = {
        fp32: execute_run(
            _spec(**{"train.precision": "bf16-true", "model.norm.fp32_reduction": fp32}), tmp_path
        )
        for fp32 in (True, False)
    }
    assert all(s.status == "finished" for s in runs.values())
    assert runs[True].norm_impl == "torch" and runs[False].norm_impl == "reference"
    assert runs[True].final_val_loss != runs[False].final_val_loss
    weights = torch.load(tmp_path / "tiny" / runs[True].run_id / "model.pt", weights_only=True)
    assert weights["blocks.0.norm_attn.weight"].dtype == torch.bfloat16


@pytest.mark.trains
def test_final_eval_split_scores_the_trained_model_on_the_whole_split(
    ab_runs: dict, tmp_path: Path
) -> None:
    spec = _spec(**{"train.final_eval": "split"})
    assert spec.run_id != _spec().run_id  # another measurement: another run
    assert _spec(**{"train.final_eval": "windows"}).run_id == _spec().run_id  # the default
    summary = execute_run(spec, tmp_path)
    windows = ab_runs["ln"]
    metrics = pd.read_csv(tmp_path / "tiny" / spec.run_id / "metrics.csv")
    before = pd.read_csv(ab_runs["root"] / "tiny" / _spec().run_id / "metrics.csv")
    assert metrics["val_loss"].equals(before["val_loss"])  # training and its curve unchanged
    assert summary.final_val_loss != windows.final_val_loss == metrics["val_loss"].iloc[-1]
    prepared = prepare(spec)
    assert prepared.final_offsets is not None
    prepared.model.load_state_dict(
        torch.load(tmp_path / "tiny" / spec.run_id / "model.pt", weights_only=True)
    )
    recomputed = evaluate(
        prepared.model, prepared.corpus.val, prepared.final_offsets, spec.config.model.seq_len
    )
    assert summary.final_val_loss == pytest.approx(recomputed, abs=1e-6)
    assert summary.final_test_loss is None and "test_loss" not in metrics  # no test split


@pytest.mark.trains
def test_a_test_split_is_scored_at_every_evaluation_and_whole_at_the_end(
    ab_runs: dict, tmp_path: Path
) -> None:
    halves = {"data.val_fraction": 0.05, "data.test_fraction": 0.05, "train.final_eval": "split"}
    spec = _spec(**halves)
    assert _spec(**{"data.test_fraction": 0.0}).run_id == _spec().run_id  # the default
    summary = execute_run(spec, tmp_path)
    metrics = pd.read_csv(tmp_path / "tiny" / spec.run_id / "metrics.csv")
    assert summary.data_digest == ab_runs["ln"].data_digest  # the same training batches
    evals = metrics.dropna(subset=["val_loss"])
    assert evals["test_loss"].notna().all() and len(evals) >= 2
    assert summary.best_test_loss == evals["test_loss"].min()
    assert not evals["test_loss"].equals(evals["val_loss"])  # another split, another loss
    prepared = prepare(spec)
    assert prepared.corpus.test is not None and prepared.final_test_offsets is not None
    prepared.model.load_state_dict(
        torch.load(tmp_path / "tiny" / spec.run_id / "model.pt", weights_only=True)
    )
    seq_len = spec.config.model.seq_len
    whole = evaluate(prepared.model, prepared.corpus.test, prepared.final_test_offsets, seq_len)
    assert summary.final_test_loss == pytest.approx(whole, abs=1e-6)
    last = evaluate(prepared.model, prepared.corpus.test, prepared.test_offsets, seq_len)
    assert evals["test_loss"].iloc[-1] == pytest.approx(last, abs=1e-6)


@pytest.mark.trains
def test_weights_are_stored_only_for_main_runs_with_save_weights(tmp_path: Path) -> None:
    off = _spec(**{"runtime.save_weights": False})
    sweep = RunSpec("tiny", "layernorm", 1, tiny_config(), group="sweep")
    for spec in (off, sweep):
        assert execute_run(spec, tmp_path).status == "finished"
        assert not (tmp_path / "tiny" / spec.run_id / "model.pt").exists()
    assert off.run_id == _spec().run_id  # a runtime setting: same run


DDP_TOLERANCE = 1e-5  # 2 processes vs 1: the same sums, reduced in another order (fp32)


def _metrics(root: Path, spec: RunSpec) -> pd.DataFrame:
    return pd.read_csv(root / "tiny" / spec.run_id / "metrics.csv")


@pytest.mark.slow
def test_two_ddp_processes_match_one_process_on_the_same_global_batch(tmp_path: Path) -> None:
    # 23 steps: evaluations at 10 and 20 inside fit, the last step's in a separate validate
    specs = {
        devices: _spec(**{"runtime.devices": devices, "train.tokens": 4 * 16 * 23})
        for devices in (1, 2)
    }
    summaries = {devices: execute_run(spec, tmp_path) for devices, spec in specs.items()}
    one_spawned = _spec(**{"runtime.strategy": "ddp_spawn", "train.tokens": 4 * 16 * 23})
    alone = execute_run(one_spawned, tmp_path / "spawned")  # 1 process, the path of 2
    assert alone.status == "finished"
    assert abs(alone.final_val_loss - summaries[1].final_val_loss) <= DDP_TOLERANCE
    one, two = summaries[1], summaries[2]
    assert specs[1].run_id != specs[2].run_id  # not bitwise the same run: its own id
    assert one.status == two.status == "finished" and one.steps == two.steps == 23
    assert one.data_digest == two.data_digest and one.init_digest == two.init_digest
    first, second = _metrics(tmp_path, specs[1]), _metrics(tmp_path, specs[2])
    assert list(second.dropna(subset=["val_loss"])["step"]) == [10, 20, 23]
    for column in ("train_loss", "val_loss", "grad_norm"):
        gap = (first[column] - second[column]).abs().max()
        assert gap <= DDP_TOLERANCE, (column, gap)
    assert abs(one.final_val_loss - two.final_val_loss) <= DDP_TOLERANCE
    assert abs(first["train_loss"].iloc[0] - math.log(256)) < 0.5  # a real loss, not zeros
    run_dir = tmp_path / "tiny" / specs[2].run_id
    assert json.loads((run_dir / "env.json").read_text())["processes"] == 2
    assert not list(run_dir.glob("*rank0*"))  # the hand-back file is consumed
    assert len(pd.read_csv(run_dir / "probes.csv")) > 0


@pytest.mark.slow
def test_ddp_processes_stop_a_diverging_run_together(tmp_path: Path) -> None:
    overrides = {"train.lr": 50.0, "train.grad_clip": None, "train.tokens": 4 * 16 * 200}
    one = execute_run(_spec(**overrides), tmp_path)
    two = execute_run(_spec(**overrides, **{"runtime.devices": 2}), tmp_path)
    assert one.status == two.status == "diverged"
    assert two.diverged_step == one.diverged_step == two.steps


def test_ctrl_c_while_a_run_is_stored_is_held_until_it_is() -> None:
    """The pool's stop sends every worker a second Ctrl-C, which Lightning's teardown lets through
    to the job's handler again: it must not cut the storing of the interrupted run."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, interrupt)
    try:
        with ctrl_c_held() as caught:
            os.kill(os.getpid(), signal.SIGINT)
            stored = True  # reached: the Ctrl-C did not raise inside the block
        assert stored and caught == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is interrupt  # the handler is back
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)
