"""The report's Set-up section: what was trained, read from the stored runs' configs.

Model shape and parameters, the norm of each variant, the data (source, tokenizer, vocabulary),
the budget (steps x batch x context), optimizer, schedule and precision, each stage's runs and
steps, what decided the bits (torch, threads, CPU capability, the RMSNorm kernel's build) and
what training cost (run time summed; the wall time of each ``ablate run``: ``jobs.csv``).
A variant whose config differs from the baseline's beyond the norm (and the grid's declared
factors) is flagged here and at the top of the report: its differences are not the norm's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import pandas as pd

from ablate.core.overrides import beyond_the_norm, flatten
from ablate.core.simulate import SIMULATED_IMPL
from ablate.core.stages import BY_GROUP, REPORT_ORDER
from ablate.report.load import StoredExperiment
from ablate.report.section import Section

# what the kernel of the versions that did not record it was built with
UNRECORDED_KERNEL = (
    "not recorded (runs of an earlier ablate, whose C++ RMSNorm kernel was built with "
    "-march=native -ffast-math: its bits depend on the CPU that built it)"
)


def variant_configs(stored: StoredExperiment, variants: list[str]) -> dict[str, dict[str, Any]]:
    """Each variant's flat config, from its first stored main run (variants without one are
    left out)."""
    configs = {}
    for variant in variants:
        mine = stored.main[stored.main["variant"] == variant]
        for run_id in mine.sort_values("seed")["run_id"]:
            config = stored.configs.get(run_id)
            if config is not None:
                configs[variant] = flatten(config["config"])
                break
    return configs


def impure(stored: StoredExperiment, variants: list[str]) -> dict[str, list[str]]:
    """Per variant that differs from the baseline beyond the norm and the grid, those keys."""
    configs = variant_configs(stored, variants)
    if variants[0] not in configs:
        return {}
    declared = [key for key, _ in stored.manifest.grid]
    found = {
        name: beyond_the_norm(configs[variants[0]], flat, declared)
        for name, flat in configs.items()
    }
    return {name: keys for name, keys in found.items() if keys}


def impurity_flag(stored: StoredExperiment, variants: list[str]) -> list[str]:
    """The report's top warning, when a variant changes more than the norm."""
    found = impure(stored, variants)
    if not found:
        return []
    listed = "; ".join(f"{name} also changes {', '.join(keys)}" for name, keys in found.items())
    return [
        f"**Not a pure norm comparison:** against {variants[0]}, {listed}. Their differences "
        "below are not the norm's alone, and shared parameters of a different shape do not "
        "start from the same weights.",
        "",
    ]


def simulated_flag(stored: StoredExperiment) -> list[str]:
    """The report's first warning when its runs were simulated, not trained."""
    runs = stored.runs
    if runs.empty or "norm_impl" not in runs or not (runs["norm_impl"] == SIMULATED_IMPL).any():
        return []
    return [
        "**Simulated, not trained:** these runs were drawn by ablate's simulator from the truth "
        "the experiment file states (`runtime.backend: simulate`, docs/simulator.md). They test "
        "the method; they measure no model, and their speed is the simulator's setting.",
        "",
    ]


def _model_text(c: dict[str, Any]) -> str:
    if c["model.source"] == "litgpt":
        return f"litgpt {c.get('model.litgpt.name')}, context {c['model.seq_len']}"
    if c["model.source"] == "python":
        return f"the factory {c['model.factory']}, context {c['model.seq_len']}"
    d_ff = c["model.d_ff"] or 4 * c["model.d_model"]
    blocks = f"{c['model.n_layers']} block{'s' if c['model.n_layers'] != 1 else ''}"
    return (
        f"ablate's GPT: {blocks}, d_model {c['model.d_model']}, "
        f"{c['model.n_heads']} heads, MLP {c['model.mlp']} (d_ff {d_ff}), "
        f"{c['model.position']} positions, context {c['model.seq_len']}, dropout "
        f"{c['model.dropout']}, {'tied' if c['model.tie_weights'] else 'untied'} embeddings"
    )


def files_text(path: str | list[str] | None) -> str:
    """``data.path`` in a line: the file, or a shard set's count, first and last file."""
    if not path:
        return ""
    if isinstance(path, str):
        return f" {path}"
    return f" {len(path)} shards ({path[0]} … {path[-1]})"


def _data_text(c: dict[str, Any], vocab: object) -> str:
    source = c["data.source"]
    where = files_text(c.get("data.path"))
    tokenizer = c["data.tokenizer"]
    if tokenizer == "bpe":
        tokenizer = f"bpe ({c['data.bpe_vocab_size']} ids, trained on the train split)"
    if tokenizer == "file":
        tokenizer = f"from {c['data.tokenizer_file']}"
    if source == "text_dataset":
        source = f"text_dataset (column {c['data.text_column']})"
    test = c.get("data.test_fraction") or 0
    held_out = f", then a held-out test fraction {test}" if test else ""
    validation = (
        f"validation from{files_text(c['data.val_path'])}"
        if c.get("data.val_path")
        else f"validation fraction {c['data.val_fraction']}"
    )
    return f"{source}{where}, tokenizer {tokenizer}, vocabulary {vocab}, {validation}{held_out}"


def _training_text(c: dict[str, Any], steps: object) -> str:
    batch, context = c["train.batch_size"], c["model.seq_len"]
    return (
        f"{steps} steps x batch {batch} x context {context} = {c['train.tokens']:,} tokens; "
        f"AdamW (betas {c['train.beta1']}/{c['train.beta2']}, weight decay "
        f"{c['train.weight_decay']}, eps {c['train.adam_eps']}), gradient clip "
        f"{c['train.grad_clip']}, {c['train.schedule']} schedule to "
        f"{c['train.min_lr_ratio']}x the peak, precision {c['train.precision']}"
    )


def _norm_text(configs: dict[str, dict[str, Any]], main: pd.DataFrame) -> str:
    return "; ".join(
        f"{name}: {c.get('model.norm.kind')} ({c.get('model.norm.placement')}, eps "
        f"{c.get('model.norm.eps')}, bias {c.get('model.norm.bias')}, QK-norm "
        f"{c.get('model.norm.qk_norm')}, ran "
        f"{_recorded(main[main['variant'] == name], 'norm_impl')})"
        for name, c in configs.items()
    )


class StageRuns(NamedTuple):
    """The runs of one stage: its run group, its label (a study's names its variant) and the
    runs."""

    group: str
    label: str
    runs: pd.DataFrame


def stage_runs(stored: StoredExperiment) -> list[StageRuns]:
    """Each stage's runs: the planned ones from the manifest, the warmup studies' by group,
    the other studies' from the runs each names (search trials, max-LR probes)."""
    every = stored.stored_runs
    parts = [
        StageRuns(
            group, group, (every if group in BY_GROUP else stored.runs).query("group == @group")
        )
        for group in REPORT_ORDER
    ]
    for (variant, kind), ids in stored.studies.run_ids().items():
        parts.append(StageRuns(kind, f"{kind} ({variant})", every[every["run_id"].isin(ids)]))
    return [part for part in parts if len(part.runs)]


def _stage_text(stored: StoredExperiment) -> str:
    """Runs and steps of each stage, then the distinct runs they add up to: a run two stages
    share (a main run that is also a sweep point, a probe another variant's bracket reuses)
    is counted once."""
    parts = stage_runs(stored)
    if not parts:
        return ""
    listed = sum(len(part.runs) for part in parts)
    distinct = pd.concat([part.runs for part in parts]).drop_duplicates("run_id")
    shared = f", {listed - len(distinct)} of them in two stages" if listed > len(distinct) else ""
    text = ", ".join(_runs_of(part.label, part.runs) for part in parts)
    return f"{text}; {len(distinct)} distinct runs in all{shared}"


@dataclass(frozen=True)
class Compute:
    """What training cost: the distinct runs the stages use and their own wall time summed
    (``run_minutes``), the store's runs no stage of the plan uses (``unused``), and from
    ``jobs.csv`` the ``ablate run`` invocations (none where the store predates job records):
    their wall time, how many were cut short, the (workers, threads) and (cores, CPU) they ran
    with, the machine's states and the largest share of the cores other work took (NaN: not
    recorded)."""

    runs: int
    simulated: bool
    run_minutes: float
    unused: int
    invocations: int
    cut_short: int
    wall_minutes: float
    setups: frozenset[tuple[int, int]]
    cpus: frozenset[tuple[int, str]]
    machines: frozenset[str]
    others_share: float


def compute_of(stored: StoredExperiment) -> Compute:
    """The :class:`Compute` of a store: its stages' distinct runs and its job records."""
    runs = pd.concat([part.runs for part in stage_runs(stored)] or [stored.runs])
    runs = runs.drop_duplicates("run_id")
    jobs = stored.jobs
    return Compute(
        runs=len(runs),
        simulated=bool(simulated_flag(stored)),
        run_minutes=pd.to_numeric(runs.get("wall_time_s"), errors="coerce").sum() / 60,
        unused=len(set(stored.stored_runs["run_id"]) - set(runs["run_id"])),
        invocations=len(jobs),
        cut_short=int((jobs["outcome"] != "finished").sum()) if len(jobs) else 0,
        wall_minutes=jobs["wall_s"].sum() / 60 if len(jobs) else math.nan,
        setups=frozenset(zip(jobs["workers"], jobs["threads"], strict=True))
        if len(jobs)
        else frozenset(),
        cpus=frozenset(zip(jobs["cores"], jobs["cpu"], strict=True)) if len(jobs) else frozenset(),
        machines=frozenset(jobs["machine"]) if len(jobs) else frozenset(),
        others_share=pd.to_numeric(jobs["others_share"], errors="coerce").max()
        if len(jobs)
        else math.nan,
    )


def compute_text(cost: Compute) -> str:
    """The Set-up's Compute line: what training cost, in words."""
    if cost.simulated:
        return f"{cost.runs} runs, simulated (drawn in milliseconds: no training time to report)"
    text = (
        f"{cost.runs} runs, {cost.run_minutes:.1f} run-minutes (each run's own wall time, summed)"
    )
    if cost.unused:
        text += (
            f"; the store holds {cost.unused} more run(s) no stage of this plan uses (a "
            "walk's points past its edge, trained ahead on free workers, or an earlier plan's)"
        )
    if not cost.invocations:
        return f"{text}; the job's wall time not recorded (a store from before job records)"
    times = (
        f"{cost.invocations} invocation(s), {cost.cut_short} of them cut short"
        if cost.cut_short
        else f"{cost.invocations} invocation(s)"
    )
    setups = sorted({f"{w} worker(s) x {t} thread(s)" for w, t in cost.setups})
    cpus = sorted({f"{c} cores of {m}" for c, m in cost.cpus})
    share = cost.others_share
    others = f", other work {share:.0%} of the cores at most" if share == share else ""
    return (
        f"{text}; wall time {cost.wall_minutes:.1f} min in {times} of `ablate run`, "
        f"{', '.join(setups)} on {', '.join(cpus)}, machine {'/'.join(sorted(cost.machines))}"
        f"{others} (jobs.csv)"
    )


def _runs_of(label: str, runs: pd.DataFrame) -> str:
    if not len(runs):
        return ""
    steps = sorted({int(s) for s in pd.to_numeric(runs["planned_steps"]).dropna()})
    return f"{label} {len(runs)} runs of {'/'.join(map(str, steps))} steps"


def _recorded(runs: pd.DataFrame, key: str) -> str:
    """The distinct values a summary key took over the runs, or that it was not recorded."""
    if key not in runs:
        return "not recorded"
    values = sorted({str(v) for v in runs[key].dropna()})
    return ", ".join(values) if values else "none"


def _numerics_text(runs: pd.DataFrame) -> str:
    kernel = _recorded(runs, "kernel_target") if "kernel_target" in runs else UNRECORDED_KERNEL
    if kernel == "none":
        kernel = "not used (no norm ran it)"
    return (
        f"torch {_recorded(runs, 'torch_version')}, {_recorded(runs, 'torch_threads')} "
        f"thread(s) per run, CPU capability {_recorded(runs, 'cpu_capability')}; C++ RMSNorm "
        f"kernel build target: {kernel} (docs/results.md, what decides the bits)"
    )


def setup_section(stored: StoredExperiment, variants: list[str]) -> Section:
    """What was trained, from the stored configs of the main runs."""
    configs = variant_configs(stored, variants)
    if not configs:
        return Section()
    base = configs.get(variants[0]) or next(iter(configs.values()))
    main = stored.main
    params = ", ".join(
        f"{v} {int(main[main['variant'] == v]['n_params'].iloc[0]):,}"
        for v in variants
        if (main["variant"] == v).any()
    )
    steps = _recorded(main, "planned_steps")
    vocab = _recorded(main, "vocab_size")
    lines = [
        "## Set-up",
        "",
        f"- **Model:** {_model_text(base)}; parameters {params}.",
        f"- **Norm:** {_norm_text(configs, main)}.",
        f"- **Data:** {_data_text(base, vocab)}.",
        f"- **Training (main runs):** {_training_text(base, steps)}; shared LR "
        f"{base['train.lr']:g}, warmup {base['train.warmup_steps']} steps.",
        f"- **Stages:** {_stage_text(stored)}.",
        f"- **Numerics:** {_numerics_text(stored.runs)}.",
        f"- **Compute:** {compute_text(compute_of(stored))}.",
        "",
    ]
    tables = {"jobs.csv": stored.jobs} if len(stored.jobs) else {}
    return Section(lines, tables)


def runs_table(stored: StoredExperiment) -> pd.DataFrame:
    """Every run the report stands on, each with its group (the stage that stored it) and
    ``stages`` (every stage the Cost of the answer counts it in, ``;``-joined: a run two
    stages share is in both): the planned ones, the warmup studies' and the search trials and
    max-LR probes the studies name."""
    every = stored.stored_runs
    ids = set(stored.runs["run_id"])
    if "group" in every:
        ids |= set(every.loc[every["group"] == "warmup", "run_id"])
    for found in stored.studies.run_ids().values():
        ids |= set(found)
    stages: dict[str, list[str]] = {}
    for part in stage_runs(stored):
        for run_id in part.runs["run_id"]:
            stages.setdefault(run_id, []).append(part.group)
    table = every[every["run_id"].isin(ids)].copy()
    table["stages"] = [";".join(dict.fromkeys(stages.get(r, []))) for r in table["run_id"]]
    return table
