"""GPU check for the index build (issue 16), prepared for a machine with GPUs; not run where none is lent.

    MEDR2_DATA_DIR=../shared/data python bench/gpu_check_index.py [--docs 20000] [--json]

On every local GPU at once (FlagEmbedding's multi-process pool, as `medr2 index build` encodes) and on the first
GPU alone, it encodes the passages of a synthetic corpus (a MedQA textbook's word distribution) with the
embedded MiniLM, and prints passages/s of each and the largest difference between the two embeddings (fp16:
expect < 1e-2). It then searches 256 MedQA questions on a FAISS Flat index sharded over all GPUs (the searcher's
setting) and on the CPU, and prints how many top-1 passages agree (expect all) and both latencies. SPLADE
(the scale bench's tiny masked LM) is encoded through sentence-transformers' pool of GPU workers and in one
process: the same terms (expect true), the largest weight difference (fp32: expect < 1e-4) and passages/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import faiss
    import numpy as np
    import torch

    from medr2_hooks import data, settings
    from medr2_hooks.corpus.synthetic import documents, word_distribution
    from medr2_hooks.retrieve.encoders import DenseEncoder, all_devices

    if not torch.cuda.is_available():
        print("no GPU here: this check needs one", file=sys.stderr)
        return 2
    words = word_distribution(settings.data_dir() / "corpus_textbooks" / "en" / "First_Aid_Step1.txt.gz")
    texts = [d["text"] for d in documents(args.docs, *words, seed=0, mean_tokens=180)]
    out = {"gpus": torch.cuda.device_count(), "passages": len(texts)}
    timings, vectors = {}, {}
    for label, device in (("all_gpus", all_devices()), ("one_gpu", "cuda:0")):
        encoder = DenseEncoder("embedded:minilm", device=device, batch_size=256)
        encoder.encode_corpus(texts[:512])  # warm
        t = time.perf_counter()
        vectors[label] = encoder.encode_corpus(texts)
        timings[label] = time.perf_counter() - t
        out[f"{label}_passages_per_s"] = round(len(texts) / timings[label], 1)
    out["max_abs_diff"] = float(np.abs(vectors["all_gpus"] - vectors["one_gpu"]).max())
    out["splade"] = _splade_pool(texts[:8192])

    queries = DenseEncoder("embedded:minilm", device="cuda:0").encode_queries(
        [r.question for r in data.load("medqa_usmle")[:256]])
    cpu = faiss.IndexFlatIP(vectors["one_gpu"].shape[1])
    cpu.add(vectors["one_gpu"])
    options = faiss.GpuMultipleClonerOptions()
    options.shard, options.useFloat16 = True, True
    gpu = faiss.index_cpu_to_all_gpus(cpu, co=options) if hasattr(faiss, "index_cpu_to_all_gpus") else None
    t = time.perf_counter()
    _, cpu_rows = cpu.search(queries, 10)
    out["cpu_search_s"] = round(time.perf_counter() - t, 4)
    if gpu is None:
        out["gpu_search"] = "faiss has no GPU support here (faiss-cpu installed)"
    else:
        t = time.perf_counter()
        _, gpu_rows = gpu.search(queries, 10)
        out["gpu_search_s"] = round(time.perf_counter() - t, 4)
        out["top1_agree"] = int((gpu_rows[:, 0] == cpu_rows[:, 0]).sum())
    print(json.dumps(out, indent=None if args.json else 1))
    return 0


def _splade_pool(texts: list[str]) -> dict:
    """SPLADE documents through sentence-transformers' pool (one worker per GPU; two workers on GPU 0 where there
    is one GPU, so the pool's code path still runs) against one process on GPU 0, with the scale bench's tiny MLM."""
    import tempfile
    from pathlib import Path

    import torch
    from bench_scale import _tiny_models

    from medr2_hooks.retrieve.encoders import all_devices
    from medr2_hooks.retrieve.sparse import SpladeEncoder

    devices = all_devices() if torch.cuda.device_count() > 1 else ["cuda:0", "cuda:0"]
    out, matrices = {"pool_devices": devices}, {}
    with tempfile.TemporaryDirectory() as root:
        mlm = _tiny_models(Path(root))[1]
        for label, device in (("pool", devices), ("one_gpu", "cuda:0")):
            encoder = SpladeEncoder(mlm, max_length=128, batch_size=64, device=device)
            encoder.encode(texts[:256])  # warm (starts the pool)
            t = time.perf_counter()
            matrices[label] = encoder.encode(texts)
            out[f"{label}_passages_per_s"] = round(len(texts) / (time.perf_counter() - t), 1)
            encoder.close()
    pool, one = matrices["pool"], matrices["one_gpu"]
    out["same_terms"] = bool(pool.nnz == one.nnz and (pool.indices == one.indices).all())
    out["max_abs_diff"] = float(abs(pool - one).max())
    return out


if __name__ == "__main__":
    sys.exit(main())
