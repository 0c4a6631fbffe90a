"""Corpus and index recipes (YAML files in ``index/``): which sources, how to segment, which retrievers.

A recipe's hash covers everything that changes the built artifacts, so two builds of the same recipe over
the same files give the same manifest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import settings
from ..config import ConfigError, from_dict, in_range, load_yaml
from ..fs import safe_component
from .segment import Segmentation
from .sources import READERS


@dataclass(frozen=True)
class Source:
    reader: str
    paths: str | list[str]
    base: str = "data"  # "data" (MEDR2_DATA_DIR), "recipe" (the recipe's folder) or an absolute folder
    options: dict = field(default_factory=dict)  # reader keyword arguments: language, source_type, ...

    def __post_init__(self):
        if self.reader not in READERS:
            raise ValueError(f"unknown reader {self.reader!r}; valid readers: {', '.join(READERS)}")
        import inspect

        params = list(inspect.signature(READERS[self.reader]).parameters)[3:]  # after paths, base, report
        unknown = sorted(set(self.options) - set(params))
        if unknown:
            raise ValueError(f"reader {self.reader}: unknown option {unknown[0]!r}; valid options: {', '.join(params)}")

    def path_list(self) -> list[str]:
        return [self.paths] if isinstance(self.paths, str) else list(self.paths)


@dataclass(frozen=True)
class Dense:
    encoder: str = "embedded:minilm"
    pooling: str = "mean"  # "cls" for BGE
    query_instruction: str | None = None  # BGE: "Represent this sentence for searching relevant passages: "
    max_length: int = 256
    factory: str = "Flat"  # FAISS index_factory string, inner product
    batch_size: int = 32
    shard_size: int = 1024
    train_size: int = 100_000  # vectors used to train IVF/PQ indexes (deterministic sample)
    nprobe: int = 64  # IVF indexes: inverted lists visited per query (FAISS's default, 1, loses much of the recall)
    on_disk: bool = False  # IVF indexes: inverted lists in dense/index.ivfdata, memory-mapped (faiss.contrib.ondisk)

    def __post_init__(self):
        for name in ("max_length", "batch_size", "shard_size", "train_size", "nprobe"):
            in_range(self, name, 1)
        if self.pooling not in ("mean", "cls", "last_token"):
            raise ValueError(f"pooling must be mean, cls or last_token, found {self.pooling!r}")


@dataclass(frozen=True)
class BM25:
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stopwords: str = "en"
    backend: str = "bm25s"  # bm25s (default) | pyserini (Lucene via Anserini; the sparse extra + Java 21)

    def __post_init__(self):
        in_range(self, "k1", 0)
        in_range(self, "b", 0, 1)
        if self.backend not in ("bm25s", "pyserini"):
            raise ValueError(f"unknown bm25 backend {self.backend!r}; valid: bm25s, pyserini")
        if self.backend == "pyserini" and self.method != "lucene":
            raise ValueError("the pyserini bm25 backend scores with Lucene's BM25: method must be lucene")


@dataclass(frozen=True)
class Splade:
    model: str = "naver/splade-v3"
    max_length: int = 512
    query_max_length: int = 256
    batch_size: int = 16
    index: str = "csr"  # csr (scipy matrix product) | pyserini (Lucene impact index; the sparse extra + Java 21)
    quantization: float = 100.0  # pyserini impact index: integer impact = round(weight * quantization)
    shard_size: int = 8192  # passages encoded and written together (a killed build resumes at the next shard)

    def __post_init__(self):
        for name in ("max_length", "query_max_length", "batch_size", "shard_size"):
            in_range(self, name, 1)
        in_range(self, "quantization", 0, low_open=True)
        if self.index not in ("csr", "pyserini"):
            raise ValueError(f"unknown splade index {self.index!r}; valid: csr, pyserini")


@dataclass(frozen=True)
class Recipe:
    name: str
    sources: list[Source]
    description: str = ""
    segmentation: Segmentation = field(default_factory=Segmentation)
    dense: Dense | None = field(default_factory=Dense)
    bm25: BM25 | None = field(default_factory=BM25)
    splade: Splade | None = None
    strict: bool = True  # bad input: error naming file and line (strict) or a counted skip (lenient)
    folder: str = ""  # the recipe file's folder, for base: recipe
    # Planning figures for an index not built here (sizing candidate sets and costs): mean tokens per evidence
    # unit, {passage: N, document: N}, with where they come from. Not part of the index's identity.
    planning: dict | None = None

    def __post_init__(self):
        safe_component(self.name, "index name")
        if not self.sources:
            raise ValueError("a recipe needs at least one source")
        if self.dense is None and self.bm25 is None and self.splade is None:
            raise ValueError("a recipe needs at least one retriever (dense, bm25 or splade)")

    def to_json(self) -> dict:
        """The recipe as its identity sees it (what the index is built from)."""
        out = asdict(self)
        out.pop("folder")
        out.pop("planning")
        return out

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    def base_dir(self, source: Source) -> Path:
        if source.base == "data":
            root = settings.data_dir()
            if root is None:
                raise ConfigError(f"recipe {self.name}: source {source.reader} reads from MEDR2_DATA_DIR, "
                                  "which is unset")
            return root
        if source.base == "recipe":
            return Path(self.folder)
        return Path(source.base)


def find_recipe(name_or_path: str) -> Path:
    """A recipe path, or a recipe name looked up in the repository's ``index/`` folder."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    candidate = settings.REPO_ROOT / "index" / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in (settings.REPO_ROOT / "index").glob("*.yaml"))
    raise ConfigError(f"no recipe {name_or_path!r}: give a YAML path or one of: {', '.join(known)}")


def load_recipe(name_or_path: str) -> Recipe:
    path = find_recipe(name_or_path)
    raw = load_yaml(path)
    raw.setdefault("folder", str(path.parent.resolve()))
    return from_dict(Recipe, raw, str(path))
