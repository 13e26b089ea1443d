"""The parallel-seeds benchmark's figures on the simulator."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ablate.core.load import load_experiment
from research.parallel_seeds import bracket, share_holding, summary_line

LN_VS_RMS = Path(__file__).resolve().parents[2] / "experiments" / "ln_vs_rms.yaml"


def test_a_wave_of_every_seed_takes_fewer_rounds_for_more_probes() -> None:
    design = load_experiment(LN_VS_RMS, "simulate")
    one, five = bracket(design, 0, 1), bracket(design, 0, 5)
    assert one.rounds == one.probes and one.seeds == five.seeds == 5
    assert five.rounds < one.rounds and five.probes > one.probes
    assert one.seeds_holding == five.seeds_holding == 5  # each seed's bracket holds its edge
    assert one.steps_off < 2 and five.steps_off < 2  # within two 2^(1/8) steps of the truth
    line = summary_line(5, [five])
    assert line.startswith(f"k=5: rounds {five.rounds}, probes {five.probes}, ")
    assert share_holding([five]) == 1.0  # the line's "seeds bracketing their edge"
    assert share_holding([five, dataclasses.replace(five, seeds_holding=2)]) == 0.7
