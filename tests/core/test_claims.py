"""``claims:`` in an experiment file: checked against the file's variants and what it records."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import TINY

from ablate.core.errors import ConfigError
from ablate.core.load import load_experiment
from ablate.core.manifest import plan_manifest
from ablate.core.plan import plan_runs

CLAIM = {"source": "S", "statement": "rms is lower", "variant": "rms", "metric": "final_val_loss"}


def _file(tmp_path: Path, claims: list[dict], **extra: object) -> Path:
    doc = {
        "name": "claimed",
        **TINY,
        "variants": {"ln": {}, "rms": {"model.norm.kind": "rmsnorm"}},
        "claims": claims,
        **extra,
    }
    path = tmp_path / "claimed.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_claim_reaches_the_manifest_with_its_baseline_resolved(tmp_path: Path) -> None:
    experiment = load_experiment(_file(tmp_path, [{**CLAIM, "direction": "lower"}]))
    manifest = plan_manifest(experiment, plan_runs(experiment))
    expected = {**CLAIM, "direction": "lower", "baseline": "ln", "runs": "main"}
    expected |= {"at": "one_lr", "mechanism": False}
    assert manifest.claims == [expected]


@pytest.mark.parametrize(
    ("claim", "extra", "fragment"),
    [
        ({"variant": "dyt"}, {}, "claims.0.variant: 'dyt' is not a variant; allowed: ln, rms"),
        ({"baseline": "rms"}, {}, "claims.0: variant and baseline are both 'rms'"),
        ({"metric": "loss"}, {}, "claims.0.metric"),
        ({"direction": "up"}, {}, "claims.0.direction"),
        (
            {"metric": "grad_spikes"},
            {},
            "claims.0.metric: grad_spikes needs analysis.spike_factor",
        ),
        ({"runs": "tuned"}, {}, "claims.0.runs: tuned reads the tuned A/B's losses"),
        ({"metric": "final_test_loss"}, {}, "final_test_loss needs data.test_fraction"),
        ({"metric": "lr_sensitivity"}, {}, "metric lr_sensitivity and runs: sweep go together"),
        ({"runs": "sweep", "metric": "lr_sensitivity"}, {}, "it needs a sweep: section"),
        (
            {"runs": "sweep", "metric": "lr_sensitivity"},
            {"sweep": {"points": 3}},
            "claims.0.at: lr_grid is the estimand of runs: sweep",
        ),
        (
            {"metric": "attn_logit_max"},
            {"train": {**TINY["train"], "probes": {"interval": 0}}},
            "attn_logit_max is a probe quantity; train.probes.interval is 0",
        ),
    ],
)
def test_a_bad_claim_is_one_line(tmp_path: Path, claim: dict, extra: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_experiment(_file(tmp_path, [{**CLAIM, "direction": "lower", **claim}], **extra))
    assert fragment in str(caught.value) and "\n" not in str(caught.value)
