"""Local model files and devices: what identifies a model's weights, and where a model runs by default."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=8)
def weights_revision(path: str) -> str:
    """A local model folder's content hash (config + weights), or the hub commit for hub ids. Hashed once per
    process and folder state (file names, sizes, mtimes): run identities ask for it many times."""
    folder = Path(path)
    if not folder.is_dir():
        return "hub"
    files = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()
                         if p.suffix in (".json", ".safetensors", ".bin", ".txt")))
    return _content_hash(str(folder), files)


@lru_cache(maxsize=64)
def _content_hash(folder: str, files: tuple) -> str:
    h = hashlib.sha256()
    for name, _, _ in files:
        with open(Path(folder) / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
