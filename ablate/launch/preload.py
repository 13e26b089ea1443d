"""What the pool's forkserver imports once, before it forks any worker
(:data:`ablate.launch.workers.PRELOADED`): the modules :data:`~ablate.launch.workers.IMPORTS_ENV`
names (torch and Lightning, through the training run, for a pool that trains; none for the
simulator's or Slurm's). When the import is over, done or failed, it touches the file that
:data:`~ablate.launch.workers.READY_ENV` names, so that the ``ablate`` process waits for the
server where Ctrl-C can reach it (:func:`ablate.launch.workers.start_server`), not inside a
pool's first submit."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from ablate.launch.workers import IMPORTS_ENV, READY_ENV

try:
    for name in os.environ.get(IMPORTS_ENV, "").split():
        importlib.import_module(name)
finally:
    if os.environ.get(READY_ENV):
        Path(os.environ[READY_ENV]).touch()
