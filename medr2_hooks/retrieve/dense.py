"""Dense index: passage embeddings in sharded ``.npy`` files (memory-mapped, written one shard at a time,
so a killed build resumes at the first missing shard), and a FAISS index built from them by an
``index_factory`` string (``Flat`` inner product by default; ``IVF4096,PQ64`` or ``HNSW32`` for large corpora).
FAISS uses all cores; with faiss-gpu the index is sharded over all GPUs for search (1/n of the vectors each).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import Medr2Error


def build_faiss(shards: list[Path], dim: int, factory: str, out: Path, train_size: int, seed: int = 0) -> int:
    import faiss

    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    arrays = [np.load(p, mmap_mode="r") for p in shards]
    total = sum(a.shape[0] for a in arrays)
    if not index.is_trained:
        rows = np.sort(np.random.default_rng(seed).choice(total, size=min(train_size, total), replace=False))
        index.train(_gather(arrays, rows))
    for a in arrays:
        index.add(np.ascontiguousarray(a, dtype=np.float32))
    tmp = out.with_name(out.name + ".tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, out)
    return int(index.ntotal)


def _gather(arrays: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
    bounds = np.cumsum([0] + [a.shape[0] for a in arrays])
    parts = []
    for i, a in enumerate(arrays):
        sel = rows[(rows >= bounds[i]) & (rows < bounds[i + 1])] - bounds[i]
        if len(sel):
            parts.append(np.asarray(a[sel], dtype=np.float32))
    return np.ascontiguousarray(np.concatenate(parts))


class DenseIndex:
    """A FAISS index over passage rows, loaded read-only."""

    def __init__(self, path: Path, nprobe: int | None = None):
        import faiss

        if not path.exists():
            raise Medr2Error(f"dense index missing: {path}; rebuild with medr2 index build")
        self.index = faiss.read_index(str(path))
        if nprobe is not None and hasattr(faiss, "extract_index_ivf"):
            try:
                faiss.extract_index_ivf(self.index).nprobe = nprobe
            except RuntimeError:
                pass  # not an IVF index: nothing to set
        if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
            options = faiss.GpuMultipleClonerOptions()
            options.shard = True  # each GPU holds 1/n of the vectors (a 1M+ index need not fit on one GPU)
            options.useFloat16 = True
            self.index = faiss.index_cpu_to_all_gpus(self.index, co=options)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)``, each ``[n_queries, k]``; rows are -1 past the end of the index."""
        scores, rows = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, self.ntotal))
        return scores, rows
