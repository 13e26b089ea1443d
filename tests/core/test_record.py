"""The run record: its fields are the summary's keys, in order, and a continued run's extra keys
follow them; a writer that leaves one out fails where it builds the record."""

from __future__ import annotations

from dataclasses import fields

import pytest

from ablate.core.record import RECORD_KEYS, RunRecord
from ablate.core.store import SUMMARY_KEYS


def _values() -> dict[str, object]:
    return {name: None for name in RECORD_KEYS}


def test_the_summary_keys_are_the_records_fields_in_order() -> None:
    assert SUMMARY_KEYS == RECORD_KEYS == tuple(f.name for f in fields(RunRecord))[:-1]
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
