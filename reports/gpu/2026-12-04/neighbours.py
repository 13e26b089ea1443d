"""On CUDA: the smoke experiment's main runs trained alone twice, then four at once on one GPU."""
import json, pathlib, subprocess, sys, time
import yaml

base = pathlib.Path(sys.argv[1])
doc = yaml.safe_load((pathlib.Path("experiments/smoke.yaml")).read_text())
for k in ("sweep", "search", "max_lr"):
    doc.pop(k, None)
doc["name"] = "nb"
doc.setdefault("runtime", {})["accelerator"] = "cuda"
doc["train"]["precision"] = sys.argv[2] if len(sys.argv) > 2 else "32"
path = base / "nb.yaml"
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(yaml.safe_dump(doc))
rows = {}
for label, workers in (("alone", 1), ("alone_again", 1), ("four_at_once", 4)):
    t = time.time()
    r = subprocess.run([sys.executable, "-m", "ablate.cli", "run", str(path), "--results-dir",
                        str(base / label), "--report-dir", str(base / f"rep_{label}"),
                        "--workers", str(workers)], capture_output=True, text=True)
    print(label, "rc", r.returncode, f"{time.time() - t:.1f}s", r.stderr[-600:])
    for s in sorted((base / label / "nb").glob("*/summary.json")):
        d = json.loads(s.read_text())
        rows.setdefault((d["variant"], d["seed"]), {})[label] = (d["final_val_loss"], d.get("final_train_loss"))
for key, got in sorted(rows.items()):
    vals = list(got.values())
    same = all(v == vals[0] for v in vals)
    print(key, "equal" if same else "DIFFER", {k: [repr(x) for x in v] for k, v in got.items()})
