"""The one-line errors of bad input: :class:`ConfigError` (an experiment file, a command
line) and :class:`DataError` (a corpus). A module of their own, so that catching them loads
nothing (:mod:`ablate.core.validation` turns pydantic's errors into a ConfigError)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A problem with an experiment file, as one line: ``FILE: KEY: what is wrong; allowed``.

    Beside the line it carries what a caller acts on without reading the wording: ``key``, the
    dotted key at fault (None for the file as a whole); ``code``, the problem's name (pydantic's
    error type where the schema refused a value: ``extra_forbidden``, ``greater_than``,
    ``literal_error``, ``int_parsing``...; ``value_error`` for a check across keys; a name of
    ablate's own for its checks after the schema: ``file_not_found``, ``repeats``...);
    ``allowed``, the values or keys that would be accepted, where the schema lists them.
    """

    def __init__(
        self,
        message: str,
        key: str | None = None,
        code: str | None = None,
        allowed: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.key = key
        self.code = code
        self.allowed = allowed


class DataError(ValueError):
    """A corpus that cannot be used, as one line naming the file and the problem (raised by
    :mod:`ablate.training.data`; here so that catching it does not load torch)."""
