"""Pydantic's validation errors as the one line of a :class:`~ablate.core.errors.ConfigError`:
the first problem, the key it is about, pydantic's code for it and what is allowed there."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from ablate.core.errors import ConfigError
from ablate.core.experiment import ExperimentFile
from ablate.core.schema import section_model

LEADING_KEY = re.compile(r"^[a-z_]+(?:\.[a-z_0-9]+)+")
QUOTED = re.compile(r"'([^']*)'")  # the values of a pydantic literal_error's "expected"


def _error_key(error: dict[str, Any], message: str) -> str | None:
    """The dotted key a pydantic error is about: its location, or for a check across keys
    (``value_error``, located at the section) the key its message starts with."""
    loc = ".".join(str(p) for p in error["loc"]) or None
    if error["type"] == "value_error":
        leading = LEADING_KEY.match(message)
        return leading.group(0) if leading else loc
    return loc


def _describe_error(error: dict[str, Any]) -> ConfigError:
    """One pydantic error as a config error without its file: a readable clause naming the key
    and what is allowed, and the key, code and allowed values it carries."""
    loc = [str(p) for p in error["loc"]]
    key = ".".join(loc) or "(top level)"
    code = error["type"]
    if code == "extra_forbidden":
        parent = loc[:-1]
        owner = (section_model(parent) if parent else None) or section_model(parent, ExperimentFile)
        allowed = tuple(owner.model_fields) if owner is not None else ()
        shown = ", ".join(allowed) or "see docs/experiments.md"
        return ConfigError(f"{key}: unknown key; allowed: {shown}", key, code, allowed)
    message = error["msg"].removeprefix("Value error, ")
    if code == "value_error":
        return ConfigError(message, _error_key(error, message), code)
    value = error.get("input")
    got = f"got {value!r}; " if value is not None and not isinstance(value, dict) else ""
    expected = (error.get("ctx") or {}).get("expected", "") if code == "literal_error" else ""
    allowed = tuple(QUOTED.findall(expected))
    return ConfigError(f"{key}: {got}{message[0].lower()}{message[1:]}", key, code, allowed)


def format_validation(exc: ValidationError, where: str) -> ConfigError:
    """A pydantic error as the one line of a config error: its first problem, and how many
    more there are."""
    errors = exc.errors()
    first = _describe_error(errors[0])
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return ConfigError(f"{where}: {first}{more}", first.key, first.code, first.allowed)
