"""Where an experiment's data files are: ``data.path``, ``data.val_path`` and
``data.tokenizer_file`` made absolute relative to the experiment file, a glob expanded to its
files in sorted order (a shard set), and every file checked to exist (a text dataset's may be a
folder), each problem one :class:`~ablate.core.errors.ConfigError` line."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from ablate.core.config import RunConfig
from ablate.core.errors import ConfigError

GLOB_CHARACTERS = "*?["  # an entry with any of them is a glob


def resolve_paths(section: dict[str, Any], base_dir: Path, where: str) -> dict[str, Any]:
    """Make ``data.path`` and ``data.val_path`` absolute relative to the experiment file, each
    glob its matching files in sorted order (a list: each entry so, in its order); one file
    stays a string, several are a list (a shard set)."""
    for key in ("path", "val_path"):
        value = section.get(key)
        if isinstance(value, str) and value:
            entries = [value]
        elif isinstance(value, list) and value:
            entries = [str(entry) for entry in value]
        else:
            continue
        files = [f for entry in entries for f in _expand(entry, base_dir, where, f"data.{key}")]
        section = {**section, key: files[0] if len(files) == 1 else files}
    tokenizer = section.get("tokenizer_file")
    if isinstance(tokenizer, str) and tokenizer and not Path(tokenizer).is_absolute():
        section = {**section, "tokenizer_file": str((base_dir / tokenizer).resolve())}
    return section


def _expand(entry: str, base_dir: Path, where: str, key: str) -> list[str]:
    """One entry of ``data.path``, absolute: a file (also one whose name holds ``[``), or a
    glob's matches in sorted order (the experiment's folder taken literally, brackets and
    all)."""
    path = Path(entry) if Path(entry).is_absolute() else (base_dir / entry).resolve()
    if path.exists() or not any(c in entry for c in GLOB_CHARACTERS):
        return [str(path)]
    if Path(entry).is_absolute():
        pattern = entry
    else:
        pattern = os.path.normpath(os.path.join(glob.escape(str(base_dir.resolve())), entry))
    found = sorted(glob.glob(pattern))
    if not found:
        raise ConfigError(f"{where}: {key}: no file matches {entry}", key, "file_not_found")
    return found


def check_data_files(config: RunConfig, where: str) -> None:
    """Refuse a ``data.path`` or ``data.val_path`` file that does not exist, in one line."""
    data = config.data
    reads = ("text_file", "tokens_file", "text_dataset")
    needed = {"path": data.path} if data.source in reads else {}
    needed |= {"val_path": data.val_path, "tokenizer_file": data.tokenizer_file}
    for key, value in needed.items():
        for file in [value] if isinstance(value, str) else value or []:
            found = Path(file).exists() if data.source == "text_dataset" else Path(file).is_file()
            if not found:
                raise ConfigError(
                    f"{where}: data.{key}: file not found: {file}", f"data.{key}", "file_not_found"
                )
