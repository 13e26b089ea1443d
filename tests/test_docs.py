"""The README and docs/ agree with the code and the committed reports they quote."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ablate.core import store
from ablate.core.config import RunConfig
from ablate.core.experiment import ExperimentFile
from ablate.core.load import load_experiment
from ablate.core.schema import model_in
from ablate.report.times import read_times

README = REPO / "README.md"
DOCS = REPO / "docs"
BASE_SECTIONS = ("data", "model", "train", "runtime")


def _default(field) -> str | None:  # noqa: ANN001 - pydantic's FieldInfo
    """A field's default as a YAML value reads (``null``, ``true``, ``1e-05``); None if required."""
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return None
    else:
        value = field.default
    return value if isinstance(value, str) else json.dumps(value)


def _keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str | None]]:
    """Every leaf key of a section as (dotted key, default)."""
    keys = []
    for name, field in model.model_fields.items():
        section = model_in(field.annotation)
        if section is not None:
            keys += _keys(section, f"{prefix}{name}.")
        else:
            keys.append((f"{prefix}{name}", _default(field)))
    return keys


def schema_keys() -> list[tuple[str, str | None]]:
    """Every key an experiment file may set, with its default."""
    keys = _keys(RunConfig)
    for name, field in ExperimentFile.model_fields.items():
        if name in BASE_SECTIONS:
            continue
        section = model_in(field.annotation)
        keys += _keys(section, f"{name}.") if section else [(name, _default(field))]
    return keys


def test_every_key_of_the_schema_is_documented_with_its_default() -> None:
    text = (DOCS / "experiments.md").read_text(encoding="utf-8")
    keys = schema_keys()
    assert len(keys) > 80 and ("model.norm.kind", "layernorm") in keys
    wrong = []
    for key, default in keys:
        shown = "required" if default is None else f"`{default}`"
        if f"| `{key}` | {shown} |" not in text:
            wrong.append(f"{key} (default {shown})")
    assert wrong == []


def test_every_summary_key_is_described() -> None:
    text = (DOCS / "results.md").read_text(encoding="utf-8")
    assert [k for k in store.SUMMARY_KEYS if f"`{k}`" not in text] == []


def test_the_readme_fits_on_a_few_screens() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250


def _numbers(text: str) -> set[str]:
    """Every number in ``text`` as written, signs and thousands separators dropped."""
    text = text.replace("−", "-").replace(",", "")
    return {n.lstrip("+-") for n in re.findall(r"[-+]?\d+(?:\.\d+)?(?:e-?\d+)?", text)}


def _quoted_answers() -> list[tuple[str, list[str]]]:
    """(report path, the Answer lines the README quotes from it) for each example section."""
    examples = README.read_text(encoding="utf-8").split("## Example results", 1)[1]
    examples = examples.split("\n## ", 1)[0]
    quoted = []
    for section in re.split(r"^### ", examples, flags=re.M)[1:]:
        source = re.search(r"From \[`(reports/[^`]+\.md)`\]", section)
        lines = [line[2:] for line in section.splitlines() if line.startswith("> ")]
        if source and lines:
            quoted.append((source.group(1), lines))
    return quoted


def test_the_readme_quotes_the_reports_answers_word_for_word() -> None:
    quoted = _quoted_answers()
    assert {path for path, _ in quoted} >= {"reports/ln_vs_rms/report.md"}
    for path, lines in quoted:
        text = (REPO / path).read_text(encoding="utf-8")
        answer = text.split("## Answer\n", 1)[1].split("\n## ", 1)[0]
        assert lines == [line for line in answer.splitlines() if line.startswith("- ")], path


def test_the_readme_example_results_quote_nothing_but_answers_and_the_claims() -> None:
    examples = README.read_text(encoding="utf-8").split("## Example results", 1)[1]
    examples = examples.split("\n## ", 1)[0]
    for line in examples.splitlines():
        quoted = line.startswith(("> - ", "| ", "!["))  # Answers, the claims' table, figures
        if not quoted:
            assert not re.search(r"\d\.\d|\d%", line), line  # no number of its own


@pytest.mark.parametrize("page", ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_local_links_point_at_files_that_exist(page: str) -> None:
    path = README if page == "README.md" else DOCS / page
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8"))
    local = [t for t in targets if "://" not in t]
    assert [t for t in local if not (path.parent / t).exists()] == []


@pytest.mark.parametrize("page", ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_repository_paths_the_docs_name_exist(page: str) -> None:
    path = README if page == "README.md" else DOCS / page
    named = re.findall(
        r"`((?:ablate|research|tests|experiments|reports)/[\w./-]+)`", path.read_text("utf-8")
    )
    assert [p for p in named if not (REPO / p).exists()] == []


def test_the_dashboard_command_the_docs_give_installs_through_an_extra() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    extra = pyproject["project"]["optional-dependencies"]["dashboard"]
    assert any(requirement.startswith("optuna-dashboard") for requirement in extra)
    text = (DOCS / "stability-and-search.md").read_text(encoding="utf-8")
    assert "pip install -e '.[dashboard]'" in text and ".venv/bin/optuna-dashboard" in text


PAGES = ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))]
# a command's printed output, shown in a code block right below the marker
OUTPUT = re.compile(r"<!-- output: python -m ([\w.]+)((?: [\w./-]+)*) -->\n```\n(.*?)```", re.S)
# prose whose every number is one of the named committed files' (comma-separated paths)
SOURCED = re.compile(r"<!-- numbers from: ([^>]+?) -->(.*?)<!-- end numbers -->", re.S)


def _page(page: str) -> str:
    return (README if page == "README.md" else DOCS / page).read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES)
def test_the_outputs_a_page_shows_are_what_their_commands_print(page: str) -> None:
    for module, args, shown in OUTPUT.findall(_page(page)):
        printed = subprocess.run(
            [sys.executable, "-m", module, *args.split()],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert printed == shown, f"{page}: python -m {module}{args}"


@pytest.mark.parametrize("page", PAGES)
def test_the_numbers_a_page_quotes_are_in_the_files_it_names(page: str) -> None:
    for paths, text in SOURCED.findall(_page(page)):
        named = [REPO / p.strip() for p in paths.split(",")]
        found = set().union(*(_numbers(p.read_text(encoding="utf-8")) for p in named))
        missing = sorted(_numbers(re.sub(r"\]\([^)]*\)", "]", text)) - found)  # not link paths
        assert missing == [], f"{page}, numbers from {paths}: {missing}"


def test_the_stability_page_marks_what_it_quotes() -> None:
    text = _page("stability-and-search.md")
    assert len(OUTPUT.findall(text)) >= 2 and len(SOURCED.findall(text)) >= 2


ARCHITECTURE = DOCS / "architecture.md"
PACKAGE_ROW = re.compile(r"^\| `ablate\.(\w+)` \|[^|]*\|(.*)\|\s*$", re.M)
DOTTED = re.compile(
    r"(?<![\w/.])(?:ablate\.)?(core|nn|training|launch|report|bench)\.(\w+)(?:\.(\w+))?"
)
FILE_SUFFIXES = {"md", "html", "csv", "png", "json", "yaml", "py"}
MODULE_LINES = 400
MODULE_LIMIT = 450  # no module of the package is longer


def _top_level_names(cell: str) -> list[str]:
    """The backticked names of a table cell outside parentheses: the modules a row lists."""
    names, depth, i = [], 0, 0
    while i < len(cell):
        if cell[i] == "`":
            end = cell.index("`", i + 1)
            if depth == 0:
                names.append(cell[i + 1 : end])
            i = end + 1
            continue
        depth += {"(": 1, ")": -1}.get(cell[i], 0)
        i += 1
    return names


def test_the_architecture_lists_every_module_of_each_package_and_no_other() -> None:
    import pkgutil

    rows = PACKAGE_ROW.findall(ARCHITECTURE.read_text(encoding="utf-8"))
    assert {package for package, _ in rows} >= {"core", "nn", "training", "launch", "report"}
    for package, cell in rows:
        listed = {
            part.strip("/ ")
            for name in _top_level_names(cell)
            for part in name.split("+")
            if re.fullmatch(r"\s*\w+/?\s*", part)
        } - {"csrc"}
        modules = {m.name for m in pkgutil.iter_modules([str(REPO / "ablate" / package)])}
        assert listed == modules, f"ablate.{package}: {listed ^ modules}"


def _defined_at_top(module: Path) -> set[str]:
    """The names a module's source defines at its top level (read, not imported)."""
    names = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_names_the_architecture_quotes_are_defined_where_it_says() -> None:
    for match in DOTTED.finditer(ARCHITECTURE.read_text(encoding="utf-8")):
        package, module, name = match.groups()
        if module in FILE_SUFFIXES or name in FILE_SUFFIXES:
            continue  # report.md, a file
        source = REPO / "ablate" / package / f"{module}.py"
        if not source.is_file():  # a package
            source = REPO / "ablate" / package / module / "__init__.py"
        assert source.is_file(), f"{match.group(0)}: no module ablate.{package}.{module}"
        if name is not None and not (source.parent / f"{name}.py").is_file():  # a submodule
            assert name in _defined_at_top(source), f"{match.group(0)}: not defined in {source}"


def test_the_modules_the_architecture_names_as_large_are_the_large_ones() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    sentence = text[text.index("Module sizes:") :].split("`ablate/cli.py`")[0]
    named = set(re.findall(r"`(ablate/[\w/]+\.py)`", sentence))
    sources = (REPO / "ablate").rglob("*.py")
    large = {
        str(p.relative_to(REPO))
        for p in sources
        if len(p.read_text(encoding="utf-8").splitlines()) > MODULE_LINES
    }
    assert named == large, f"over {MODULE_LINES} lines: {sorted(large)}; named: {sorted(named)}"
    too_large = [
        str(p.relative_to(REPO))
        for p in (REPO / "ablate").rglob("*.py")
        if len(p.read_text(encoding="utf-8").splitlines()) > MODULE_LIMIT
    ]
    assert too_large == []


def test_the_estimators_table_is_the_committed_output_of_its_command() -> None:
    text = (DOCS / "stability-and-search.md").read_text(encoding="utf-8")
    after = text.split("<!-- estimators:begin")[1].split("-->\n", 1)[1]
    block = after.split("\n<!-- estimators:end -->")[0]
    committed = (REPO / "reports" / "reference" / "estimators.md").read_text(encoding="utf-8")
    assert block == committed.rstrip("\n")


def test_norms_md_documents_the_placement_keys_and_the_stabilisers() -> None:
    """The keys of the 2024–26 design space are explained in norms.md as well as listed in
    experiments.md (the table test above)."""
    text = (DOCS / "norms.md").read_text(encoding="utf-8")
    keys = [
        "`reordered`",
        "`model.norm.mix_post_layers",
        "`model.norm.depth_scale",
        "`model.norm.alpha_init_attn`",
        "`alpha_init_mlp`",
        "`alpha_init_final`",
        "`train.z_loss",
        "`model.softcap_attn",
        "`model.softcap_output",
    ]
    assert [key for key in keys if key not in text] == []


def test_the_main_job_writes_nothing_the_docs_or_tests_quote() -> None:
    """`make run` keeps its results and report under results/ (ignored by git): the committed
    example in reports/ln_vs_rms, which the README and these tests quote, stays as committed
    on a machine whose bits differ."""
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nrun: setup\n", 1)[1].split("\n\n", 1)[0]
    (command,) = [line.strip() for line in recipe.splitlines() if "ablate run" in line]
    assert command.endswith("ablate run experiments/ln_vs_rms.yaml --report-dir results/reports")
    assert "/results/" in (REPO / ".gitignore").read_text().splitlines()


OPENING_NAMES = {  # how the README's opening names each secondary estimand of answer.csv
    "usable LR": "usable LR",
    "divergence edge": "where its runs diverge",
    "training speed": "training speed on this CPU",
}


def test_the_readme_opens_with_the_default_answer_its_verdicts_give() -> None:
    """The one-sentence answer before "Start here" states the primary estimand's number and
    verdict at its margin, each secondary one found *equivalent* with its margin, and names
    the rest in the clause that calls them *inconclusive*, as answer.csv has them."""
    opening = " ".join(README.read_text(encoding="utf-8").split("## Start here", 1)[0].split())
    answer = pd.read_csv(REPO / "reports" / "ln_vs_rms" / "answer.csv").set_index("estimand")
    primary = answer.loc["quality at matched settings"]
    shown = f"{primary.estimate:+.4f} [{primary.low:+.4f}, {primary.high:+.4f}]"
    assert shown.replace("-", "−").lstrip("+") in opening
    margin = f"±{primary.margin:g} nats"
    said = {
        "equivalent": f"*equivalent* to LayerNorm's within {margin}",
        "inconclusive": f"*inconclusive* at a margin of {margin}",
    }
    assert said[primary.verdict] in opening
    verdicts = answer.loc[list(OPENING_NAMES), "verdict"]
    assert set(verdicts) <= {"equivalent", "inconclusive"}
    for estimand, verdict in verdicts.items():
        name = OPENING_NAMES[str(estimand)]
        if verdict == "equivalent":
            ratio = f"within ×/÷{answer.loc[estimand, 'margin']:g}"
            assert f"{name} is *equivalent* to LayerNorm's {ratio}" in opening
        else:
            clause = opening.split("while ", 1)[1].split("*inconclusive*", 1)[0]
            assert name in clause, estimand


# every time the README and the docs quote: (page, pattern, the report whose reports/times.csv
# row it comes from); groups named after the row's columns (run_hours: run_minutes / 60)
SEEDS_8, SEEDS_16 = "reference_seeds_8_15/reference", "reference_seeds_16_23/reference"
EPYC_BEFORE = "earlier_protocol/ln_vs_rms_epyc"  # the protocol before, on the new reports' CPU
LR_AT_20 = "earlier_protocol/lr_at_warmup_20/ln_vs_rms"  # the LR chosen at warmup 20
ROUNDED = "earlier_protocol/tuned_lr_rounded/ln_vs_rms"  # walks apart from the tuned runs
NO_FUTILITY = "earlier_protocol/no_futility/ln_vs_rms"  # the 2x2 run to its last look
MARGIN_02 = "earlier_protocol/margin_0.2/ln_vs_rms"  # the curve held at margin 0.2, not 0.15
MARGIN_02_LLAMA = "earlier_protocol/margin_0.2/llama_style"
NARROWER = r"narrower margin: ln_vs_rms"  # docs/early-stop.md, "A narrower margin"
WALKS_WHOLE = "earlier_protocol/walks_whole/ln_vs_rms"  # every walk point trained to the end
WHOLE_LLAMA = "earlier_protocol/walks_whole/llama_style"
HELD = r"with the walks held: "  # docs/early-stop.md, "The walks held"
PRIMARY = r"wall time with `--primary-only`: "  # and "The primary verdict alone"
PRIMARY_LN, PRIMARY_LLAMA = "primary_only/ln_vs_rms", "primary_only/llama_style"
TIME_CLAIMS = [
    ("README.md", r"The smoke run .*?: (?P<runs>\d+) runs in (?P<wall_min>[\d.]+) min", "smoke"),
    ("README.md", r"`make run` is the main job below: (?P<wall_min>[\d.]+) min", "ln_vs_rms"),
    ("README.md", r"(?P<runs>\d+) runs, (?P<wall_min>[\d.]+) min on 2 idle CPU cores", "ln_vs_rms"),
    ("README.md", r"experiments/ln_vs_rms\.yaml .*\((?P<wall_min>[\d.]+) min\)", "ln_vs_rms"),
    ("experiments.md", r"expected against (?P<wall_min>[\d.]+) min measured", "ln_vs_rms"),
    ("early-stop.md", r"less wall time \((?P<wall_min>[\d.]+) against", LR_AT_20),
    ("early-stop.md", r"took (?P<wall_min>[\d.]+) min on 2 idle cores against", ROUNDED),
    ("early-stop.md", r"trained afresh in (?P<wall_min>[\d.]+) min on 2 idle", NO_FUTILITY),
    ("early-stop.md", r"with the stop, took (?P<wall_min>[\d.]+) min on 2 idle", MARGIN_02),
    ("early-stop.md", NARROWER + r" (?P<wall_min>[\d.]+) min", WALKS_WHOLE),
    ("early-stop.md", NARROWER + r" [\d.]+ min against (?P<wall_min>[\d.]+)", MARGIN_02),
    ("early-stop.md", r"LLaMA-style (?P<wall_min>[\d.]+) min against 12", WHOLE_LLAMA),
    ("early-stop.md", HELD + r"ln_vs_rms (?P<wall_min>[\d.]+) min", "ln_vs_rms"),
    ("early-stop.md", HELD + r"ln_vs_rms [\d.]+ min against (?P<wall_min>[\d.]+)", WALKS_WHOLE),
    ("early-stop.md", HELD + r"[^(]* LLaMA-style (?P<wall_min>[\d.]+) min", "llama_style"),
    ("early-stop.md", HELD + r"[^(]* LLaMA-style [\d.]+ min against (?P<wall_min>[\d.]+)",
     WHOLE_LLAMA),
    ("early-stop.md", r"LLaMA-style [\d.]+ min against (?P<wall_min>[\d.]+) \(", MARGIN_02_LLAMA),
    ("early-stop.md", r"\([\d.]+ against (?P<wall_min>[\d.]+) min\); the report", EPYC_BEFORE),
    ("early-stop.md", PRIMARY + r"ln_vs_rms (?P<wall_min>[\d.]+) min", PRIMARY_LN),
    ("early-stop.md", PRIMARY + r"[^)]* LLaMA-style (?P<wall_min>[\d.]+) min", PRIMARY_LLAMA),
    ("README.md", r"--primary-only .*run-steps, (?P<wall_min>[\d.]+) min\)", PRIMARY_LN),
    ("stability-and-search.md", r"the base LR, (?P<run_hours>[\d.]+) h", "reference"),
    ("stability-and-search.md", r"544 more, (?P<run_hours>[\d.]+) h", SEEDS_8),
    ("stability-and-search.md", r"544 runs, (?P<run_hours>[\d.]+) h", SEEDS_16),
]  # fmt: skip


@pytest.mark.parametrize(("page", "pattern", "report"), TIME_CLAIMS)
def test_every_time_the_docs_quote_is_the_committed_reports_record(
    page: str, pattern: str, report: str
) -> None:
    """Each time is its report's row of reports/times.csv, to the digits it is quoted with."""
    found = re.search(pattern, " ".join(_page(page).split()))
    assert found, f"{page}: no match for {pattern}"
    row = read_times(REPO / "reports").loc[report]
    for column, text in found.groupdict().items():
        recorded = row["run_minutes"] / 60 if column == "run_hours" else row[column]
        digits = len(text.split(".")[1]) if "." in text else 0
        assert float(text) == round(float(recorded), digits), (page, column)


def test_the_expected_cost_the_docs_quote_is_the_designs_and_the_committed_runs() -> None:
    """docs/experiments.md's expectation for the default: the runs and run-steps its design
    trains on the simulator (held runs to their stops), and those the committed run trained."""
    from ablate.launch.expect import simulate_design

    quoted = re.search(
        r"that is (\d+) runs and ([\d,]+) run-steps against the (\d+) runs and ([\d,]+) "
        r"run-steps its committed Answer rests on",
        " ".join(_page("experiments.md").split()),
    )
    assert quoted
    design = simulate_design(load_experiment(REPO / "experiments/ln_vs_rms.yaml", "simulate"))
    committed = pd.read_csv(REPO / "reports/ln_vs_rms/cost.csv").set_index("stage").loc["all"]
    numbers = [int(n.replace(",", "")) for n in quoted.groups()]
    assert numbers == [
        sum(design.counts.counts.values()),
        sum(design.counts.steps.values()),
        committed["runs"],
        committed["run_steps"],
    ]


def test_no_experiment_file_states_a_time_of_its_own() -> None:
    """An experiment file's comments leave its time to reports/times.csv and validate."""
    timed = re.compile(r"\d\s*(?:min|minutes|h|hours)\b")
    files = sorted((REPO / "experiments").rglob("*.yaml"))
    stated = [f.name for f in files if timed.search(f.read_text(encoding="utf-8"))]
    assert len(files) > 10 and stated == []


def test_nothing_in_the_package_imports_the_research_bench() -> None:
    """research/ stays outside what `pip install .` ships: no module of ablate/ imports it."""
    importing = []
    for path in sorted((REPO / "ablate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            importing += [path.name for n in names if n.split(".")[0] == "research"]
    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert importing == [] and found["packages"]["find"]["include"] == ["ablate*"]
    assert (REPO / "research" / "held_to_runs.py").is_file()


STAGE_ROW = re.compile(r"^\| `(\w+)` \| `(ablate/launch/stages/\w+\.py)` \| ([^|]*) \|", re.M)


def test_the_stage_map_is_the_pipelines_stages_and_their_groups() -> None:
    from ablate.core.stages import RUN_GROUPS
    from ablate.launch.stages import STAGES

    text = ARCHITECTURE.read_text(encoding="utf-8")
    rows = STAGE_ROW.findall(text[text.index("## The stage map") :])
    assert [name for name, _, _ in rows] == [s.name for s in STAGES]
    for name, module, groups in rows:
        assert (REPO / module).exists() and importlib.import_module(
            module.removesuffix(".py").replace("/", ".")
        ).STAGE.name == name
        stored = [m.group(1) for part in groups.split(", ") if (m := re.match(r"`(\w+)`", part))]
        assert stored == [g.name for g in RUN_GROUPS if g.stage == name]


SECTION_ROW = re.compile(r"^\| `(\w+)` \| ((?:`report\.\w+`(?:, )?)+) \|", re.M)


def test_the_section_map_is_the_report_registry() -> None:
    from ablate.report.sections import SECTIONS, section_name

    text = ARCHITECTURE.read_text(encoding="utf-8")
    map_text = text[text.index("## The section map") : text.index("## Packages")]
    rows = SECTION_ROW.findall(map_text)
    assert [name for name, _ in rows] == [section_name(section) for section in SECTIONS]
    for _, modules in rows:
        for module in re.findall(r"`report\.(\w+)`", modules):
            assert (REPO / "ablate" / "report" / f"{module}.py").is_file(), module


def test_the_modules_the_architecture_says_read_the_lr_are_those_that_do() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    sentence = text[text.index("ten modules read `.train.lr`") :].split("a test keeps")[0]
    named = set(re.findall(r"`((?:core|launch)\.[\w.]+)`", sentence))
    reading = set()
    for path in (REPO / "ablate").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "lr":
                if isinstance(node.value, ast.Attribute) and node.value.attr == "train":
                    dotted = path.relative_to(REPO / "ablate").with_suffix("")
                    reading.add(".".join(dotted.parts))
    assert named == reading and len(named) == 10


def test_every_generated_block_of_the_docs_names_the_command_that_writes_it() -> None:
    for page in sorted(DOCS.glob("*.md")):
        for block, module in re.findall(
            r"<!-- ([\w-]+):begin(?:; generated by `python -m (research\.\w+)[^`]*`)?",
            page.read_text(encoding="utf-8"),
        ):
            assert module, f"{page.name}: {block} does not name the command that writes it"
            assert (REPO / (module.replace(".", "/") + ".py")).is_file(), module
