"""The report's search section: its start-up trials said, a best trial no trial brackets
flagged."""

from __future__ import annotations

import pandas as pd

from ablate.core.studies import BestTrial, SearchResult, Studies, Trial
from ablate.report.studies import (
    best_edges,
    edge_lines,
    edges_of_best,
    search_section,
    startup_lines,
)


def _trials(lrs: list[float], warmups: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"lr": lrs, "warmup_steps": warmups})


def test_a_best_trial_is_at_an_edge_only_where_no_trial_lies_beyond_it() -> None:
    trials = _trials([1e-3, 3e-3, 1e-2, 2e-2], [10, 55, 30, 0])
    assert edges_of_best(trials, BestTrial(3e-3, 30, 2.0, None)) == []
    assert edges_of_best(trials, BestTrial(3e-3, 55, 2.0, None)) == ["warmup highest tried"]
    assert edges_of_best(trials, BestTrial(1e-3, 10, 2.0, None)) == ["LR lowest tried"]
    assert edges_of_best(trials, None) == []


def _study(lrs: list[float], warmups: list[int], best: int) -> SearchResult:
    table = [
        Trial(i, "COMPLETE", 2.0 + i, lr, w, True, None)
        for i, (lr, w) in enumerate(zip(lrs, warmups, strict=True))
    ]
    top = BestTrial(lrs[best], warmups[best], 2.0 + best, None)
    return SearchResult("s", table, len(table), len(table), 0, len(table), top, None)


def test_the_search_section_says_its_start_up_and_flags_an_edge() -> None:
    studies = Studies(
        search={
            "layernorm": _study([1e-3, 3e-3, 1e-2], [10, 30, 50], best=1),
            "rmsnorm": _study([1e-3, 3e-3, 1e-2], [10, 30, 50], best=2),
        }
    )
    section = search_section(studies, ["layernorm", "rmsnorm"], startup=2)
    edges = best_edges(studies, section.tables["search_trials.csv"])
    assert edges == {"layernorm": [], "rmsnorm": ["LR highest tried", "warmup highest tried"]}
    assert edge_lines(edges)[0] in section.lines  # the one warning, for rmsnorm alone
    assert startup_lines(2)[0] in section.lines and startup_lines(None) == []
    quiet = search_section(studies, ["layernorm", "rmsnorm"]).lines
    assert startup_lines(2)[0] not in quiet  # not recorded: not claimed


def test_the_lr_sensitivity_has_an_interval_over_seeds() -> None:
    import numpy as np
    import pandas as pd
    import pytest
    from scipy import stats

    from ablate.report.analysis import seed_sensitivities
    from ablate.report.studies import seed_sensitivity_intervals, seed_sensitivity_lines

    rows = []
    for seed, shift in enumerate((0.0, 0.1, 0.3)):
        for variant, losses in (("ln", [3.0, 2.0, 5.5]), ("rms", [2.9, 2.0, 2.6])):
            for lr, loss in zip((1e-3, 1e-2, 1e-1), losses, strict=True):
                rows.append((variant, seed, lr, min(loss + shift, 5.5), 5.5))
    frame = pd.DataFrame(rows, columns=["variant", "seed", "lr", "clipped_loss", "initial_loss"])
    per_seed = seed_sensitivities(frame).set_index(["variant", "seed"])["lr_sensitivity"]
    ln = np.array([np.mean([3.0, 2.0, 5.5]) - 2.0, np.mean([3.1, 2.1, 5.5]) - 2.1])
    assert per_seed[("ln", 0)] == pytest.approx(ln[0]) and per_seed[("ln", 1)] == pytest.approx(
        ln[1]
    )
    own, paired = seed_sensitivity_intervals(seed_sensitivities(frame), ["ln", "rms"])
    diffs = (per_seed["rms"] - per_seed["ln"]).to_numpy()
    low, high = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    rms = paired["rms"]
    assert (rms.mean, rms.ci_low, rms.ci_high) == pytest.approx((diffs.mean(), low, high))
    assert list(own) == ["ln", "rms"] and own["ln"].mean == pytest.approx(per_seed["ln"].mean())
    (line, _) = seed_sensitivity_lines(seed_sensitivities(frame), ["ln", "rms"])
    assert line.startswith("Over seeds, each against its own best (3 seeds")
