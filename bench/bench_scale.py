"""Corpus-scale benchmark (issue 16): synthetic corpora of N snippet-length documents through the index build,
stage by stage, each stage in its own process so its peak RSS is its own.

    python bench/bench_scale.py [--sizes 10000,100000,1000000] [--workdir DIR] [--queries 256] [--json]

Per N it prints seconds, documents/s and peak RSS for: generate (write the JSONL), corpus (read, segment and
write the corpus store in bounded batches), bm25 (streamed bm25s build), and the search latency (p50 of batches
of --queries queries) of our searcher against raw bm25s on the same saved index, with their ratio. Documents are
~200 words drawn from a MedQA textbook's word distribution (medr2_hooks.corpus.synthetic); segmentation counts
whitespace tokens, so encoder tokenisation does not hide the rest. Goals: time ~linear (1M/100k <= 12x), corpus
and bm25 peak RSS <= 1.5x from 100k to 1M (plus the index itself), search p50 within 2x of raw bm25s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _recipe(folder: Path, backend: str):
    from medr2_hooks.corpus.recipe import BM25, Recipe, Source
    from medr2_hooks.corpus.segment import Segmentation

    return Recipe(name="scale", sources=[Source(reader="generic_jsonl", paths="docs.jsonl", base=str(folder))],
                  segmentation=Segmentation(tokenizer="whitespace", max_doc_tokens=10_000, passage_tokens=254,
                                            passage_overlap=32), dense=None, bm25=BM25(backend=backend))


def stage(name: str, folder: Path, n: int, queries: int, backend: str = "bm25s") -> dict:
    """One stage in this process; returns its figures (peak RSS is this process's)."""
    t = time.perf_counter()
    out: dict = {"stage": name, "n": n, "bm25_backend": backend}
    index = folder / ("index" if backend == "bm25s" else f"index_{backend}")
    if name == "generate" and (folder / "docs.jsonl").exists():
        out["reused"] = True  # the same seed gives the same file: remove the workdir to write it again
    elif name == "generate":
        from medr2_hooks import settings
        from medr2_hooks.corpus.synthetic import documents, word_distribution, write_jsonl

        words = word_distribution(settings.data_dir() / "corpus_textbooks" / "en" / "First_Aid_Step1.txt.gz")
        write_jsonl(folder / "docs.jsonl", documents(n, *words, seed=0))
    elif name == "corpus":
        from medr2_hooks.retrieve.build import build_corpus

        out["passages"] = build_corpus(_recipe(folder, backend), index / "corpus", log=lambda *_: None)["passages"]
    elif name == "bm25":  # the whole build: the corpus stage finds its store complete and reuses it
        from medr2_hooks.retrieve.build import build

        manifest = build(_recipe(folder, backend), index, log=lambda *_: None)
        report = json.loads((index / "build_report.json").read_text())
        out.update(passages=manifest["counts"]["passages"], bm25_seconds=report["timings_s"]["bm25"],
                   corpus_reuse_seconds=report["timings_s"]["corpus"], index_mb=round(report["index_bytes"] / 1e6, 1))
    elif name == "search":
        out.update(_search(index, queries, backend))
    out["seconds"] = round(time.perf_counter() - t, 2)
    out["docs_per_s"] = round(n / out["seconds"], 1) if name != "search" and not out.get("reused") else None
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def _search(index: Path, queries: int, backend: str) -> dict:
    import bm25s
    import numpy as np

    from medr2_hooks import data
    from medr2_hooks.retrieve.searcher import Searcher
    from medr2_hooks.retrieve.sparse import bm25_tokenize

    texts = [r.question for r in data.load("medqa_usmle")[: 3 * queries]]
    batches = [texts[i:i + queries] for i in range(0, len(texts), queries)]
    searcher = Searcher.open(index)
    searcher.search(batches[0][:2], k=10)  # warm: numba compile, index pages
    ours = []
    for batch in batches:
        t = time.perf_counter()
        searcher.search(batch, k=10)
        ours.append(time.perf_counter() - t)
    if backend != "bm25s":  # Lucene: no raw bm25s index to compare with
        return {"queries": queries, "p50_s": round(float(np.median(ours)), 4)}
    raw_index = bm25s.BM25.load(str(index / "bm25"), mmap=True)
    raw_index.activate_numba_scorer()
    raw_index.retrieve(bm25_tokenize(batches[0][:2]), k=10, show_progress=False, backend_selection="numba")
    raw = []
    for batch in batches:
        t = time.perf_counter()
        raw_index.retrieve(bm25_tokenize(batch), k=10, show_progress=False, backend_selection="numba")
        raw.append(time.perf_counter() - t)
    p50, raw_p50 = float(np.median(ours)), float(np.median(raw))
    return {"queries": queries, "p50_s": round(p50, 4), "raw_bm25s_p50_s": round(raw_p50, 4),
            "ratio_ours_over_raw": round(p50 / raw_p50, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--workdir", help="where the corpora go (default: a temporary folder, removed after)")
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--bm25-backend", choices=["bm25s", "pyserini"], default="bm25s",
                        help="pyserini: Lucene's multithreaded indexer (the sparse extra and Java 21)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:  # a child: one stage, its figures as the last stdout line
        print(json.dumps(stage(args.stage, Path(args.folder), args.n, args.queries, args.bm25_backend)))
        return 0
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="medr2_scale_"))
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        folder = root / f"n{n}"
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("generate", "corpus", "bm25", "search"):
            done = subprocess.run([sys.executable, __file__, "--stage", name, "--n", str(n), "--folder", str(folder),
                                   "--queries", str(args.queries), "--bm25-backend", args.bm25_backend],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-4000:])
                return done.returncode
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
    if not args.workdir:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'N':>9} {'stage':<9} {'seconds':>9} {'docs/s':>9} {'peak RSS MB':>12}  search p50 (ours / raw bm25s)")
    for r in rows:
        extra = ""
        if r["stage"] == "search":
            extra = (f"{r['p50_s']:.3f} s / {r['raw_bm25s_p50_s']:.3f} s = {r['ratio_ours_over_raw']}x"
                     if "raw_bm25s_p50_s" in r else f"{r['p50_s']:.3f} s (Lucene)")
        print(f"{r['n']:>9} {r['stage']:<9} {r['seconds']:>9} {r['docs_per_s'] or '':>9} {r['peak_rss_mb']:>12}  {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
