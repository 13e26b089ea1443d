"""The launchers' names (``runtime.launcher``): where runs execute. Each launcher, ablate's own
(``local``, ``slurm``) and any another installed package adds, is registered as an entry point
of the group :data:`GROUP` naming the object that implements it
(:class:`ablate.launch.launchers.Launcher`); here the names are read from the installed
metadata, nothing is imported, so the config that checks them stays light. ``local`` is always
there: it is the default, and a checkout run without installing still has it.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

GROUP = "ablate.launchers"
DEFAULT = "local"
# the default's entry point, for a checkout whose metadata lacks it (pyproject.toml names it too)
LOCAL = EntryPoint(DEFAULT, "ablate.launch.backends:LOCAL", GROUP)


@functools.cache
def registered() -> dict[str, EntryPoint]:
    """Every installed launcher's entry point, by name (``local`` at least)."""
    return {DEFAULT: LOCAL, **{point.name: point for point in entry_points(group=GROUP)}}


def launcher_names() -> list[str]:
    """The launchers ``runtime.launcher`` may name: ``local`` first, then the rest sorted."""
    return [DEFAULT, *sorted(set(registered()) - {DEFAULT})]
