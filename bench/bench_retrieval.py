"""Retrieval benchmark: our layer against the raw libraries, on the same corpus and queries, in one run.

    python bench/bench_retrieval.py [--index textbooks_demo] [--queries 256] [--million]

Prints, as ratios (ours / raw; above 1 means we are faster):
  dense search   Searcher (dense only)                  vs  faiss index.search     goal >= 0.9x queries/s
  bm25 search    Searcher (bm25 only)                   vs  bm25s retrieve with its numba backend (the fastest;
                                                            our searcher uses it) goal >= 0.9x, identical top-k;
                                                            also printed: vs bm25s' default numpy backend
  Searcher.search returns every query's rows and scores (what the raw library returns); a query's hits (documents
  read from the corpus store) are assembled when first read: "read" times search plus reading every hit, and the
  cost of assembly per hit is printed.
  encoding       DenseEncoder.encode_corpus             vs  FlagModel.encode_corpus goal >= 0.9x passages/s
  build memory   peak RSS of a fresh build (subprocess) vs index bytes + one encoder batch   goal <= 1.2x
and, with --million, search latency and memory of 1,000,000 synthetic 384-d vectors with Flat and IVF-PQ.
Queries are MedQA-USMLE questions (question text only). The sides of each ratio take turns (bench/timing.py) for at
least --repeat rounds and until each has run a second; the median ratio is printed with its min-max over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved, median_seconds, ratio, shown  # noqa: E402  (bench/timing.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Precomputed:
    """Stands in for the query encoder so both sides time search alone."""

    def __init__(self, encoder, vectors):
        self.fingerprint, self.vectors = encoder.fingerprint, vectors

    def encode_queries(self, texts):
        return self.vectors[: len(texts)]


def rss_mb() -> float:
    """Current resident memory (not the peak), so growth around one step can be measured."""
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def read_all(results) -> int:
    """Read every hit of every query (assembles them), as a caller that uses them does."""
    return sum(len(h.text) for hits in results for h in hits)


def bench_dense_and_bm25(index: str, queries: list[str], k: int, repeat: int) -> dict:
    import bm25s
    import faiss

    from medr2_hooks.retrieve.build import index_dir
    from medr2_hooks.retrieve.searcher import Searcher
    from medr2_hooks.retrieve.sparse import bm25_tokenize

    folder = index_dir(index)
    probe = Searcher.open(folder)
    out = {"index": index, "passages": int(len(probe.store.passages)), "queries": len(queries), "k": k,
           "faiss_threads": faiss.omp_get_max_threads()}
    if "dense" in probe.retrievers:
        encoder = probe.query_encoder()
        vectors = encoder.encode_queries(queries)
        ours = Searcher.open(folder, retrievers=("dense",), query_encoder=Precomputed(encoder, vectors))
        raw_index = faiss.read_index(str(folder / "dense" / "index.faiss"))
        ours.search(queries[:2], k=k)  # load
        t = interleaved({"ours": lambda: ours.search(queries, k=k),
                         "read": lambda: read_all(ours.search(queries, k=k)),
                         "raw": lambda: raw_index.search(vectors, k)}, min_rounds=repeat)
        t_ours, t_read, t_raw = (median_seconds(t, side) for side in ("ours", "read", "raw"))
        out["dense"] = {"ours_qps": len(queries) / t_ours, "raw_qps": len(queries) / t_raw,
                        "ratio": ratio(t, "raw", "ours"), "ours_read_qps": len(queries) / t_read,
                        "ratio_read": ratio(t, "raw", "read"),
                        "assembly_us_per_hit": 1e6 * (t_read - t_ours) / (len(queries) * k)}
        raw_scores, raw_rows = raw_index.search(vectors, k)
        hits = ours.search(queries, k=k)
        out["dense"]["identical_top_k"] = bool(
            np.array_equal([[h.passage for h in q] for q in hits], raw_rows)
            and np.allclose([[h.scores["dense"] for h in q] for q in hits], raw_scores, rtol=0, atol=1e-6))

    ours_bm25 = Searcher.open(folder, retrievers=("bm25",))
    ours_bm25.search(queries[:2], k=k)  # load, and compile bm25s' numba kernels once (~9 s)
    raw_bm25 = bm25s.BM25.load(str(folder / "bm25"), mmap=True, show_progress=False)  # bm25s' default: numpy
    raw_numba = bm25s.BM25.load(str(folder / "bm25"), mmap=True, show_progress=False, backend="numba")
    stop = probe.manifest["bm25"]["stopwords"]

    def raw_search(retriever=raw_bm25, threads=0):
        return retriever.retrieve(bm25_tokenize(queries, stop), k=k, show_progress=False, n_threads=threads)

    raw_search(raw_numba, -1)
    t = interleaved({"ours": lambda: ours_bm25.search(queries, k=k),
                     "read": lambda: read_all(ours_bm25.search(queries, k=k)),
                     "raw": raw_search, "numba": lambda: raw_search(raw_numba, -1)}, min_rounds=repeat)
    t_ours, t_read, t_raw, t_numba = (median_seconds(t, side) for side in ("ours", "read", "raw", "numba"))
    numba_rows, numba_scores = raw_search(raw_numba, -1)
    numpy_rows, numpy_scores = raw_search()
    hits = ours_bm25.search(queries, k=k)
    our_rows = [[h.passage for h in q] for q in hits]
    our_scores = [[h.scores["bm25"] for h in q] for q in hits]
    full = all(len(r) == k for r in our_rows)  # every query matched at least k passages (else rows are -1 there)
    out["bm25"] = {"ours_qps": len(queries) / t_ours, "raw_qps": len(queries) / t_raw, "ratio": ratio(t, "raw", "ours"),
                   "raw_numba_qps": len(queries) / t_numba, "ratio_vs_raw_numba": ratio(t, "numba", "ours"),
                   "ours_read_qps": len(queries) / t_read, "ratio_read_vs_raw_numba": ratio(t, "numba", "read"),
                   "assembly_us_per_hit": 1e6 * (t_read - t_ours) / (len(queries) * k),
                   # the numba backend our searcher uses: same rows and scores
                   "identical_top_k": full and bool(np.array_equal(np.asarray(our_rows), numba_rows)
                                                    and np.allclose(our_scores, numba_scores, rtol=0, atol=1e-6)),
                   # bm25s' numpy backend: the same scores; documents with equal scores may come in another order
                   "same_scores_as_numpy_backend": full and bool(np.allclose(our_scores, numpy_scores, rtol=0,
                                                                             atol=1e-6)),
                   "queries_ordering_ties_unlike_numpy": int((np.asarray(our_rows) != numpy_rows).any(axis=1).sum())
                   if full else None}
    return out


def bench_encoding(index: str, n: int, repeat: int) -> dict:
    from FlagEmbedding import FlagModel

    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.retrieve.build import index_dir, load_manifest
    from medr2_hooks.retrieve.encoders import DenseEncoder

    folder = index_dir(index)
    cfg = load_manifest(folder)["recipe"]["dense"]
    texts = CorpusStore(folder / "corpus").passage_texts(range(n))
    ours = DenseEncoder(cfg["encoder"], cfg["pooling"], cfg["query_instruction"], cfg["max_length"], cfg["batch_size"])
    raw = FlagModel(resolve(cfg["encoder"]), pooling_method=cfg["pooling"], normalize_embeddings=True, use_fp16=False,
                    devices="cpu", batch_size=cfg["batch_size"], passage_max_length=cfg["max_length"])
    sizes = {"batch_size": cfg["batch_size"], "max_length": cfg["max_length"]}
    t = interleaved({"ours": lambda: ours.encode_corpus(texts), "raw": lambda: raw.encode_corpus(texts, **sizes)},
                    min_rounds=repeat)
    return {"passages": n, "ours_per_s": n / median_seconds(t, "ours"), "raw_per_s": n / median_seconds(t, "raw"),
            "ratio": ratio(t, "raw", "ours")}


MEMORY_PROBE = """
import json, resource, sys
from medr2_hooks.corpus.recipe import load_recipe
from medr2_hooks.corpus.store import CorpusStore
from medr2_hooks.retrieve.build import index_dir
from medr2_hooks.retrieve.encoders import DenseEncoder
r = load_recipe(sys.argv[1]); d = r.dense
texts = CorpusStore(index_dir(r.name) / "corpus").passage_texts(range(d.batch_size))
DenseEncoder(d.encoder, d.pooling, d.query_instruction, d.max_length, d.batch_size).encode_corpus(texts)
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_build_memory(recipe: str) -> dict:
    """Peak RSS of a fresh build against the index size plus the encoder with one batch in flight."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MEDR2_CACHE_DIR": tmp, "TQDM_DISABLE": "1"}
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "index", "build", recipe], env=env, check=True,
                       capture_output=True)
        wall = time.perf_counter() - t
        from medr2_hooks.corpus.recipe import load_recipe

        report = json.loads((Path(tmp) / "indexes" / load_recipe(recipe).name / "build_report.json").read_text())
        probe = subprocess.run([sys.executable, "-c", MEMORY_PROBE, recipe], env=env, check=True, capture_output=True,
                               text=True)
        batch_mb = json.loads(probe.stdout.strip().splitlines()[-1])["peak_rss_mb"]
    index_mb = report["index_bytes"] / 2**20
    return {"recipe": recipe, "wall_s": wall, "peak_rss_mb": report["peak_rss_mb"], "index_mb": index_mb,
            "encoder_one_batch_mb": batch_mb, "ratio": report["peak_rss_mb"] / (index_mb + batch_mb),
            "timings_s": report["timings_s"]}


def bench_million(n: int, dim: int, n_queries: int, k: int) -> dict:
    import faiss

    rng = np.random.default_rng(0)
    base = rng.standard_normal((n, dim), dtype=np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    noise = rng.standard_normal((n_queries, dim), dtype=np.float32)
    queries = base[rng.choice(n, n_queries, replace=False)] + 0.05 * noise
    out = {"vectors": n, "dim": dim, "queries": n_queries, "raw_vectors_mb": base.nbytes / 2**20}
    for factory, nprobe in (("Flat", None), ("IVF1024,PQ48", 16)):
        before = rss_mb()
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        t = time.perf_counter()
        if not index.is_trained:
            index.train(base[rng.choice(n, 100_000, replace=False)])
        index.add(base)
        build_s = time.perf_counter() - t
        if nprobe:
            faiss.extract_index_ivf(index).nprobe = nprobe
        with tempfile.NamedTemporaryFile() as fh:
            faiss.write_index(index, fh.name)
            size_mb = os.path.getsize(fh.name) / 2**20
        t = time.perf_counter()
        _, rows = index.search(queries, k)
        search_s = time.perf_counter() - t
        out[factory] = {"build_s": build_s, "index_mb": size_mb, "batch_latency_ms": 1000 * search_s,
                        "qps": n_queries / search_s, "rss_growth_mb": rss_mb() - before}
        del index
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", default="textbooks_demo",
                        help="recipe name or YAML path of the index to search (built first if missing)")
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5, help="at least this many rounds a ratio (and >= 1 s a side)")
    parser.add_argument("--encode", type=int, default=256, help="passages for the encoding comparison")
    parser.add_argument("--memory-recipe", default="textbooks_demo", help="recipe built fresh for the memory check")
    parser.add_argument("--million", action="store_true", help="also run the 1M synthetic vector benchmark")
    parser.add_argument("--parts", default="search,encoding,memory",
                        help="comma-separated comparisons to run: search, encoding, memory")
    args = parser.parse_args()

    from medr2_hooks import data
    from medr2_hooks.corpus.recipe import load_recipe
    from medr2_hooks.retrieve.build import build, index_dir

    recipe = load_recipe(args.index)
    args.index = recipe.name
    if not (index_dir(recipe.name) / "manifest.json").exists():
        build(recipe)
    queries = [r.question for r in data.pools("medqa_usmle").eval[: args.queries]]
    parts = set(args.parts.split(","))
    results = {}
    if "search" in parts:
        results["search"] = bench_dense_and_bm25(args.index, queries, args.k, args.repeat)
    if "encoding" in parts:
        results["encoding"] = bench_encoding(args.index, args.encode, max(1, args.repeat // 2))
    if "memory" in parts:
        results["build_memory"] = bench_build_memory(args.memory_recipe)
    if args.million:
        results["million"] = bench_million(1_000_000, 384, 256, args.k)
    if "search" in results:
        s = results["search"]
        b = s["bm25"]
        print(f"index {s['index']}: {s['passages']} passages, {s['queries']} queries, k={s['k']}, FAISS threads "
              f"{s['faiss_threads']}")
        if "dense" in s:
            d = s["dense"]
            print(f"dense search  ours {d['ours_qps']:9.1f} q/s  raw faiss {d['raw_qps']:9.1f} q/s  ratio "
                  f"{shown(d['ratio'])} (goal >= 0.9), identical top-k: {d['identical_top_k']}; every hit read: "
                  f"{d['ours_read_qps']:.1f} q/s, ratio "
                  f"{shown(d['ratio_read'])}, assembly {d['assembly_us_per_hit']:.1f} us/hit")
        print(f"bm25 search   ours {b['ours_qps']:9.1f} q/s  raw bm25s numba {b['raw_numba_qps']:9.1f} q/s  ratio "
              f"{shown(b['ratio_vs_raw_numba'])} (goal >= 0.9), identical top-k: {b['identical_top_k']} "
              "(numpy backend: "
              f"same scores {b['same_scores_as_numpy_backend']}, ties ordered otherwise in "
              f"{b['queries_ordering_ties_unlike_numpy']} queries); every hit "
              f"read: {b['ours_read_qps']:.1f} q/s, ratio {shown(b['ratio_read_vs_raw_numba'])}, assembly "
              f"{b['assembly_us_per_hit']:.1f} us/hit; raw bm25s numpy backend {b['raw_qps']:.1f} q/s: ratio "
              f"{shown(b['ratio'])}")
    if "encoding" in results:
        e = results["encoding"]
        print(f"encoding      ours {e['ours_per_s']:9.1f} p/s  raw FlagModel {e['raw_per_s']:5.1f} p/s  ratio "
              f"{shown(e['ratio'])} (goal >= 0.9)")
    if "build_memory" in results:
        m = results["build_memory"]
        print(f"build memory  peak RSS {m['peak_rss_mb']:.0f} MB vs index {m['index_mb']:.1f} MB + encoder "
              "with one batch "
              f"{m['encoder_one_batch_mb']:.0f} MB: ratio {m['ratio']:.2f}x (goal <= 1.2); build {m['wall_s']:.0f} s "
              f"{m['timings_s']}")
    if args.million:
        mm = results["million"]
        for factory in ("Flat", "IVF1024,PQ48"):
            r = mm[factory]
            print(f"1M x 384 {factory:<13} index {r['index_mb']:7.0f} MB, build {r['build_s']:6.1f} s, "
                  f"{mm['queries']} queries in {r['batch_latency_ms']:7.1f} ms ({r['qps']:.0f} q/s), RSS "
                  f"+{r['rss_growth_mb']:.0f} MB")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
