"""Which keys a config section has: the pydantic model behind a dotted key and the keys it
allows. :mod:`ablate.core.load` words an unknown key with it, :mod:`ablate.core.overrides`
flattens a variant's mappings by it."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel

from ablate.core.config import RunConfig


def allowed_keys(model: type[BaseModel]) -> str:
    """The keys ``model`` allows, as the error messages list them."""
    return ", ".join(model.model_fields)


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (also inside ``X | None``), or None."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def has_key(section: type[BaseModel], key: str) -> bool:
    """Whether ``key`` may be set in ``section``: one of its fields, or any key in a section
    open to other keys (``model.litgpt``, whose keys are litgpt's)."""
    return key in section.model_fields or section.model_config.get("extra") == "allow"


def section_model(parts: list[str], root: type[BaseModel] = RunConfig) -> type[BaseModel] | None:
    """The pydantic model that owns the key at ``parts`` (a dotted path), or None."""
    model: type[BaseModel] | None = root
    for part in parts:
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        model = model_in(field.annotation)
    return model


def value_prefix(parts: list[str]) -> str | None:
    """The dotted prefix of ``parts`` that names a plain value (``train.lr`` in
    ``train.lr.x``), or None when every prefix is a section."""
    for i in range(1, len(parts)):
        owner = section_model(parts[: i - 1]) if i > 1 else RunConfig
        field = owner.model_fields.get(parts[i - 1]) if owner is not None else None
        if field is not None and model_in(field.annotation) is None:
            return ".".join(parts[:i])
    return None
