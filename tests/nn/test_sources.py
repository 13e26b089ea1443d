"""Models from every source: litgpt configs by name and field, a python factory; the init by
name gives equal shared weights across norm variants whatever the source; clear one-line errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ablate.core.config import ModelConfig, NormConfig
from ablate.nn.model import (
    count_parameters,
    norm_parameter_names,
    parameter_digests,
    shared_init_digest,
)
from ablate.nn.norms import is_norm
from ablate.nn.sources import ModelSourceError, build_model

REPO = Path(__file__).resolve().parents[2]
PYTHIA = {"name": "pythia-14m", "n_layer": 2, "n_embd": 32, "n_head": 4}
LLAMA = {
    "name": "Llama-3.2-1B",
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 4,
    "n_query_groups": 2,
    "intermediate_size": 128,
}


def litgpt_cfg(seq_len: int = 16, **fields: object) -> ModelConfig:
    return ModelConfig(source="litgpt", seq_len=seq_len, litgpt={**PYTHIA, **fields})


def factory_cfg(kind: str = "layernorm", factory: str = "experiments.own_model:build"):
    return ModelConfig(
        source="python",
        factory=factory,
        d_model=32,
        n_layers=2,
        n_heads=4,
        seq_len=16,
        norm=NormConfig(kind=kind),
    )


@pytest.fixture
def repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository root as the current directory, where ``experiments.own_model`` imports."""
    monkeypatch.chdir(REPO)


def test_litgpt_model_maps_ids_to_logits_over_the_data_vocabulary() -> None:
    pytest.importorskip("litgpt")
    model = build_model(litgpt_cfg(), vocab_size=50, seed=0)
    assert type(model).__module__ == "litgpt.model"
    assert (model.config.block_size, model.config.padded_vocab_size) == (16, 50)
    assert len(model.transformer.h) == 2 and model.config.n_embd == 32
    ids = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(0))
    assert model(ids).shape == (3, 16, 50)


def test_litgpt_fields_choose_litgpts_own_norm_classes() -> None:
    litgpt = pytest.importorskip("litgpt")
    default = build_model(litgpt_cfg(), 50, 0)  # pythia: torch's LayerNorm
    rms = build_model(litgpt_cfg(norm_class_name="RMSNorm"), 50, 0)
    assert isinstance(default.transformer.h[0].norm_1, torch.nn.LayerNorm)
    assert isinstance(rms.transformer.h[0].norm_1, litgpt.model.RMSNorm)
    # every norm of both models is one ablate's probes and init recognize
    assert all(is_norm(m) for m in (rms.transformer.ln_f, default.transformer.ln_f))


@pytest.mark.parametrize("fields", [PYTHIA, LLAMA], ids=["pythia", "llama"])
def test_litgpt_init_by_name_gives_equal_shared_weights_across_norms(fields: dict) -> None:
    pytest.importorskip("litgpt")
    ln = build_model(litgpt_cfg(**{**fields, "norm_class_name": "LayerNorm"}), 50, seed=3)
    rms = build_model(litgpt_cfg(**{**fields, "norm_class_name": "RMSNorm"}), 50, seed=3)
    other_seed = build_model(litgpt_cfg(**{**fields, "norm_class_name": "RMSNorm"}), 50, seed=4)
    assert shared_init_digest(ln) == shared_init_digest(rms) != shared_init_digest(other_seed)
    # the only parameters the variants do not share are LayerNorm's biases
    ln_only = set(parameter_digests(ln)) - set(parameter_digests(rms))
    assert ln_only and all(n.endswith("bias") and n in norm_parameter_names(ln) for n in ln_only)
    # init follows ablate's scheme, not litgpt's: residual projections scaled by 1/sqrt(2 L)
    params = {name: p.detach() for name, p in rms.named_parameters()}
    proj, qkv = (
        params["transformer.h.0.attn.proj.weight"],
        params["transformer.h.0.attn.qkv.weight"],
    )
    assert float(qkv.std()) == pytest.approx(0.02, rel=0.1)
    assert float(proj.std()) == pytest.approx(0.02 / 2, rel=0.1)
    assert all(float(p.abs().sum()) == 0 for n, p in params.items() if n.endswith("bias"))


def test_a_llama_config_shrinks_by_its_own_fields() -> None:
    pytest.importorskip("litgpt")
    model = build_model(litgpt_cfg(**LLAMA), 50, seed=0)
    c = model.config
    assert (c.n_layer, c.n_embd, c.n_head, c.n_query_groups) == (2, 64, 4, 2)
    assert (c.norm_class_name, c.mlp_class_name, c.bias) == ("RMSNorm", "LLaMAMLP", False)
    assert model(torch.zeros(1, 16, dtype=torch.long)).shape == (1, 16, 50)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"n_lyer": 2}, "model.litgpt.n_lyer: not a field of litgpt's Config"),
        ({"name": "pythia-99m"}, "model.litgpt.name: 'pythia-99m' is not a supported config"),
        ({"n_embd": 30}, "model.litgpt: litgpt refused pythia-14m"),
    ],
)
def test_a_bad_litgpt_config_is_one_clear_line(fields: dict, message: str) -> None:
    pytest.importorskip("litgpt")
    with pytest.raises(ModelSourceError) as caught:
        build_model(litgpt_cfg(**fields), 50, 0)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_without_the_extra_litgpt_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litgpt", None)  # import litgpt now raises ImportError
    with pytest.raises(ModelSourceError, match=r"pip install -e '\.\[litgpt\]'"):
        build_model(litgpt_cfg(), 50, 0)


def test_a_factory_model_takes_ablates_norms(repo_cwd: None) -> None:
    ln = build_model(factory_cfg("layernorm"), 50, seed=0)
    rms = build_model(factory_cfg("rmsnorm"), 50, seed=0)
    assert type(ln).__name__ == "ParallelDecoder"
    kinds = {m.kind for m in rms.modules() if is_norm(m)}
    assert kinds == {"rmsnorm"} and type(rms.norm).__module__ == "ablate.nn.norms"
    assert shared_init_digest(ln) == shared_init_digest(rms)
    assert count_parameters(ln) - count_parameters(rms) == 3 * 32  # LayerNorm's three biases
    assert ln(torch.zeros(2, 16, dtype=torch.long)).shape == (2, 16, 50)


def _write_factories(folder: Path, module: str) -> None:
    (folder / f"{module}.py").write_text(
        "import torch\n"
        "def not_a_module(cfg, vocab, make_norm):\n"
        "    return 'model'\n"
        "def wrong_shape(cfg, vocab, make_norm):\n"
        "    return torch.nn.Sequential(torch.nn.Embedding(vocab, 8), make_norm(8))\n",
        encoding="utf-8",
    )


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("not_a_module", "returned str, not a torch nn\\.Module"),
        ("wrong_shape", r"maps ids \(1, 2\) to \(1, 2, 8\); it must give logits"),
        ("missing", "has no function 'missing'"),
    ],
)
def test_a_bad_factory_is_one_clear_line(
    function: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"user_factories_{function}"
    _write_factories(tmp_path, module)
    monkeypatch.chdir(tmp_path)  # the current directory is on the import path
    with pytest.raises(ModelSourceError, match=message):
        build_model(factory_cfg(factory=f"{module}:{function}"), 50, 0)


def test_an_unimportable_factory_names_the_module(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelSourceError, match="cannot import 'no_such_pkg.models'"):
        build_model(factory_cfg(factory="no_such_pkg.models:build"), 50, 0)
