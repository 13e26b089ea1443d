"""The loss figure's axes follow the curves: the unigram floor is drawn only where it fits; a
figure is drawn only when the report builder writes it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ablate.report import figures
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
        assert "unigram floor" not in [line.get_label() for line in ax.lines]


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
    fig = figures.sweep_figure(table, ["layernorm"], (5.5, 3.25), pd.DataFrame())()
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert f"layernorm: {figures.UNSTABLE_POINT}" in labels
    assert "collapsed" in figures.UNSTABLE_POINT
