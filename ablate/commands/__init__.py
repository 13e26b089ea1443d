"""What each ``ablate`` command does once its arguments are parsed: load, call the pipeline,
the studies, the report or a benchmark, and print the outcome (:mod:`ablate.cli` parses and
dispatches). A command returns its exit code: 0 success, 1 some run failed; bad input raises
(:class:`UsageError`, ``ConfigError``, ``DataError``) and the CLI turns it into one line and 2.
"""

from __future__ import annotations

from ablate.commands.bench import cmd_bench
from ablate.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RUN_FAILED,
    UsageError,
)
from ablate.commands.results import cmd_report, cmd_status
from ablate.commands.run import cmd_run, cmd_search
from ablate.commands.validate import cmd_validate

__all__ = [
    "COMMANDS",
    "EXIT_BAD_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RUN_FAILED",
    "UsageError",
]

COMMANDS = {
    "run": cmd_run,
    "search": cmd_search,
    "validate": cmd_validate,
    "report": cmd_report,
    "status": cmd_status,
    "bench": cmd_bench,
}
