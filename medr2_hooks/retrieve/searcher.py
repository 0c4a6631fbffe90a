"""Batched hybrid search over a built index.

>>> s = Searcher.open("textbooks")
>>> hits = s.search(["Philadelphia chromosome in CML"], k=10)   # one ranked list per query
>>> hits[0][0].doc_id, hits[0][0].scores                       # {"dense": 0.71, "bm25": 12.3}

Queries are only the text given (callers pass the question, never options or answers). ``exclude_pmids``
removes a question's own article (PubMedQA) per query. ``unit="passage"`` returns passages,
``unit="document"`` documents scored by their best passage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import Medr2Error
from .build import LUCENE, index_dir, load_manifest
from .hybrid import RRF_K, Fused, best_per_document, fuse, rrf_score

UNITS = ("passage", "document")
RETRIEVERS = ("dense", "bm25", "splade")
DOCUMENT_FETCH = 4  # passages each retriever returns per document wanted (a document holds several)


@dataclass(frozen=True)
class Hit:
    doc_id: str
    title: str
    source_type: str
    language: str
    evidence_level: int | None
    meta: dict
    passage: int  # passage row (for a document unit: its best passage)
    start: int  # character span of that passage in the document
    end: int
    text: str  # the passage (passage unit) or the whole document (document unit)
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    fused: float = 0.0

    def to_json(self, with_text: bool = True) -> dict:
        out = {"doc_id": self.doc_id, "title": self.title, "source_type": self.source_type,
               "language": self.language, "evidence_level": self.evidence_level, "meta": self.meta,
               "passage": self.passage, "start": self.start, "end": self.end, "scores": self.scores,
               "ranks": self.ranks, "fused": self.fused}
        if with_text:
            out["text"] = self.text
        return out


class Hits(Sequence[Hit]):
    """One query's ranked hits. ``Searcher.search`` finds every query's rows and scores at once; a query's hits
    (documents read from the corpus store) are assembled when the list is first read, all at once."""

    __slots__ = ("_make", "_n", "_hits")

    def __init__(self, make, n: int):
        self._make, self._n, self._hits = make, n, None

    def _all(self) -> list[Hit]:
        if self._hits is None:
            self._hits = self._make()
            self._make = None
        return self._hits

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, Hits)) else NotImplemented

    def __repr__(self) -> str:
        return f"Hits({self._all()!r})"


class Searcher:
    def __init__(self, folder: Path, retrievers: tuple[str, ...] | None = None, query_encoder=None,
                 bm25_backend: str = "numba"):
        from ..corpus.store import CorpusStore, PmidLookup

        self.folder = folder
        self.manifest = load_manifest(folder)
        available = tuple(r for r in RETRIEVERS if r in self.manifest)
        self.retrievers = tuple(retrievers or available)
        missing = [r for r in self.retrievers if r not in available]
        if missing:
            raise Medr2Error(f"index {self.manifest['name']} has no {missing[0]} retriever; it has: "
                             f"{', '.join(available)}")
        self.store = CorpusStore(folder / "corpus")
        # The passage table as plain arrays (20 bytes a passage): hit assembly indexes them per hit.
        self.passage_doc = np.ascontiguousarray(self.store.passages["doc"])
        self.passage_start = np.ascontiguousarray(self.store.passages["start"])
        self.passage_end = np.ascontiguousarray(self.store.passages["end"])
        self.ranges = self.store.doc_passage_ranges()
        self.pmids = PmidLookup(folder / "corpus")
        self._query_encoder = query_encoder
        self.bm25_backend = bm25_backend  # "numpy": bm25s' path without the JIT compile, for one-off searches
        self._dense = self._bm25 = self._splade = None

    @classmethod
    def open(cls, name_or_folder: str | Path, **kwargs) -> "Searcher":
        path = Path(name_or_folder)
        return cls(path if (path / "manifest.json").exists() else index_dir(str(name_or_folder)), **kwargs)

    # -- retrievers (loaded on first use) -------------------------------------------------------------
    def query_encoder(self):
        from .encoders import DenseEncoder

        built = self.manifest["dense"]["encoder"]
        if self._query_encoder is None:
            dense = self.manifest["recipe"]["dense"]
            self._query_encoder = DenseEncoder(dense["encoder"], dense["pooling"], dense["query_instruction"],
                                               dense["max_length"], dense["batch_size"])
        if self._query_encoder.fingerprint != built:
            raise Medr2Error(f"index {self.manifest['name']} was built with encoder {built}; refusing to search it "
                             f"with {self._query_encoder.fingerprint}")
        return self._query_encoder

    def document_side_vectors(self, queries: list[str], documents: list[str]) -> np.ndarray:
        """HyDE's search vectors (Gao et al., 2022): each query's embedding averaged with its hypothetical document's,
        the document encoded on the encoder's document side (no query instruction), as the paper's reference code
        averages them; an empty document leaves the query's embedding alone."""
        encoder = self.query_encoder()
        vectors = encoder.encode_queries(queries)
        written = [i for i, d in enumerate(documents) if d.strip()]
        if written:
            vectors[written] = (vectors[written] + encoder.encode_corpus([documents[i] for i in written])) / 2
        return vectors

    def _ranked(self, name: str, queries: list[str], depth: int,
                vectors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        if name == "dense":
            if self._dense is None:
                from .dense import DenseIndex

                from ..corpus.recipe import Dense

                self._dense = DenseIndex(self.folder / "dense" / "index.faiss",
                                         self.manifest["recipe"]["dense"].get("nprobe", Dense.nprobe))
            if vectors is None:
                vectors = self.query_encoder().encode_queries(queries)
            return self._dense.search(vectors, depth)
        if name == "bm25":
            if self._bm25 is None:
                cfg = self.manifest["bm25"]
                if cfg.get("backend") == "pyserini":
                    from .lucene import LuceneBM25Index

                    self._bm25 = LuceneBM25Index(self.folder / "bm25" / LUCENE, cfg["k1"], cfg["b"], cfg["stopwords"])
                else:
                    from .sparse import BM25Index

                    self._bm25 = BM25Index(self.folder / "bm25", cfg["stopwords"], self.bm25_backend)
            return self._bm25.search(queries, depth)
        if self._splade is None:
            from .sparse import SpladeEncoder, SpladeIndex

            cfg = self.manifest["splade"]
            encoder = SpladeEncoder(cfg["model"], cfg["max_length"], cfg["query_max_length"], cfg["batch_size"])
            if cfg.get("index") == "pyserini":
                from .lucene import LuceneImpactIndex

                self._splade = LuceneImpactIndex(self.folder / "splade" / LUCENE, encoder, cfg["quantization"])
            else:
                self._splade = SpladeIndex(self.folder / "splade", encoder)
        return self._splade.search(queries, depth)

    def embeddings(self, passages: list[int]) -> np.ndarray:
        """The stored dense embeddings of passage rows (``E(d)`` of Alg. 2), read from the memory-mapped shards."""
        if "dense" not in self.manifest:
            raise Medr2Error(f"index {self.manifest['name']} has no dense embeddings")
        if not hasattr(self, "_shards"):
            shard_size = self.manifest["recipe"]["dense"]["shard_size"]
            self._shards = (shard_size, sorted((self.folder / "dense").glob("emb-*.npy")))
            self._shard_arrays: dict[int, np.ndarray] = {}
        size, paths = self._shards
        rows = []
        for p in passages:
            shard = p // size
            if shard not in self._shard_arrays:
                self._shard_arrays[shard] = np.load(paths[shard], mmap_mode="r")
            rows.append(np.asarray(self._shard_arrays[shard][p % size]))
        return np.stack(rows) if rows else np.zeros((0, self.manifest["dense"]["encoder"]["dim"]), dtype=np.float32)

    def overlong_queries(self, queries: list[str]) -> dict[str, int]:
        """Per retriever with a query length limit (dense, SPLADE): how many ``queries`` exceed it and are cut. Only
        tokenizers are loaded (a fully cached pre-pass still counts)."""
        from transformers import AutoTokenizer

        from ..llm.embedded import resolve

        recipe, out = self.manifest["recipe"], {}
        limits = {"dense": (recipe.get("dense") or {}).get("encoder"),
                  "splade": (recipe.get("splade") or {}).get("model")}
        for name in self.retrievers:
            if name not in limits or not limits[name] or not queries:
                continue
            if not hasattr(self, "_tokenizers"):
                self._tokenizers = {}
            if name not in self._tokenizers:
                self._tokenizers[name] = AutoTokenizer.from_pretrained(resolve(limits[name]))
            if name == "dense":
                limit, prefix = recipe["dense"]["max_length"], recipe["dense"].get("query_instruction") or ""
            else:
                limit, prefix = recipe["splade"].get("query_max_length", 256), ""
            lengths = [len(ids) for ids in self._tokenizers[name]([prefix + q for q in queries])["input_ids"]]
            out[name] = sum(n > limit for n in lengths)
        return out

    # -- search ---------------------------------------------------------------------------------------
    def _excluded_rows(self, pmid: str | None) -> set[int]:
        return self.pmids.rows(pmid)

    def search(self, queries: list[str], k: int = 10, unit: str = "passage", fusion: str = "union",
               depth: int | None = None, exclude_pmids: list[str | None] | None = None,
               rrf_k: int = RRF_K, vectors: np.ndarray | None = None) -> list[Hits]:
        """Per query, the fused hits. ``union``: each retriever's top ``k`` merged (up to ``k`` × retrievers);
        ``rrf``: the top ``k`` by reciprocal rank fusion over each retriever's top ``depth`` (default
        ``max(2k, 100)``). ``vectors``: what the dense retriever searches instead of the queries' embeddings
        (:meth:`document_side_vectors`)."""
        if unit not in UNITS:
            raise Medr2Error(f"unknown evidence unit {unit!r}; valid: {', '.join(UNITS)}")
        if any(not q.strip() for q in queries):
            raise Medr2Error("empty query: every query needs text")
        exclude_pmids = exclude_pmids or [None] * len(queries)
        if len(exclude_pmids) != len(queries):
            raise Medr2Error("exclude_pmids needs one entry per query")
        per = k if fusion == "union" else (depth or max(2 * k, 100))
        excluded = [self._excluded_rows(p) if p else set() for p in exclude_pmids]
        extra = max((int(sum(self.ranges[r, 1] - self.ranges[r, 0] for r in ex)) for ex in excluded if ex), default=0)
        fetch = per * (DOCUMENT_FETCH if unit == "document" else 1) + extra
        ranked = {name: self._ranked(name, queries, fetch, vectors) for name in self.retrievers}
        if len(self.retrievers) == 1 and unit == "passage":
            return self._one_retriever(ranked, excluded, k, rrf_k)
        results = []
        for qi in range(len(queries)):
            fused, best_passage = self._fused(ranked, qi, excluded[qi], unit, per, fusion, k, rrf_k)
            results.append(Hits(lambda fused=fused, best=best_passage: [
                self._hit(f, best[f.key] if unit == "document" else f.key, unit) for f in fused], len(fused)))
        return results

    def _kept(self, rows: np.ndarray, excluded: set[int]) -> np.ndarray:
        """Which of one query's ranked passage ``rows`` are hits: not past the end (-1), not of an excluded
        document."""
        keep = rows >= 0
        if excluded:
            keep &= ~np.isin(self.passage_doc[np.maximum(rows, 0)], list(excluded))
        return keep

    def _fused(self, ranked: dict, qi: int, excluded: set[int], unit: str, per: int, fusion: str, k: int | None,
               rrf_k: int) -> tuple[list[Fused], dict[int, int]]:
        """Query ``qi``'s fused units (keys: passage rows, or document rows for ``unit="document"``) from each
        retriever's top ``per``, and each document's best passage."""
        lists, best_passage = {}, {}
        for name, (scores, rows) in ranked.items():
            mask = self._kept(rows[qi], excluded)
            keep = list(zip(rows[qi][mask].tolist(), scores[qi][mask].tolist()))
            if unit == "document":
                best = best_per_document(np.array([r for r, _ in keep], dtype=np.int64),
                                         np.array([s for _, s in keep]), self.passage_doc, per)
                lists[name] = [(doc, score) for doc, score, _ in best]
                for doc, _, passage in best:
                    best_passage.setdefault(doc, passage)  # first retriever in RETRIEVERS order wins
            else:
                lists[name] = keep[:per]
        return fuse(lists, fusion, k, rrf_k), best_passage

    def _one_retriever(self, ranked: dict, excluded: list[set[int]], k: int, rrf_k: int) -> list[Hits]:
        """Passages from one retriever: its own order, whatever the fusion (both keep its top ``k``), found with
        whole-batch array operations; each query's hits are assembled when first read."""
        (name, (scores, rows)), = ranked.items()
        valid = rows >= 0
        count = valid.sum(axis=1)
        plain = (valid.cumprod(axis=1).sum(axis=1) == count).tolist()  # the missing rows (-1) only at the end
        results = []
        for qi, (n, ex, ok) in enumerate(zip(np.minimum(count, k).tolist(), excluded, plain)):
            if ex or not ok:
                keep = self._kept(rows[qi], ex)
                r, sc = rows[qi][keep][:k], scores[qi][keep][:k]
                results.append(Hits(lambda r=r, sc=sc: self._hits_of(name, r, sc, rrf_k), len(r)))
            else:
                results.append(Hits(lambda qi=qi, n=n: self._hits_of(name, rows[qi, :n], scores[qi, :n], rrf_k), n))
        return results

    def _hits_of(self, name: str, rows: np.ndarray, scores: np.ndarray, rrf_k: int) -> list[Hit]:
        return [self._hit(Fused(row, {name: score}, {name: rank}, rrf_score(rank, rrf_k)), row, "passage")
                for rank, (row, score) in enumerate(zip(rows.tolist(), scores.tolist()))]

    def own_ranks(self, queries: list[str], pmids: list[str | None], depth: int = 100) -> list[dict[str, int | None]]:
        """Where each query's excluded article (``pmids``: PubMedQA's own abstract) would have ranked had it not been
        excluded: per retriever and for the reciprocal-rank fusion of their top ``depth`` documents, its 1-based
        document rank, or None beyond ``depth`` (or when the index does not hold it). A query without a PMID gets
        ``{}``."""
        todo = [i for i, p in enumerate(pmids) if p]
        out: list[dict[str, int | None]] = [{} for _ in queries]
        if not todo:
            return out
        if any(not queries[i].strip() for i in todo):
            raise Medr2Error("empty query: every query needs text")
        # the union of each retriever's top ``depth`` documents (as search ranks documents, nothing excluded), in
        # reciprocal-rank-fusion order; only rows are compared, no document is read
        ranked = {name: self._ranked(name, [queries[i] for i in todo], depth * DOCUMENT_FETCH)
                  for name in self.retrievers}
        for j, i in enumerate(todo):
            own = self.pmids.rows(pmids[i])
            fused, _ = self._fused(ranked, j, set(), "document", depth, "union", None, RRF_K)
            found = next(((rank, f) for rank, f in enumerate(fused, 1) if f.key in own), None)
            out[i] = {name: (found[1].ranks[name] + 1 if found and name in found[1].ranks else None)
                      for name in self.retrievers}
            out[i]["fused"] = found[0] if found and found[0] <= depth else None
        return out

    def _hit(self, fused, passage: int, unit: str) -> Hit:
        row = int(self.passage_doc[passage])
        start, end = int(self.passage_start[passage]), int(self.passage_end[passage])
        doc = self.store.doc(row)
        text = doc.text if unit == "document" else doc.text[start:end]
        return Hit(doc.doc_id, doc.title, doc.source_type, doc.language, doc.evidence_level, doc.meta, passage,
                   start, end, text, fused.scores, fused.ranks, round(fused.fused, 6))
