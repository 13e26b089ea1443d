"""The run record: its fields are the summary's keys, in order, and a continued run's extra keys
follow them; a writer that leaves one out fails where it builds the record."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from ablate.core.record import RECORD_KEYS, RunRecord
from ablate.core.store import SUMMARY_KEYS


def _values() -> dict[str, object]:
    return {name: None for name in RECORD_KEYS}


def test_the_summary_keys_are_the_records_fields_in_order() -> None:
    assert SUMMARY_KEYS == RECORD_KEYS == tuple(f.name for f in fields(RunRecord))[:-2]
    assert RECORD_KEYS[:3] == ("experiment", "run_id", "family") and RECORD_KEYS[-1] == "error"


def test_extra_keys_are_stored_after_the_records() -> None:
    record = RunRecord(**_values(), extra={"source_run_id": "abc"})
    stored = record.to_json()
    assert list(stored) == [*RECORD_KEYS, "source_run_id"] and stored["source_run_id"] == "abc"


def test_a_missing_or_misspelled_key_fails_where_the_record_is_built() -> None:
    values = _values()
    del values["tokens_per_s"]
    with pytest.raises(TypeError, match="tokens_per_s"):
        RunRecord(**values)
    with pytest.raises(TypeError, match="token_per_s"):
        RunRecord(**_values(), token_per_s=1.0)


def test_a_stored_summary_reads_back_as_the_record_it_was(tmp_path: Path) -> None:
    from ablate.core.folders import ExperimentFolder, write_json_atomic

    record = RunRecord(
        **{**_values(), "run_id": "r1", "status": "finished", "steps": 20},
        extra={"source_run_id": "abc"},
    )
    run = ExperimentFolder(tmp_path / "e").run("r1")
    run.path.mkdir(parents=True)
    write_json_atomic(run.summary, record.to_json())
    assert run.read_record() == record == RunRecord.from_json(record.to_json())
    older = {k: v for k, v in record.to_json().items() if k != "final_test_loss"}
    assert RunRecord.from_json(older).final_test_loss is None  # a key an older version lacked
    write_json_atomic(run.summary, {**record.to_json(), "status": "failed"})
    assert run.read_record() is None  # not done: no record to reuse


def test_a_row_holds_the_keys_its_file_held_in_the_files_order() -> None:
    older = {"status": "finished", "run_id": "r1", "source_run_id": "r0"}  # no final_val_loss
    record = RunRecord.from_json(older)
    assert record.final_val_loss is None and record.extra == {"source_run_id": "r0"}
    assert record.to_row() == older and list(record.to_row()) == list(older)
    assert record == RunRecord.from_json({**older, "final_val_loss": None})  # keys: no identity
    fresh = RunRecord(**_values())
    assert fresh.to_row() == fresh.to_json()  # not read from a file: every key
