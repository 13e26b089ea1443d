"""The base of every config section: unknown keys are errors, values checked on assignment."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

SEED_LIMIT = 2**32  # torch, numpy and the per-name init seeds all take seeds below this


class StrictSection(BaseModel):
    """Base for every section: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
