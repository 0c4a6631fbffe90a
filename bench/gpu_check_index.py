"""GPU check for the index build (issue 16), prepared for a machine with GPUs.

    MEDR2_DATA_DIR=../shared/data python bench/gpu_check_index.py [--docs 20000] [--json] [--out FILE]
    ... --paper-shapes TOKENIZER_DIR     # random BERT-large encoder + BERT-base SPLADE head, 510-token passages
    ... --stand-in-cpu                   # dress rehearsal on a machine without a GPU ("cpu" for "cuda:0")

Dense: the passages of a synthetic corpus (a MedQA textbook's word distribution) are encoded on every local GPU
at once (FlagEmbedding's multi-process pool, as `medr2 index build` encodes; two workers on GPU 0 where there is
one GPU, so the pool's code path still runs) and on GPU 0 in this process: passages/s of each and the largest
difference between the two embeddings (fp16: expect < 1e-2).

SPLADE: documents through sentence-transformers' pool of GPU workers and in one process: the same terms (expect
true), the largest weight difference (fp32: expect < 1e-4) and passages/s. Then the one-process head on fixed
batches: the default vocabulary chunk against whole logits (speed), and bf16 autocast against fp32 (speed, term
agreement, weight difference), which says whether the GPU default is right.

FAISS: 256 MedQA questions on a Flat index sharded over all GPUs (the searcher's setting) and on the CPU: top-1
agreement (expect all) and both latencies; reported as unavailable where faiss has no GPU support.

By default the models are the embedded MiniLM and the scale bench's tiny masked LM. ``--paper-shapes`` writes
random-weight models of the paper recipe's sizes instead (BGE-large for dense, SPLADE-v3's BERT-base for SPLADE,
the given tokenizer) and uses ~510-token passages, as `index/medcorp.yaml` segments: encoding cost does not depend
on the weights, so passages/s is what a medcorp build gets per GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=20_000, help="dense passages (SPLADE pool: a quarter)")
    parser.add_argument("--paper-shapes", metavar="TOKENIZER_DIR", help="random models of medcorp's sizes")
    parser.add_argument("--stand-in-cpu", action="store_true", help="run the GPU code paths on the CPU")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    import torch

    from medr2_hooks import settings
    from medr2_hooks.corpus.synthetic import documents, word_distribution

    if not (torch.cuda.is_available() or args.stand_in_cpu):
        print("no GPU here: this check needs one (or --stand-in-cpu for a dress rehearsal)", file=sys.stderr)
        return 2
    gpu = "cpu" if args.stand_in_cpu else "cuda:0"
    devices = ([gpu, gpu] if args.stand_in_cpu or torch.cuda.device_count() == 1
               else [f"cuda:{i}" for i in range(torch.cuda.device_count())])
    words = word_distribution(settings.data_dir() / "corpus_textbooks" / "en" / "First_Aid_Step1.txt.gz")
    shapes = {"dense_max_length": 512, "splade_max_length": 512, "splade_batch": 16, "mean_tokens": 400} \
        if args.paper_shapes else {"dense_max_length": 256, "splade_max_length": 128, "splade_batch": 64,
                                   "mean_tokens": 180}
    texts = [d["text"] for d in documents(args.docs, *words, seed=0, mean_tokens=shapes["mean_tokens"])]
    out = {"device": torch.cuda.get_device_name(0) if not args.stand_in_cpu else "cpu (stand-in)",
           "gpus": torch.cuda.device_count(), "pool_devices": devices, "passages": len(texts), **shapes}
    with tempfile.TemporaryDirectory() as root:
        encoder, mlm = _models(Path(root), args.paper_shapes)
        out["dense"], vectors = _dense(encoder, texts, gpu, devices, shapes["dense_max_length"])
        out["splade"] = _splade_pool(mlm, texts[:max(256, len(texts) // 4)], gpu, devices, shapes)
        out["splade_head"] = _splade_head(mlm, texts[:2048], gpu, shapes)
    out["faiss"] = _faiss(vectors, encoder if not args.paper_shapes else None, gpu)
    text = json.dumps(out, indent=None if args.json else 1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def _models(root: Path, tokenizer: str | None) -> tuple[str, str]:
    from bench_scale import BERT_BASE, BERT_LARGE, _random_models, _tiny_models

    if tokenizer:
        return _random_models(root / "bert_large_encoder", BERT_LARGE, root / "bert_base_mlm", BERT_BASE, tokenizer)
    return "embedded:minilm", _tiny_models(root)[1]


def _dense(encoder_name: str, texts: list[str], gpu: str, devices: list[str], max_length: int):
    import numpy as np

    from medr2_hooks.retrieve.encoders import DenseEncoder

    out, vectors = {}, {}
    for label, device in (("pool", devices), ("one_gpu", gpu)):
        encoder = DenseEncoder(encoder_name, device=device, batch_size=256, max_length=max_length)
        encoder.encode_corpus(texts[:512])  # warm (starts the pool)
        t = time.perf_counter()
        vectors[label] = encoder.encode_corpus(texts)
        out[f"{label}_passages_per_s"] = round(len(texts) / (time.perf_counter() - t), 1)
        del encoder
    out["max_abs_diff"] = float(np.abs(vectors["pool"] - vectors["one_gpu"]).max())
    return out, vectors["one_gpu"]


def _splade_pool(mlm: str, texts: list[str], gpu: str, devices: list[str], shapes: dict) -> dict:
    """SPLADE documents through sentence-transformers' pool against one process on GPU 0."""
    from medr2_hooks.retrieve.sparse import SpladeEncoder

    out, matrices = {"passages": len(texts)}, {}
    for label, device in (("pool", devices), ("one_gpu", gpu)):
        encoder = SpladeEncoder(mlm, max_length=shapes["splade_max_length"], batch_size=shapes["splade_batch"],
                                device=device)
        encoder.encode(texts[:256])  # warm (starts the pool)
        t = time.perf_counter()
        matrices[label] = encoder.encode(texts)
        out[f"{label}_passages_per_s"] = round(len(texts) / (time.perf_counter() - t), 1)
        encoder.close()
    pool, one = matrices["pool"], matrices["one_gpu"]
    out["same_terms"] = bool(pool.nnz == one.nnz and (pool.indices == one.indices).all())
    out["max_abs_diff"] = float(abs(pool - one).max())
    out["terms_per_passage"] = round(one.nnz / one.shape[0], 1)
    return out


def _splade_head(mlm: str, texts: list[str], gpu: str, shapes: dict) -> dict:
    """One process, tokenised batches fixed: the default vocabulary chunk, whole logits, and bf16 autocast."""
    import torch

    from medr2_hooks.retrieve.sparse import SpladeEncoder

    size = shapes["splade_batch"]
    encoder = SpladeEncoder(mlm, max_length=shapes["splade_max_length"], batch_size=size, device=gpu)
    batches = [encoder.tokenizer(texts[i:i + size], padding=True, truncation=True, max_length=encoder.max_length,
                                 return_tensors="pt").to(gpu) for i in range(0, len(texts), size)]

    def run(chunk: int | None = None, bf16: bool = False):
        pooled = []
        with torch.no_grad(), torch.autocast(gpu.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
            encoder._max_logits(batches[0], chunk)  # warm
            _sync(gpu)
            t = time.perf_counter()
            for batch in batches:
                pooled.append(torch.log1p(torch.relu(encoder._max_logits(batch, chunk))).float())
            _sync(gpu)
        return len(texts) / (time.perf_counter() - t), torch.cat(pooled)

    out = {"passages": len(texts), "batch": size}
    fp32_rate, fp32 = run()
    whole_rate, _ = run(chunk=encoder.vocab_size)
    bf16_rate, bf16 = run(bf16=True)
    out.update(fp32_passages_per_s=round(fp32_rate, 1), whole_logits_passages_per_s=round(whole_rate, 1),
               bf16_passages_per_s=round(bf16_rate, 1))
    terms32, terms16 = fp32 > 0, bf16 > 0
    out["bf16_term_jaccard"] = round(float((terms32 & terms16).sum() / (terms32 | terms16).sum()), 4)
    out["bf16_max_abs_diff"] = float((fp32 - bf16).abs().max())
    out["bf16_rel_l2_diff"] = float((fp32 - bf16).norm() / fp32.norm())
    return out


def _faiss(vectors, encoder_name: str | None, gpu: str) -> dict:
    """Flat index sharded over all GPUs against the CPU, on 256 MedQA questions (needs faiss-gpu)."""
    try:
        import faiss
    except ImportError as error:
        return {"skipped": f"faiss is not installed here ({error})"}
    if not hasattr(faiss, "index_cpu_to_all_gpus") or faiss.get_num_gpus() == 0:
        return {"skipped": "faiss has no GPU support here (faiss-cpu installed, or no GPU it can use)"}
    if encoder_name is None:
        return {"skipped": "random-weight encoder: its top-1 passages mean nothing; run without --paper-shapes"}
    from medr2_hooks import data
    from medr2_hooks.retrieve.encoders import DenseEncoder

    queries = DenseEncoder(encoder_name, device=gpu).encode_queries(
        [r.question for r in data.load("medqa_usmle")[:256]])
    cpu = faiss.IndexFlatIP(vectors.shape[1])
    cpu.add(vectors)
    options = faiss.GpuMultipleClonerOptions()
    options.shard, options.useFloat16 = True, True
    sharded = faiss.index_cpu_to_all_gpus(cpu, co=options)
    out = {}
    t = time.perf_counter()
    _, cpu_rows = cpu.search(queries, 10)
    out["cpu_search_s"] = round(time.perf_counter() - t, 4)
    t = time.perf_counter()
    _, gpu_rows = sharded.search(queries, 10)
    out["gpu_search_s"] = round(time.perf_counter() - t, 4)
    out["top1_agree"] = int((gpu_rows[:, 0] == cpu_rows[:, 0]).sum())
    return out


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    sys.exit(main())
