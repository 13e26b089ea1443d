"""The ``data`` section of a run's configuration: the corpus, its tokenization, files, split and
batch-order seed (what each source reads: :mod:`ablate.training.data`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ablate.core.section import Seed, StrictSection


class DataConfig(StrictSection):
    """Corpus, tokenization, split and batch-order seed."""

    source: Literal["builtin_text", "synthetic", "text_file", "tokens_file", "text_dataset"] = (
        "builtin_text"
    )
    path: str | list[str] | None = Field(
        None,
        description="file for text_file / tokens_file; tokens_file also a shard set: a glob "
        "(its files in sorted order) or a list, read in order as one run of ids; text_dataset: "
        "parquet files (a glob or a list) or a Hugging Face save_to_disk folder",
    )
    val_path: str | list[str] | None = Field(
        None,
        description="tokens_file, text_dataset: a separate validation file, shard set or "
        "dataset (val_fraction then unused)",
    )
    text_column: str = Field(
        "text",
        description="text_dataset: the column to read: text (tokenized by data.tokenizer) or "
        "token ids (a list of ints a row, read as they are)",
    )
    token_dtype: Literal["uint16", "uint32"] = Field(
        "uint16",
        description="tokens_file: the width of raw ids (uint32 for vocabularies over 65,536); "
        ".npy files and llm.c shards carry their own",
    )
    header_magics: list[int] = Field(
        default_factory=list,
        description="tokens_file: magic numbers of llm.c-layout shards (256 int32 of header, "
        "then token_dtype ids) beside the known 20240520 (uint16) and 20240801 (uint32)",
    )
    tokenizer: Literal["byte", "char", "bpe", "file"] = "byte"
    tokenizer_file: str | None = Field(
        None,
        description="tokenizer file: a local Hugging Face tokenizer.json (text_file, "
        "text_dataset); relative to the experiment file",
    )
    eos_token: str | None = Field(
        None,
        description="text_dataset with a tokenizer file: a token of its vocabulary appended "
        "after each row (a document), e.g. <|endoftext|>",
    )
    bpe_vocab_size: int = Field(
        1024, ge=257, le=65536, description="bpe: ids in all (the 256 bytes and the merges)"
    )
    vocab_size: int | None = Field(
        None,
        ge=2,
        le=1 << 24,
        description="tokens_file: vocabulary size (default: max id + 1)",
    )
    val_fraction: float = Field(0.1, gt=0, lt=0.5)
    test_fraction: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="a test split held out after validation (the last test_fraction of the "
        "ids), scored only at evaluations, never selected on; 0: none",
    )
    seed: Seed | None = Field(None, description="seed of the batch order; default: the run's seed")
    synthetic_vocab: int = Field(64, ge=4, le=4096)
    synthetic_tokens: int = Field(200_000, ge=10_000, le=50_000_000)
    synthetic_branching: int = Field(4, ge=1, le=64)
    synthetic_seed: Seed = 1234

    @model_validator(mode="after")
    def _path_needed(self) -> DataConfig:
        if self.source in ("text_file", "tokens_file", "text_dataset") and not self.path:
            raise ValueError(f"data.source {self.source} needs data.path (a local file)")
        if (self.tokenizer == "file") != bool(self.tokenizer_file):
            raise ValueError(
                "data.tokenizer_file: give it with data.tokenizer: file (a local tokenizer.json), "
                "and only then"
            )
        if self.tokenizer == "file" and self.source not in ("text_file", "text_dataset"):
            raise ValueError(
                f"data.tokenizer: file needs text (text_file or text_dataset), not {self.source}"
            )
        if self.source == "text_dataset" and self.tokenizer == "char":
            raise ValueError("data.tokenizer: text_dataset reads byte, file or bpe, not char")
        if self.eos_token and (self.tokenizer != "file" or self.source != "text_dataset"):
            raise ValueError(
                "data.eos_token: only for a text_dataset with data.tokenizer: file (a token of "
                "its, after each row)"
            )
        texts = ("text_file", "builtin_text", "text_dataset")
        if self.tokenizer == "bpe" and self.source not in texts:
            raise ValueError(
                f"data.tokenizer: bpe needs text (text_file, builtin_text or text_dataset), not "
                f"{self.source}"
            )
        if self.tokenizer == "bpe" and self.source == "text_dataset" and not self.val_path:
            raise ValueError(
                "data.tokenizer: bpe on a text_dataset needs data.val_path (the BPE learns from "
                "the training rows alone; validation is another dataset)"
            )
        if self.val_path and self.source not in ("tokens_file", "text_dataset"):
            raise ValueError(
                f"data.val_path: only for source tokens_file or text_dataset, not {self.source}"
            )
        if isinstance(self.path, list) and self.source not in ("tokens_file", "text_dataset"):
            raise ValueError(
                f"data.path: a shard set (a list or a glob of several files) is only for "
                f"source tokens_file, not {self.source}: give one file"
            )
        for key in ("path", "val_path"):
            if getattr(self, key) == []:
                raise ValueError(f"data.{key}: an empty list: give a file, a glob or files")
        if self.source != "tokens_file" and (self.token_dtype != "uint16" or self.header_magics):
            raise ValueError(
                f"data.token_dtype and data.header_magics: only for source tokens_file, not "
                f"{self.source}"
            )
        mapped = self.source in ("tokens_file", "text_dataset")
        if self.test_fraction and (mapped or self.tokenizer in ("bpe", "file")):
            raise ValueError(
                "data.test_fraction: only for in-memory byte or char ids (builtin_text, "
                f"synthetic, text_file), not source {self.source} with tokenizer {self.tokenizer}"
            )
        if self.val_fraction + self.test_fraction >= 0.5:
            raise ValueError(
                f"data.val_fraction + data.test_fraction ({self.val_fraction:g} + "
                f"{self.test_fraction:g}) must stay below 0.5: most ids are for training"
            )
        return self
