"""Our retrievers equal the raw libraries on a collection with relevance judgements (issue 29.4).

    python bench/bench_evidence.py [--collection bioasq_gold] [--index bioasq_gold] [--k 100]

In one run, on the collection's passages and queries: our dense retriever (MiniLM through the Searcher) against raw
sentence-transformers exact search (the same model, cosine similarity, ``util.semantic_search``), and our BM25
against raw bm25s (its own tokenizer and stopwords, its default numpy backend). Passages map to their documents
(a document keeps its best passage's rank) and both sides are scored by the same code (recall@10, nDCG@10). Prints
each pair and the largest absolute difference; the goal is <= 0.005 for both measures.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def documents(rows, scores, passage_doc, doc_ids, k: int) -> list[str]:
    """Ranked document ids from ranked passage rows (a document keeps its best passage's rank)."""
    out: list[str] = []
    for row in rows:
        if row < 0:
            continue
        doc = doc_ids[int(passage_doc[row])]
        if doc not in out:
            out.append(doc)
        if len(out) == k:
            break
    return out


def main() -> int:
    import bm25s
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer, util

    from medr2_hooks.evidence import collections, runs, scores
    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.retrieve.searcher import Searcher

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collection", default="bioasq_gold")
    parser.add_argument("--index", default="bioasq_gold")
    parser.add_argument("--k", type=int, default=100)
    args = parser.parse_args()

    col = collections.collection(args.collection)
    queries, qrels = col.queries(), col.qrels()
    judged = [q for q in queries if qrels.get(q)]
    texts = [queries[q] for q in judged]
    searcher = Searcher.open(args.index)
    n = len(searcher.passage_doc)
    passages = [searcher.store.doc(int(searcher.passage_doc[p])).text[
                int(searcher.passage_start[p]):int(searcher.passage_end[p])]
                for p in range(n)]
    doc_ids = [searcher.store.doc(r).doc_id for r in range(int(searcher.passage_doc.max()) + 1)]

    started = time.perf_counter()
    ours = runs.search(args.index, dict(zip(judged, texts)), args.k)
    ours_s = time.perf_counter() - started

    raw: dict[str, dict[str, list[str]]] = {"dense": {}, "bm25": {}}
    started = time.perf_counter()
    model = SentenceTransformer(resolve(searcher.manifest["recipe"]["dense"]["encoder"]), device="cpu")
    corpus = model.encode(passages, batch_size=64, convert_to_tensor=True, normalize_embeddings=True)
    query_vectors = model.encode(texts, batch_size=64, convert_to_tensor=True, normalize_embeddings=True)
    for q, hits in zip(judged, util.semantic_search(query_vectors, corpus, top_k=args.k * 4)):
        raw["dense"][q] = documents([h["corpus_id"] for h in hits], None, searcher.passage_doc, doc_ids, args.k)
    dense_s = time.perf_counter() - started
    started = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(passages, stopwords="en", show_progress=False), show_progress=False)
    rows, _ = retriever.retrieve(bm25s.tokenize(texts, stopwords="en", show_progress=False), k=args.k * 4,
                                 show_progress=False, n_threads=torch.get_num_threads())
    for q, ranked in zip(judged, np.asarray(rows)):
        raw["bm25"][q] = documents(ranked, None, searcher.passage_doc, doc_ids, args.k)
    bm25_s = time.perf_counter() - started

    out, worst = {}, 0.0
    for name in ("dense", "bm25"):
        a = scores.score(ours[name], qrels, judged)
        b = scores.score(raw[name], qrels, judged)
        pair = {}
        for measure in ("R@10", "nDCG@10"):
            mine, theirs = np.mean(list(a[measure].values())), np.mean(list(b[measure].values()))
            pair[measure] = {"ours": round(float(mine), 4), "raw": round(float(theirs), 4),
                             "diff": round(float(mine - theirs), 4)}
            worst = max(worst, abs(mine - theirs))
        out[name] = pair
    report = {"collection": args.collection, "index": args.index, "questions": len(judged), "passages": n,
              "scores": out, "max_abs_diff": round(float(worst), 4), "goal": 0.005, "holds": bool(worst <= 0.005),
              "seconds": {"ours_search": round(ours_s, 1), "raw_dense_encode_and_search": round(dense_s, 1),
                          "raw_bm25_index_and_search": round(bm25_s, 1)}}
    print(json.dumps(report, indent=1))
    return 0 if report["holds"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
