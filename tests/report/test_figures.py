"""The loss figure's axes follow the curves: the unigram floor is drawn only where it fits; a
figure is drawn only when the report builder writes it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ablate.report import figures, study_figures
from ablate.report.figures import loss_figure


def _metrics(start: float, end: float) -> pd.DataFrame:
    rows = []
    for variant, shift in (("layernorm", 0.0), ("rmsnorm", 0.01)):
        for seed in (0, 1):
            for step in range(101):
                loss = start + (end - start) * step / 100 + shift + 0.001 * seed
                rows.append(
                    {
                        "run_id": f"{variant}{seed}",
                        "variant": variant,
                        "seed": seed,
                        "step": step,
                        "train_loss": loss,
                        "val_loss": loss,
                    }
                )
    return pd.DataFrame(rows)


def _axis_texts(ax) -> list[str]:  # noqa: ANN001 - a matplotlib Axes
    return [t.get_text() for t in ax.texts]


def test_a_floor_above_the_curves_is_named_not_drawn() -> None:
    fig = loss_figure(_metrics(2.4, 1.7), ["layernorm", "rmsnorm"], floor=3.2465)()
    for ax in fig.axes:
        assert ax.get_ylim()[1] < 2.6  # the axis stays where the curves are
        assert _axis_texts(ax) == ["unigram floor 3.247: above the curves"]
        assert not any(np.allclose(line.get_ydata(), 3.2465) for line in ax.lines)


def test_a_floor_within_the_curves_is_a_line() -> None:
    fig = loss_figure(_metrics(5.5, 1.7), ["layernorm", "rmsnorm"], floor=3.2465)()
    for ax in fig.axes:
        floors = [line for line in ax.lines if line.get_label() == "unigram floor"]
        assert len(floors) == 1 and np.allclose(floors[0].get_ydata(), 3.2465)
        assert _axis_texts(ax) == []


def test_whether_a_figure_exists_is_known_before_it_is_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_drawing(*args: object, **kwargs: object) -> None:
        raise AssertionError("drawn before the builder wrote it")

    variants = ["layernorm", "rmsnorm"]
    monkeypatch.setattr(figures, "Figure", no_drawing)
    draw = loss_figure(_metrics(2.4, 1.7), variants)
    assert callable(draw)
    assert loss_figure(_metrics(2.4, 1.7).iloc[:0], variants) is None  # no data: no figure
    with pytest.raises(AssertionError, match="drawn before"):
        draw()


def test_a_sweep_point_with_a_collapsed_seed_is_not_called_diverged() -> None:
    table = pd.DataFrame(
        {
            "variant": ["layernorm"] * 3,
            "lr": [1e-3, 1e-2, 1e-1],
            "loss_mean": [2.3, 2.2, 3.2],
            "seeds": [2, 2, 2],
            "unstable": [0, 0, 1],  # a seed collapsed at 0.1: its loss, not ℓ0
            "unlearned": [0, 0, 0],
        }
    )
    fig = study_figures.sweep_figure(table, ["layernorm"], (5.5, 3.25), pd.DataFrame())()
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels[:2] == ["layernorm", f"layernorm: {study_figures.UNSTABLE_POINT}"]
    # the wording is the point: an unstable point may have collapsed, not only diverged
    assert "collapsed" in study_figures.UNSTABLE_POINT


def test_tick_labels_are_plain_numbers() -> None:
    shown = [figures.plain(v) for v in (0.002, 1.15, 2500, 12500, 2e5, 1e6, 2e6)]
    assert shown == ["0.002", "1.15", "2500", "12.5k", "200k", "1M", "2M"]


@pytest.mark.parametrize(("low", "high", "least"), [(1.0, 1.3, 3), (0.004, 0.05, 3)])
def test_a_narrow_log_axis_gets_several_labelled_ticks(low: float, high: float, least: int) -> None:
    fig = figures.Figure()
    ax = fig.subplots()
    ax.plot([1, 2], [low, high])
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    figures.readable_log_ticks(ax, "y")
    fig.canvas.draw()
    shown = [(t.get_text(), t.get_position()[1]) for t in ax.get_yticklabels() if t.get_text()]
    inside = [v for v in ax.get_yticks() if low <= v <= high]
    assert len(inside) >= least and all(text == figures.plain(v) for text, v in shown)


def test_a_curve_whose_seeds_stopped_early_names_how_many_it_averages() -> None:
    metrics = _metrics(2.4, 1.7)
    cut = metrics[~((metrics["run_id"] == "rmsnorm1") & (metrics["step"] > 50))]
    fig = loss_figure(cut, ["layernorm", "rmsnorm"])()
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["layernorm (n=2)", "rmsnorm (n=1–2)"]


def test_probe_panels_wrap_at_four_variants_a_row() -> None:
    variants = [f"v{i}" for i in range(6)]
    rows = [
        {"variant": v, "run_id": f"{v}s{seed}", "seed": seed, "step": step, "quantity": q,
         "site": "block", "layer": layer, "value": 1.0 + 0.1 * layer + 0.01 * step}
        for v in variants for seed in (0, 1) for step in (0, 10, 20)
        for q in ("resid_rms", "grad_norm") for layer in (0, 1)
    ]  # fmt: skip
    fig = figures.probe_figure(pd.DataFrame(rows), variants)()
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 2 * 2 * 4 and len(visible) == 2 * 6
    assert [ax.get_title() for ax in visible[:4]] == ["v0", "v1", "v2", "v3"]
