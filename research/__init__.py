"""The research bench: the analyses that chose and scored ablate's estimators, outside the
installed package (``pip install .`` ships ``ablate`` only, and nothing in ``ablate`` imports
this). Each module runs from the repository's root, ``python -m research.<name>``: the dense
reference read as ground truth (``reference``), the simulator fitted to it (``fit_reference``),
the estimators scored against both (``estimators``, ``held_to_runs``, ``optimum_bound``, the
replication modules), the simulator's calibration (``calibration``, ``eval_noise``),
``decide:``'s error rates (``sequential``) and its futility stop (``futility``), the max-LR
stage's seed waves (``parallel_seeds``), the curve's early stop replayed on real curves
(``early_stop``), the warmup studies' gaps (``warmup_effect``), the steps real runs diverge at
(``divergence_steps``) and where the LR optimum lies at the declared warmup
(``lr_at_warmup``). Paths are the repository's (:data:`REPO`), wherever it runs from.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # the checkout: experiments/, reports/, docs/
