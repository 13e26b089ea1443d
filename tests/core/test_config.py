"""Experiment files: defaults, variant overrides, shipped files, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO, tiny_config, write_experiment

from ablate.core.errors import ConfigError
from ablate.core.load import load_experiment
from ablate.core.overrides import differences, flat_config, unexplained_differences

SHIPPED = sorted((REPO / "experiments").rglob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_experiment_validates(path: Path) -> None:
    experiment = load_experiment(path)
    assert experiment.variants and experiment.seeds
    for config in experiment.variants.values():
        assert config.steps() >= 1


def test_shipped_main_experiments_compare_pre_norm_layernorm_and_rmsnorm() -> None:
    for name in ("ln_vs_rms", "smoke"):
        exp = load_experiment(REPO / "experiments" / f"{name}.yaml")
        kinds = {v: c.model.norm.kind for v, c in exp.variants.items()}
        assert sorted(kinds.values()) == ["layernorm", "rmsnorm"]
        assert {c.model.norm.placement for c in exp.variants.values()} == {"pre"}
        a, b = exp.variants.values()
        assert a.model_dump(exclude={"model"}) == b.model_dump(exclude={"model"})
        assert a.model.model_dump(exclude={"norm"}) == b.model.model_dump(exclude={"norm"})
    assert len(load_experiment(REPO / "experiments" / "ln_vs_rms.yaml").seeds) == 3


def test_defaults_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "variants": {"a": {}, "b": {"model.norm.kind": "rmsnorm", "train.lr": 0.01}},
            }
        )
    )
    exp = load_experiment(path)
    assert exp.name == "e" and exp.seeds == [0]
    a, b = exp.variants["a"], exp.variants["b"]
    assert a.data.source == "builtin_text" and a.model.norm.kind == "layernorm"
    assert a.model.norm.bias is True and b.model.norm.bias is False  # the kind's default
    assert b.train.lr == 0.01 and a.train.lr == 1e-3
    assert a.steps() == a.train.tokens // (a.train.batch_size * a.model.seq_len)


ONE = "variants: {base: {}}\n"  # the explicit single-variant form


def test_the_base_alone_is_an_explicit_variant(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text("seeds: [3]\n" + ONE)
    exp = load_experiment(path)
    assert list(exp.variants) == ["base"] and exp.variants["base"] == exp.base


@pytest.mark.parametrize(
    "text, key, code",
    [
        ("", "variants", "empty"),
        ("# only a comment\n", "variants", "empty"),
        ("variants: {}\n", "variants", "empty"),
        ("seeds: [1180591620717411303424]\n" + ONE, "seeds", "less_than"),
        ("seeds: [4294967295]\n" + ONE, "seeds", "less_than"),
        ("data: {seed: 1180591620717411303424}\n" + ONE, "data.seed", "less_than"),
        ("search: {seed: 4294967296}\n" + ONE, "search.seed", "less_than"),
    ],
)
def test_empty_files_no_variants_and_huge_seeds_are_refused(
    tmp_path: Path, text: str, key: str, code: str
) -> None:
    assert _error(tmp_path, text) == (key, code)


def test_nested_and_dotted_variants_resolve_identically(tmp_path: Path) -> None:
    base = {
        "model": {"d_model": 32, "n_heads": 2, "norm": {"placement": "post", "qk_norm": True}},
        "train": {"tokens": 4096, "batch_size": 4, "lr": 0.01, "warmup_steps": 2},
    }
    spellings = {
        "dotted": {"model.norm.kind": "rmsnorm", "train.lr": 0.02},
        "nested": {"model": {"norm": {"kind": "rmsnorm"}}, "train": {"lr": 0.02}},
        "half": {"model.norm": {"kind": "rmsnorm"}, "train.lr": 0.02},
    }
    resolved = {}
    for name, overrides in spellings.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**base, "variants": {"v": overrides}}))
        exp = load_experiment(path)
        resolved[name] = exp.variants["v"]
        assert exp.overrides["v"] == {"model.norm.kind": "rmsnorm", "train.lr": 0.02}
        assert differences(exp.base, exp.variants["v"]) == {
            "model.norm.kind": ("layernorm", "rmsnorm"),
            "model.norm.bias": (True, False),  # RMSNorm's own default follows the kind
            "train.lr": (0.01, 0.02),
        }
    assert resolved["dotted"] == resolved["nested"] == resolved["half"]
    nested = resolved["nested"]
    assert nested.model.norm.placement == "post" and nested.model.norm.qk_norm  # kept
    assert nested.model.d_model == 32 and nested.train.tokens == 4096  # not reset


def test_a_variant_that_changes_an_unnamed_key_is_caught() -> None:
    exp = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    widened = exp.variants["rmsnorm"].model_copy(
        update={"train": exp.base.train.model_copy(update={"lr": 1.0})}
    )
    assert unexplained_differences(exp.base, widened, exp.overrides["rmsnorm"]) == ["train.lr"]
    assert unexplained_differences(exp.base, widened, {"train.lr": 1.0}) == [
        "model.norm.kind",
        "model.norm.bias",
    ]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_variant_differs_from_the_base_in_exactly_its_keys(path: Path) -> None:
    experiment = load_experiment(path)
    for name, config in experiment.variants.items():
        overrides = experiment.overrides[name]
        assert unexplained_differences(experiment.base, config, overrides) == [], name
        values = flat_config(config)
        for key, value in overrides.items():
            assert values[key] == value, (name, key)


def _refusal(tmp_path: Path, text: str) -> ConfigError:
    """The error ``text`` as an experiment file raises: one line, starting with the file and
    naming the key at fault."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    assert info.value.key is None or info.value.key in message
    return info.value


def _error(tmp_path: Path, text: str) -> tuple[str | None, str | None]:
    """The key and the problem's code of the error ``text`` raises."""
    refused = _refusal(tmp_path, text)
    return refused.key, refused.code


def test_unknown_key_names_the_key_and_the_allowed_ones(tmp_path: Path) -> None:
    msg = str(_refusal(tmp_path, "model:\n  norm:\n    knd: rmsnorm\n"))
    assert "model.norm.knd: unknown key" in msg and "kind, placement, eps" in msg  # the wording
    refused = _refusal(tmp_path, "modle: {}\n")
    assert (refused.key, refused.code) == ("modle", "extra_forbidden")
    assert {"variants", "grid", "model", "train"} <= set(refused.allowed)


def test_wrong_type_and_out_of_range(tmp_path: Path) -> None:
    assert _error(tmp_path, "train:\n  batch_size: many\n") == ("train.batch_size", "int_parsing")
    assert _error(tmp_path, "train:\n  lr: -0.1\n") == ("train.lr", "greater_than")
    refused = _refusal(tmp_path, "model:\n  norm:\n    kind: batchnorm\n")
    assert (refused.key, refused.code) == ("model.norm.kind", "literal_error")
    assert refused.allowed[:2] == ("layernorm", "rmsnorm") and "batchnorm" not in refused.allowed
    assert _error(tmp_path, "seeds: [0, x]\n") == ("seeds.1", "int_parsing")


def test_variant_errors_name_the_variant(tmp_path: Path) -> None:
    refused = _refusal(tmp_path, "variants:\n  v1: {model.norm.knd: rmsnorm}\n")
    assert (refused.key, refused.code) == ("model.norm.knd", "extra_forbidden")
    assert str(refused).startswith(f"{tmp_path / 'bad.yaml'}: variants.v1: ")
    assert refused.allowed[:3] == ("kind", "placement", "eps")
    refused = _refusal(tmp_path, "variants:\n  v1: {model.norm.placement: middle}\n")
    assert str(refused).startswith(f"{tmp_path / 'bad.yaml'}: variants.v1: ")
    assert (refused.key, refused.code) == ("model.norm.placement", "literal_error")
    assert refused.allowed == ("pre", "post", "sandwich", "deepnorm", "reordered", "none")
    same = _error(tmp_path, "variants:\n  a: {train.lr: 0.01}\n  b: {train.lr: 0.01}\n")
    assert same == ("variants.b", "same_run")


def test_budget_file_and_syntax_errors(tmp_path: Path) -> None:
    assert _error(tmp_path, "train: {tokens: 10}\n" + ONE) == ("train.tokens", "no_step")
    missing = _error(tmp_path, "data: {source: text_file, path: nowhere.txt}\n")
    assert missing == ("data.path", "file_not_found")
    assert _error(tmp_path, "model: [unclosed\n") == (None, "yaml")
    heads = _error(tmp_path, "model: {d_model: 30, n_heads: 4}\n")
    assert heads == ("model.d_model", "value_error")
    rope = _error(tmp_path, "model: {d_model: 12, n_heads: 4, position: rope}\n")
    assert rope == ("model.position", "value_error")
    refused = _refusal(tmp_path, "model: {mlp: relu}\n")
    assert (refused.key, refused.allowed) == ("model.mlp", ("gelu", "swiglu"))
    val = _error(tmp_path, "data: {source: builtin_text, val_path: v.bin}\n")
    assert val == ("data.val_path", "value_error")
    assert _error(tmp_path, "seeds: [1, 1]\n") == ("seeds", "repeats")
    with pytest.raises(ConfigError) as info:
        load_experiment(tmp_path / "missing.yaml")
    assert info.value.code == "file_not_found"


def test_relative_data_path_is_relative_to_the_experiment_file(tmp_path: Path) -> None:
    (tmp_path / "corpus.txt").write_text("hello world " * 200)
    path = write_experiment(tmp_path / "e.yaml", data={"source": "text_file", "path": "corpus.txt"})
    exp = load_experiment(path)
    assert all(c.data.path == str(tmp_path / "corpus.txt") for c in exp.variants.values())


def test_a_shard_set_glob_is_its_files_in_sorted_order(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    for name in ("train_000002.bin", "train_000000.bin", "train_000001.bin", "val_000000.bin"):
        (shards / name).write_bytes(b"\x01\x00" * 100)
    data = {"source": "tokens_file", "path": "shards/train_*.bin"}
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", data=data))
    expected = [str(shards / f"train_00000{k}.bin") for k in range(3)]
    assert all(c.data.path == expected for c in exp.variants.values())
    listed = {**data, "path": ["shards/train_000001.bin", "shards/train_000000.bin"]}
    exp = load_experiment(write_experiment(tmp_path / "l.yaml", data=listed))  # as listed
    assert exp.base.data.path == [
        str(shards / "train_000001.bin"),
        str(shards / "train_000000.bin"),
    ]
    one = {**data, "path": "shards/val_*.bin"}  # one match: one file, as before
    assert load_experiment(write_experiment(tmp_path / "o.yaml", data=one)).base.data.path == str(
        shards / "val_000000.bin"
    )


def test_an_experiment_in_a_folder_named_with_brackets_loads(tmp_path: Path) -> None:
    folder = tmp_path / "runs [v2]"  # a literal bracket is not a glob, in the folder or a file
    folder.mkdir()
    (folder / "train[1].bin").write_bytes(b"\x01\x00" * 100)
    (folder / "shard_1.bin").write_bytes(b"\x01\x00" * 100)
    (folder / "shard_2.bin").write_bytes(b"\x01\x00" * 100)
    one = {"source": "tokens_file", "path": "train[1].bin"}
    exp = load_experiment(write_experiment(folder / "e.yaml", data=one))
    assert exp.variants["rmsnorm"].data.path == str(folder / "train[1].bin")
    globbed = {"source": "tokens_file", "path": "shard_*.bin"}
    exp = load_experiment(write_experiment(folder / "g.yaml", data=globbed))
    assert exp.variants["rmsnorm"].data.path == [str(folder / f"shard_{k}.bin") for k in (1, 2)]


def test_a_shard_set_that_names_nothing_or_is_not_tokens_is_refused(tmp_path: Path) -> None:
    none = _error(tmp_path, "data: {source: tokens_file, path: shards/train_*.bin}\n")
    assert none == ("data.path", "file_not_found")
    (tmp_path / "a.txt").write_text("hello " * 100)
    (tmp_path / "b.txt").write_text("world " * 100)
    text = _error(tmp_path, "data: {source: text_file, path: '*.txt'}\n")
    assert text == ("data.path", "value_error")  # a text file is one file
    dtype = _error(tmp_path, "data: {token_dtype: uint32}\n")
    assert dtype == ("data.token_dtype", "value_error")


def test_a_text_dataset_takes_a_folder_and_a_tokenizer_beside_the_file(tmp_path: Path) -> None:
    (tmp_path / "saved").mkdir()
    (tmp_path / "tokenizer.json").write_text("{}")
    data = {
        "source": "text_dataset",
        "path": "saved",
        "tokenizer": "file",
        "tokenizer_file": "tokenizer.json",
    }
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", data=data))
    assert exp.base.data.path == str(tmp_path / "saved")  # a folder: save_to_disk's
    assert exp.base.data.tokenizer_file == str(tmp_path / "tokenizer.json")
    gone = _error(tmp_path, "data: {source: text_dataset, path: nowhere}\n")
    assert gone == ("data.path", "file_not_found")


def test_a_tokenizer_file_is_given_with_its_tokenizer_and_for_text_only(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text("{}")
    alone = _error(tmp_path, "data: {tokenizer_file: t.json}\n")
    assert alone == ("data.tokenizer_file", "value_error")
    missing = _error(tmp_path, "data: {source: text_file, path: t.json, tokenizer: file}\n")
    assert missing == ("data.tokenizer_file", "value_error")
    ids = _error(tmp_path, "data: {tokenizer: file, tokenizer_file: t.json}\n")
    assert ids == ("data.tokenizer", "value_error")  # builtin_text: byte ids only
    bpe = _error(tmp_path, "data: {source: text_dataset, path: t.json, tokenizer: bpe}\n")
    assert bpe == ("data.tokenizer", "value_error")
    eos = _error(tmp_path, "data: {source: text_dataset, path: t.json, eos_token: x}\n")
    assert eos == ("data.eos_token", "value_error")
    text = "data: {source: text_file, path: t.json, tokenizer: file, tokenizer_file: t.json, "
    assert _error(tmp_path, text + "eos_token: x}\n") == ("data.eos_token", "value_error")


def test_study_sections_are_typed_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(
        "sweep: {lr_min: 1.0e-3, lr_max: 1.0, points: 4}\n"
        "search: {n_trials: 3}\nmax_lr: {factor: 2.0}\nstorage: journal:/tmp/j.log\n" + ONE
    )
    exp = load_experiment(path)
    assert exp.sweep.lrs() == pytest.approx([1e-3, 1e-2, 1e-1, 1.0])
    assert exp.search.n_trials == 3 and exp.search.sampler == "tpe"
    assert exp.max_lr.per_octave == 8 and exp.max_lr.coarse_steps() == 8  # factor 2: 8 steps
    assert exp.storage == "journal:/tmp/j.log"
    assert _error(tmp_path, "max_lr: {factor: 3.0}\n") == ("max_lr.factor", "value_error")
    refused = _refusal(tmp_path, "search: {n_trails: 3}\n")
    assert (refused.key, refused.code) == ("search.n_trails", "extra_forbidden")
    assert "n_trials" in refused.allowed
    swapped = _error(tmp_path, "sweep: {lr_min: 1.0, lr_max: 0.1}\n")
    assert swapped == ("sweep.lr_min", "value_error")


def test_a_tpe_search_gets_past_its_start_up(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text("search: {n_trials: 5}\n" + ONE)
    assert load_experiment(path).search.startup_trials() == 2  # half, not Optuna's 10
    path.write_text("search: {n_trials: 40}\n" + ONE)
    assert load_experiment(path).search.startup_trials() == 10
    all_startup = _error(tmp_path, "search: {n_trials: 5, startup: 5}\n")
    assert all_startup == ("search.startup", "value_error")
    random = _error(tmp_path, "search: {n_trials: 5, sampler: random, startup: 2}\n")
    assert random == ("search.startup", "value_error")
    assert _error(tmp_path, "max_lr: {factor: 1.0}\n") == ("max_lr.factor", "greater_than")


def test_probe_and_logger_settings_are_checked(tmp_path: Path) -> None:
    interval = _error(tmp_path, "train:\n  probes: {interval: -1}\n")
    assert interval == ("train.probes.interval", "greater_than_equal")
    refused = _refusal(tmp_path, "train:\n  probes: {every: 3}\n")
    assert (refused.key, refused.allowed) == ("train.probes.every", ("interval", "attention"))
    logged = _error(tmp_path, "runtime:\n  log_every_n_steps: 0\n")
    assert logged == ("runtime.log_every_n_steps", "greater_than_equal")
    path = tmp_path / "ok.yaml"
    path.write_text("train:\n  probes: {interval: 0, attention: false}\n" + ONE)
    probes = load_experiment(path).base.train.probes
    assert probes.interval == 0 and probes.attention is False


def test_grid_expands_every_combination_with_readable_names(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "grid.yaml",
        variants={"nonorm": {"model.norm.placement": "none"}},
        grid={
            "model.norm.kind": ["layernorm", "rmsnorm"],
            "model.norm.placement": ["pre", "post"],
            "train.warmup_steps": [3, 0],
        },
    )
    exp = load_experiment(path)
    grid_names = [
        f"{k}.{p}.warmup_steps-{w}"
        for k in ("layernorm", "rmsnorm")
        for p in ("pre", "post")
        for w in (3, 0)
    ]
    assert list(exp.variants) == [*grid_names, "nonorm"]  # grid first: its first is the baseline
    post = exp.variants["rmsnorm.post.warmup_steps-0"]
    assert (post.model.norm.kind, post.model.norm.placement, post.train.warmup_steps) == (
        "rmsnorm",
        "post",
        0,
    )
    assert post.model.norm.bias is False and exp.variants[grid_names[0]].model.norm.bias is True
    assert exp.factors["layernorm.post.warmup_steps-3"] == {
        "model.norm.kind": "layernorm",
        "model.norm.placement": "post",
        "train.warmup_steps": 3,
    }
    assert "nonorm" not in exp.factors and list(exp.grid) == list(exp.factors[grid_names[0]])


def test_grid_level_names() -> None:
    from ablate.core.overrides import level_name

    assert level_name("model.norm.bias", False) == "no_bias"
    assert level_name("model.norm.fp32_reduction", True) == "fp32_reduction"
    assert level_name("model.norm.eps", 1e-08) == "eps-1e-08"
    assert level_name("train.precision", "bf16-mixed") == "bf16-mixed"
    assert level_name("train.precision", "32") == "32"


def test_grid_errors_are_one_line(tmp_path: Path) -> None:
    def grid_error(grid: dict, **extra) -> tuple[str | None, str | None]:
        extra.setdefault("variants", {})
        path = write_experiment(tmp_path / "g.yaml", grid=grid, **extra)
        with pytest.raises(ConfigError) as info:
            load_experiment(path)
        assert "\n" not in str(info.value)
        return info.value.key, info.value.code

    assert grid_error({"model.norm.kind": []}) == ("grid.model.norm.kind", "empty")
    assert grid_error({"model.norm.knd": ["rmsnorm"]}) == ("model.norm.knd", "extra_forbidden")
    wrong = grid_error({"model.norm.kind": ["rmsnorm", "groupnorm"]})
    assert wrong == ("model.norm.kind", "literal_error")
    same = grid_error(
        {"model.norm.kind": ["layernorm", "rmsnorm"], "model.norm.placement": ["none"]}
    )
    assert same == ("grid (rmsnorm.none)", "same_run")
    assert grid_error({"train.lr": [0.1, 0.1]}) == ("grid.train.lr", "repeats")
    clash = grid_error({"model.norm.kind": ["rmsnorm"]}, variants={"rmsnorm": {"train.lr": 0.1}})
    assert clash == ("variants.rmsnorm", "name_taken")


def test_convert_section_resolves_control_and_converted_runs(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "c.yaml",
        convert={"source": "layernorm", "tokens": 640, "eval_interval": 5},
    )
    plan = load_experiment(path).convert
    assert plan is not None and plan.source == "layernorm" and plan.seeds == [0, 1]
    assert plan.control.model.norm.kind == "layernorm" and plan.control.model.norm.bias is True
    assert plan.converted.model.norm.kind == "rmsnorm" and plan.converted.model.norm.bias is False
    for config in (plan.control, plan.converted):
        train = config.train
        assert (train.tokens, train.schedule, train.warmup_steps, train.eval_interval) == (
            640,
            "constant",
            0,
            5,
        )
        assert train.lr == pytest.approx(3e-3 * 0.1)  # where the source's cosine ended
    assert plan.converted.model.model_copy(update={"norm": plan.control.model.norm}) == (
        plan.control.model
    )


@pytest.mark.parametrize(
    "section, fragment",
    [
        ({"source": "batchnorm", "tokens": 640}, "convert.source: 'batchnorm' is not a variant"),
        (
            {"source": "layernorm", "tokens": 640, "target": {"model.norm.placement": "post"}},
            "'model.norm.placement' cannot change in a conversion",
        ),
        (
            {"source": "layernorm", "tokens": 640, "target": {"model.norm.kind": "layernorm"}},
            "changes nothing",
        ),
        ({"source": "layernorm", "tokens": 1}, "convert.tokens"),
        ({"source": "layernorm"}, "convert.tokens"),
        ({"source": "layernorm", "tokens": 640, "bias": "keep"}, "convert.bias"),
    ],
)
def test_convert_section_errors(tmp_path: Path, section: dict, fragment: str) -> None:
    path = write_experiment(tmp_path / "c.yaml", convert=section)
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def _sourced(tmp_path: Path, model: dict, variants: dict | None = None) -> Path:
    doc = {
        "seeds": [0],
        "data": {"source": "builtin_text"},
        "model": {"seq_len": 16, **model},
        "train": {"batch_size": 4, "tokens": 640, "warmup_steps": 2},
        "variants": variants or {"base": {}},
    }
    path = tmp_path / "sourced.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


LITGPT = {"source": "litgpt", "litgpt": {"name": "pythia-14m"}}


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ({"source": "litgpt"}, "model.litgpt: needed with model.source: litgpt and only there"),
        ({"litgpt": {"name": "x"}}, "model.litgpt: needed with model.source: litgpt"),
        ({"source": "python"}, "model.factory: needed with model.source: python"),
        ({"source": "python", "factory": "no colon"}, "'no colon' is not package.module:function"),
        ({**LITGPT, "d_model": 64}, "model.d_model: ablate's model only"),
        ({**LITGPT, "norm": {"kind": "rmsnorm"}}, "model.norm: ablate's model only"),
        (
            {"source": "litgpt", "litgpt": {"name": "pythia-14m", "block_size": 8}},
            "model.litgpt.block_size: set by ablate",
        ),
        ({"source": "litgpt", "litgpt": {"n_layer": 2}}, "model.litgpt.name: field required"),
    ],
)
def test_model_source_keys_are_checked(tmp_path: Path, model: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_experiment(_sourced(tmp_path, model))
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_litgpt_fields_are_ablatable_by_dotted_keys(tmp_path: Path) -> None:
    pytest.importorskip("litgpt")
    variants = {
        "ln": {"model.litgpt.norm_class_name": "LayerNorm"},
        "rms": {"model": {"litgpt": {"norm_class_name": "RMSNorm", "norm_eps": 1e-6}}},
    }
    experiment = load_experiment(_sourced(tmp_path, LITGPT, variants))
    ln, rms = experiment.variants["ln"], experiment.variants["rms"]
    assert rms.model.litgpt.fields() == {"norm_class_name": "RMSNorm", "norm_eps": 1e-6}
    assert differences(ln, rms) == {
        "model.litgpt.norm_class_name": ("LayerNorm", "RMSNorm"),
        "model.litgpt.norm_eps": (None, 1e-6),
    }
    assert (rms.model.norm_kind(), rms.model.norm_placement()) == ("RMSNorm", "litgpt")


def test_without_the_extra_a_litgpt_file_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "litgpt" else find_spec(name)
    )
    with pytest.raises(
        ConfigError, match=r"needs the litgpt package.*pip install -e '\.\[litgpt\]'"
    ):
        load_experiment(_sourced(tmp_path, LITGPT))


def test_conversion_maps_ablates_own_model_only(tmp_path: Path) -> None:
    model = {"source": "python", "factory": "experiments.own_model:build"}
    path = _sourced(tmp_path, model, {"layernorm": {}})
    doc = yaml.safe_load(path.read_text())
    doc["convert"] = {"source": "layernorm", "tokens": 640}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="conversion maps ablate's own model only"):
        load_experiment(path)


def test_warmup_as_long_as_the_run_is_bad_input(tmp_path: Path) -> None:
    refused = _error(tmp_path, "train: {tokens: 819200, warmup_steps: 5000}\n" + ONE)
    assert refused == ("train.warmup_steps", "no_peak")


def test_a_lattice_sweep_is_fine_through_its_range_then_coarse_and_shares_the_curves_points(
    tmp_path: Path,
) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(
        "sweep: {lr_min: 0.00048828125, lr_max: 0.015625, per_octave: 4, coarse_max: 1.0}\n"
        "curve: {lr_min: 1.0e-3, lr_max: 3.0e-2}\n" + ONE
    )
    exp = load_experiment(path)
    lrs = exp.sweep.lrs()
    assert len(lrs) == 21 + 12 and lrs[0] == 2**-11 and lrs[-1] == 1.0
    steps = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert steps[:20] == pytest.approx([2**0.25] * 20)
    assert steps[20:] == pytest.approx([2**0.5] * 12)
    assert set(exp.curve.lrs(1, 1)) <= set(lrs)  # bit for bit: the protocol's grid is a subset
    coarse = _error(tmp_path, "sweep: {coarse_max: 1.0}\n" + ONE)
    assert coarse == ("sweep.coarse_max", "value_error")
    undivided = _refusal(tmp_path, "sweep: {per_octave: 3, coarse_max: 1.0}\n" + ONE)
    assert undivided.code == "value_error" and undivided.key is not None
    assert undivided.key.startswith("sweep.")


def test_a_curve_is_the_lattice_of_its_range_grown_by_whole_octaves(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text("seeds: [0, 4]\ncurve: {lr_min: 1.0e-3, lr_max: 3.0e-2}\n" + ONE)
    exp = load_experiment(path)
    assert exp.curve_seeds() == [5, 6]  # never a final seed
    lrs = exp.curve.lrs()
    assert lrs[0] == pytest.approx(2**-9.5) and lrs[-1] == pytest.approx(2**-5.5)
    assert len(lrs) == 9 and exp.curve.lrs(1, 2)[0] == pytest.approx(2**-10.5)
    assert exp.curve.lrs(1, 2)[-1] == pytest.approx(2**-3.5)
    assert _error(tmp_path, "curve: {seeds: [7]}\n") == ("curve.seeds", "too_short")


def test_the_cpp_kernel_is_offered_for_rmsnorm_and_layernorm_only() -> None:
    from pydantic import ValidationError

    from ablate.core.config import NormConfig

    assert NormConfig(kind="layernorm", impl="cpp").impl == "cpp"
    assert NormConfig(kind="rmsnorm", impl="cpp").impl == "cpp"
    with pytest.raises(ValidationError, match="kernel for layernorm, rmsnorm; for dyt use auto"):
        NormConfig(kind="dyt", impl="cpp")


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        (
            {"norm": {"placement": "sandwich", "mix_post_layers": 1}},
            "model.norm.mix_post_layers: Mix-LN puts Post-Norm before Pre-Norm layers; it needs "
            "placement pre, not sandwich",
        ),
        (
            {"n_layers": 2, "norm": {"mix_post_layers": 2}},
            "model.norm.mix_post_layers (2) must be below model.n_layers (2)",
        ),
        (
            {"norm": {"placement": "post", "depth_scale": True}},
            "placement post has none (allowed: pre, sandwich)",
        ),
        ({"softcap_output": 0}, "model.softcap_output"),
        ({**LITGPT, "softcap_attn": 50.0}, "model.softcap_attn: ablate's model only"),
    ],
)
def test_recent_placement_and_capping_keys_are_checked(
    tmp_path: Path, model: dict, fragment: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_experiment(_sourced(tmp_path, model))
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_stabilisers_compare_with_norms_and_other_keys_do_not() -> None:
    from ablate.core.overrides import beyond_the_norm

    base = flat_config(tiny_config())
    for key, value in (("train.z_loss", 1e-4), ("model.softcap_attn", 50.0)):
        assert beyond_the_norm(base, flat_config(tiny_config(**{key: value}))) == []
    assert beyond_the_norm(base, flat_config(tiny_config(**{"train.lr": 1e-2}))) == ["train.lr"]
