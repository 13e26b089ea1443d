"""What the pool's forkserver imports once, before it forks any worker
(:data:`ablate.launch.workers.PRELOADED`): the modules :data:`~ablate.launch.workers.IMPORTS_ENV`
names (torch and Lightning, through the training run, for a pool that trains; none for the
simulator's or Slurm's). When the import is over, done or failed, it touches the file that
:data:`~ablate.launch.workers.READY_ENV` names, so that the ``ablate`` process waits for the
server where Ctrl-C can reach it (:func:`ablate.launch.workers.start_server`), not inside a
pool's first submit."""

from __future__ import annotations

import signal

# A terminal's Ctrl-C reaches the whole process group, the server too: its import is not cut
# (a traceback after the command's own line); the ablate process kills it where it must
# (start_server, or at its exit). The forkserver ignores SIGINT from its loop on.
signal.signal(signal.SIGINT, signal.SIG_IGN)

import contextlib  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

from ablate.launch.workers import IMPORTS_ENV, READY_ENV  # noqa: E402

try:
    for name in os.environ.get(IMPORTS_ENV, "").split():
        importlib.import_module(name)
finally:
    if os.environ.get(READY_ENV):
        with contextlib.suppress(OSError):  # the ablate process gave up on it and ended
            Path(os.environ[READY_ENV]).touch()
