"""The base of every config section (unknown keys are errors, values checked on assignment) and
the type of a seed."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

SEED_LIMIT = 2**32  # torch, numpy and the per-name init seeds all take seeds below this
Seed = Annotated[int, Field(ge=0, lt=SEED_LIMIT)]


class StrictSection(BaseModel):
    """Base for every section: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
