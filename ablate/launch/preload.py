"""What the pool's forkserver imports once, before it forks any worker
(:data:`ablate.launch.workers.PRELOADED`): torch and Lightning, through the training run. When
the import is over, done or failed, it touches the file that
:data:`~ablate.launch.workers.READY_ENV` names, so that the ``ablate`` process waits for the
server where Ctrl-C can reach it (:func:`ablate.launch.workers.start_server`), not inside a
pool's first submit."""

from __future__ import annotations

import os
from pathlib import Path

from ablate.launch.workers import READY_ENV

try:
    import ablate.training.run  # noqa: F401
finally:
    if os.environ.get(READY_ENV):
        Path(os.environ[READY_ENV]).touch()
