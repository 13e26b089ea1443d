"""The run lines the terminal prints: a collapsed run is named collapsed, not finished."""

from __future__ import annotations

from conftest import tiny_config

from ablate.core.plan import RunSpec
from ablate.launch.progress import outcome_line


def _summary(**fields: object) -> dict[str, object]:
    return {
        "status": "finished",
        "stable": True,
        "final_val_loss": 1.75,
        "wall_time_s": 3.0,
        **fields,
    }


def test_a_run_that_learned_is_finished() -> None:
    spec = RunSpec("tiny", "dyt", 0, tiny_config())
    line = outcome_line(spec, _summary(), None)
    assert line == f"dyt seed=0 [{spec.run_id}]: finished, val loss 1.7500, 3.0s"


def test_a_collapsed_run_is_printed_collapsed_with_its_reason() -> None:
    spec = RunSpec("tiny", "dyt", 0, tiny_config())
    reason = "collapsed: final val loss 3.2932 is within 0.05 of the unigram floor 3.2465"
    line = outcome_line(spec, _summary(stable=False, unstable_reason=reason), None)
    assert f": collapsed ({reason}), val loss 1.7500" in line and "finished" not in line
