"""The GPU check in one command: the smoke experiment on CUDA in bf16-mixed, then the benchmark.

For a machine with a CUDA GPU (untested on this project's CPU-only CI):

    python -m ablate.gpu_check --out reports/gpu

1. ``experiments/smoke.yaml`` with ``runtime.accelerator: cuda`` and ``train.precision:
   bf16-mixed`` (saved as ``<out>/smoke_gpu.yaml``) through ``ablate run``: every run, the LR
   sweep, the search and max-LR studies, and the report with its figures in
   ``<out>/reports/smoke_gpu/``;
2. ``python -m ablate.bench.runs_per_device`` on ``experiments/ln_vs_rms.yaml``: runs per minute
   and tokens/s of 8 short runs at 1, 4 and 8 runs per GPU (``runtime.runs_per_device``),
   printed (before the long benchmarks, which may not fit one device call);
3. ``ablate bench --device cuda`` on the same experiment: kernel table and figure, step time,
   tokens/s, memory and MFU per variant in ``<out>/bench/``;
4. ``ablate bench --inference --device cuda`` on the same experiment (fresh weights: speed does
   not depend on their values): prefill, TPOT, memory and the norms' share of kernel time per
   variant in fp32 and bf16, in ``<out>/inference/``.

Exit code: 2 without a CUDA device, else the worst of the four commands'.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from ablate.bench import runs_per_device
from ablate.cli import main as ablate_main
from ablate.commands import EXIT_BAD_INPUT

REPO = Path(__file__).resolve().parent.parent


def gpu_experiment(source: Path, dest: Path) -> Path:
    """A copy of ``source`` that runs on CUDA in bf16-mixed, named ``<name>_gpu``."""
    doc = yaml.safe_load(source.read_text(encoding="utf-8"))
    doc["name"] = f"{doc.get('name') or source.stem}_gpu"
    doc.setdefault("runtime", {})["accelerator"] = "cuda"
    doc.setdefault("train", {})["precision"] = "bf16-mixed"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> int:
    """Run the smoke experiment and the benchmark on the GPU; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reports/gpu"))
    parser.add_argument("--smoke", type=Path, default=REPO / "experiments" / "smoke.yaml")
    parser.add_argument(
        "--bench-experiment", type=Path, default=REPO / "experiments" / "ln_vs_rms.yaml"
    )
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("ablate.gpu_check: error: no CUDA device is available", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    experiment = gpu_experiment(args.smoke, args.out / "smoke_gpu.yaml")
    run = ablate_main(
        [
            "run",
            str(experiment),
            "--results-dir",
            str(args.out / "results"),
            "--report-dir",
            str(args.out / "reports"),
        ]
    )
    packed = runs_per_device.main([str(args.bench_experiment)])
    bench = ablate_main(
        [
            "bench",
            "--device",
            "cuda",
            "--experiment",
            str(args.bench_experiment),
            "--out",
            str(args.out / "bench"),
        ]
    )
    inference = ablate_main(
        [
            "bench",
            "--inference",
            "--device",
            "cuda",
            "--experiment",
            str(args.bench_experiment),
            "--out",
            str(args.out / "inference"),
        ]
    )
    print(f"figures: {args.out / 'reports'}, {args.out / 'bench'}, {args.out / 'inference'}")
    return max(run, bench, inference, packed)


if __name__ == "__main__":
    sys.exit(main())
