"""The main sections' wording that depends on how the runs were measured."""

from __future__ import annotations

from ablate.report.quality import final_eval_note


def _config(final_eval: str | None) -> dict:
    train = {"lr": 0.003} if final_eval is None else {"lr": 0.003, "final_eval": final_eval}
    return {"run_id": "r", "config": {"train": train}}


def test_a_final_val_loss_on_the_whole_split_is_said_with_what_best_means() -> None:
    note = final_eval_note({"a": _config("split"), "b": _config("split")})
    # the wording is the point: the note says what each loss is measured on
    assert "whole validation split" in note and "can lie above the final" in note
    assert final_eval_note({"a": _config("windows")}) == ""
    assert final_eval_note({"a": _config(None)}) == ""  # stored before the key existed
    assert final_eval_note({}) == ""
