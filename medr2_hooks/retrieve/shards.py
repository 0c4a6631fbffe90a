"""Encoding passages shard by shard, resumably: each shard is written atomically as soon as it is encoded, and a
rerun skips every complete shard made for the same ``identity`` (encoder, corpus, shard size). Dense embeddings
are ``.npy`` arrays (memory-mapped when the FAISS index is filled); SPLADE weights are CSR ``.npz`` matrices."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..fs import atomic_save_npy, write_json


@dataclass(frozen=True)
class ShardFormat:
    pattern: str  # file name with one integer field: the shard number
    identity_file: str  # records what the shards were made from
    save: Callable[[Path, object], None]
    rows: Callable[[Path], int | None]  # rows of a readable shard on disk, None when missing or damaged


def _npy_rows(path: Path) -> int | None:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return None
    return array.shape[0] if array.ndim == 2 else None


def _csr_rows(path: Path) -> int | None:
    from scipy import sparse

    try:
        return sparse.load_npz(path).shape[0]
    except (ValueError, OSError, EOFError, KeyError):
        return None


def _save_csr(path: Path, matrix) -> None:
    from .sparse import save_csr

    save_csr(path, matrix)


NPY = ShardFormat("emb-{:05d}.npy", "shards.json", atomic_save_npy, _npy_rows)
CSR = ShardFormat("splade-{:05d}.npz", "splade-shards.json", _save_csr, _csr_rows)


def shard_paths(folder: Path, n: int, shard_size: int, fmt: ShardFormat = NPY) -> list[tuple[Path, int, int]]:
    return [(folder / fmt.pattern.format(i // shard_size), i, min(i + shard_size, n)) for i in range(0, n, shard_size)]


def encode_shards(folder: Path, n: int, texts: Callable[[int, int], list[str]], encode: Callable, shard_size: int,
                  identity: dict, progress=None, fmt: ShardFormat = NPY, part: tuple[int, int]
                  | None = None) -> list[Path]:
    """Encode passages ``[0, n)`` shard by shard, skipping shards already on disk for the same ``identity``; a
    truncated or damaged shard counts as missing and is encoded again. ``part=(i, n)``: only shards ``i, i + n,
    …`` (one node of ``medr2 index build --shard i/n``); the others are neither encoded nor returned."""
    folder.mkdir(parents=True, exist_ok=True)
    ident_path = folder / fmt.identity_file
    ident = json.dumps(identity, sort_keys=True)
    if not ident_path.exists() or ident_path.read_text() != ident:
        for old in folder.glob(fmt.pattern.replace("{:05d}", "*")):
            old.unlink()
        write_json(ident_path, identity, indent=None, sort_keys=True, ascii=True, verbatim=True)  # == ident
    paths = []
    for number, (path, start, end) in enumerate(shard_paths(folder, n, shard_size, fmt)):
        if part is not None and number % part[1] != part[0]:
            continue
        if not path.exists() or fmt.rows(path) != end - start:
            fmt.save(path, encode(texts(start, end)))
        if progress:
            progress.update(end - start)
        paths.append(path)
    return paths
