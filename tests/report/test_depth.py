"""The residual stream over depth and gradient-norm spikes, from probe and metric rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from ablate.report.depth import depth_profile, depth_section, grad_spikes, run_spikes


def test_a_spike_is_a_step_above_factor_times_the_median_of_the_window_before() -> None:
    norms = pd.Series([1.0] * 10 + [2.9, 1.0, 3.5, float("nan"), 1.0, math.inf, 30.0])
    spikes, judged, largest = run_spikes(norms, factor=3.0, window=10)
    # judged: the 5 finite steps after the first full window; 3.5 and 30 are spikes, 2.9 is not
    assert (spikes, judged, largest) == (2, 5, 30.0)
    assert run_spikes(pd.Series([1.0] * 5 + [9.0]), 3.0, window=10) == (
        0,
        0,
        pytest.approx(math.nan, nan_ok=True),
    )


def _metrics() -> pd.DataFrame:
    rows = []
    for variant, bump in (("a", 1.0), ("b", 5.0)):
        for seed in (0, 1):
            for step in range(1, 31):
                norm = bump if step == 25 + seed else 1.0
                rows.append((f"{variant}{seed}", variant, seed, step, 3.0, norm, None))
            rows.append((f"{variant}{seed}", variant, seed, 30, None, None, 2.5))  # an eval row
    columns = ["run_id", "variant", "seed", "step", "train_loss", "grad_norm", "val_loss"]
    return pd.DataFrame(rows, columns=columns)


def test_spikes_are_counted_per_run_on_training_steps_only() -> None:
    found = grad_spikes(_metrics(), factor=3.0, window=10)
    assert list(found["spikes"]) == [0, 0, 1, 1]
    assert list(found["steps_judged"]) == [20] * 4
    assert grad_spikes(pd.DataFrame(), 3.0, 10).empty
    assert grad_spikes(_metrics(), 3.0, window=40)["spikes"].isna().all()  # 30 steps: none judged


def _probes(kurtosis: bool = True) -> pd.DataFrame:
    rows = []
    for variant, growth in (("a", 2.0), ("b", 1.0)):
        for seed in (0, 1):
            for step in (1, 10):
                for layer in range(3):
                    rms = (1 + layer) * growth * (1 + seed) if step == 10 else 99.0
                    site = f"blocks.{layer}"
                    rows.append(
                        (f"{variant}{seed}", variant, seed, step, "resid_rms", site, layer, rms)
                    )
                    if kurtosis:
                        value = 1.0 + layer + seed
                        rows.append(
                            (
                                f"{variant}{seed}",
                                variant,
                                seed,
                                step,
                                "resid_kurtosis",
                                site,
                                layer,
                                value,
                            )
                        )
    columns = ["run_id", "variant", "seed", "step", "quantity", "site", "layer", "value"]
    return pd.DataFrame(rows, columns=columns)


def test_the_profile_is_each_runs_last_probe_step_averaged_over_seeds() -> None:
    profile = depth_profile(_probes())
    a = profile[profile["variant"] == "a"].set_index("layer")
    assert list(a["resid_rms_mean"]) == [3.0, 6.0, 9.0]  # (1 + layer) * 2 * mean(1, 2)
    assert list(a["resid_kurtosis_min"]) == [1.0, 2.0, 3.0]
    assert list(a["resid_kurtosis_max"]) == [2.0, 3.0, 4.0]
    assert set(profile["seeds"]) == {2}


MAIN = pd.DataFrame(
    {"run_id": ["a0", "a1", "b0", "b1"], "status": ["finished"] * 4, "variant": list("aabb")}
)


def test_the_section_appears_with_kurtosis_rows_or_a_spike_factor_only() -> None:
    old = depth_section(MAIN, _probes(kurtosis=False), _metrics(), ["a", "b"], None, 10)
    assert old.lines == [] and old.tables == {} and old.figures == {}
    both = depth_section(MAIN, _probes(), _metrics(), ["a", "b"], 3.0, 10)
    assert set(both.tables) == {"depth.csv", "grad_spikes.csv"} and set(both.figures) == {
        "depth.png"
    }
    text = "\n".join(both.lines)
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line[:3] == "| a"}
    rows |= {line.split("|")[1].strip(): line for line in text.splitlines() if line[:3] == "| b"}
    assert "3 → 9 (×3)" in rows["a"] and "1.5 → 4.5 (×3)" in rows["b"]
    a = both.tables["depth.csv"].query("variant == 'a'").set_index("layer")
    peak = a.loc[a["resid_kurtosis_mean"].idxmax()]  # kurtosis 1 + layer + seed at layer 2
    assert (peak.name, peak["resid_kurtosis_mean"]) == (2, 3.5)
    assert (peak["resid_kurtosis_min"], peak["resid_kurtosis_max"]) == (3.0, 4.0)
    spikes = both.tables["grad_spikes.csv"].groupby("variant")["spikes"].agg(list)
    assert spikes.to_dict() == {"a": [0, 0], "b": [1, 1]}  # a spike above 3× in each b run
    spikes_only = depth_section(MAIN, pd.DataFrame(), _metrics(), ["a", "b"], 3.0, 10)
    assert set(spikes_only.tables) == {"grad_spikes.csv"} and not spikes_only.figures


def test_a_run_that_did_not_finish_is_left_out_of_the_depth_section() -> None:
    main = MAIN.assign(status=["finished", "diverged", "finished", "finished"])
    section = depth_section(main, _probes(), _metrics(), ["a", "b"], 3.0, 10)
    assert set(section.tables["grad_spikes.csv"]["run_id"]) == {"a0", "b0", "b1"}
    assert set(section.tables["depth.csv"].query("variant == 'a'")["seeds"]) == {1}
