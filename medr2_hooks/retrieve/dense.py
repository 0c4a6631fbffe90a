"""Dense index: passage embeddings in sharded ``.npy`` files (memory-mapped, written one shard at a time,
so a killed build resumes at the first missing shard), and a FAISS index built from them by an
``index_factory`` string (``Flat`` inner product by default; ``IVF4096,PQ64`` or ``HNSW32`` for large corpora).
IVF/PQ indexes are trained on a deterministic sample and filled one shard at a time. With ``on_disk`` the inverted
lists go to ``index.ivfdata`` beside ``index.faiss`` (``faiss.contrib.ondisk``: one filled block per shard, merged
on disk) and are memory-mapped at search time, for indexes larger than RAM. FAISS uses all cores; with faiss-gpu
an in-memory index is sharded over all GPUs for search (1/n of the vectors each).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import Medr2Error


IVFDATA = "index.ivfdata"


def build_faiss(shards: list[Path], dim: int, factory: str, out: Path, train_size: int, seed: int = 0,
                on_disk: bool = False) -> int:
    import faiss

    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    arrays = [np.load(p, mmap_mode="r") for p in shards]
    total = sum(a.shape[0] for a in arrays)
    if not index.is_trained:
        rows = np.sort(np.random.default_rng(seed).choice(total, size=min(train_size, total), replace=False))
        index.train(_gather(arrays, rows))
    if on_disk:
        return _fill_on_disk(index, arrays, out)
    out.with_name(IVFDATA).unlink(missing_ok=True)  # an earlier on-disk build's lists
    for a in arrays:
        index.add(np.ascontiguousarray(a, dtype=np.float32))
    tmp = out.with_name(out.name + ".tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, out)
    return int(index.ntotal)


def _fill_on_disk(trained, arrays: list[np.ndarray], out: Path) -> int:
    """Fill a trained IVF index shard by shard, each shard's inverted lists written as a block, then merged into
    one on-disk ``index.ivfdata`` (memory: the trained quantizer plus one shard)."""
    import shutil

    import faiss
    from faiss.contrib.ondisk import merge_ondisk

    work = out.with_name(out.name + ".ondisk.tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    blocks, start = [], 0
    for i, a in enumerate(arrays):
        block = faiss.clone_index(trained)
        ids = np.arange(start, start + a.shape[0], dtype=np.int64)
        block.add_with_ids(np.ascontiguousarray(a, dtype=np.float32), ids)
        start += a.shape[0]
        blocks.append(str(work / f"block-{i:05d}.index"))
        faiss.write_index(block, blocks[-1])
        del block
    merge_ondisk(trained, blocks, str(work / IVFDATA))
    # the index names its lists file; by base name only (found beside the index: IO_FLAG_ONDISK_SAME_DIR), the
    # bytes do not depend on the folder, and a moved or copied index still finds its lists
    faiss.downcast_InvertedLists(faiss.extract_index_ivf(trained).invlists).filename = IVFDATA
    faiss.write_index(trained, str(work / out.name))
    os.replace(work / IVFDATA, out.with_name(IVFDATA))
    os.replace(work / out.name, out)  # last: index.faiss marks the index complete
    shutil.rmtree(work)
    return int(trained.ntotal)


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
        on_disk = path.with_name(IVFDATA).exists()
        # on disk: the inverted lists stay in index.ivfdata (found beside the index), memory-mapped
        self.index = faiss.read_index(str(path), faiss.IO_FLAG_ONDISK_SAME_DIR if on_disk else 0)
        if nprobe is not None:
            try:
                faiss.extract_index_ivf(self.index).nprobe = nprobe
            except RuntimeError:
                pass  # not an IVF index: nothing to set
        if not on_disk and hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
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
