"""The on-disk corpus of a built index: documents as JSON lines with a byte-offset table (random access
without loading the corpus), and the passage table (document row, character start, end).

    corpus/docs.jsonl          one Document per line, in build order
    corpus/docs.offsets.npy    int64 byte offset of each line (n_docs + 1 entries)
    corpus/passages.npy        structured array: doc (int32), start (int64), end (int64)
    corpus/lookup.sqlite       PMID -> document rows (PubMedQA excludes a question's own paper), indexed on disk

Nothing here grows in RAM with the corpus except 8 bytes of offset a document while writing: duplicate doc ids
are found in a temporary on-disk SQLite table, PMIDs go straight to their lookup table.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections import OrderedDict
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..fs import atomic_save_npy, read_json
from .document import Document

PASSAGE_DTYPE = np.dtype([("doc", "<i4"), ("start", "<i8"), ("end", "<i8")])


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_corpus(folder: Path, batches) -> tuple[str, int, int]:
    """Write documents and passages from ``batches`` of ``(documents, passage spans per document)``, each batch
    written as it comes (memory: one batch, plus 8 bytes of offset a document); the files appear atomically at
    the end. Returns ``(corpus content hash, documents, passages)``."""
    from array import array

    folder.mkdir(parents=True, exist_ok=True)
    offsets = array("q", [0])
    docs_tmp, pass_tmp = folder / "docs.jsonl.tmp", folder / "passages.bin.tmp"
    n_passages = 0
    with open(docs_tmp, "wb") as docs_fh, open(pass_tmp, "wb") as pass_fh:
        for docs, spans in batches:
            first = len(offsets) - 1
            for doc in docs:
                line = (json.dumps(doc.to_json(), ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
                docs_fh.write(line)
                offsets.append(offsets[-1] + len(line))
            rows = np.array([(first + i, s, e) for i, doc_spans in enumerate(spans) for s, e in doc_spans],
                            dtype=PASSAGE_DTYPE)
            rows.tofile(pass_fh)
            n_passages += len(rows)
    passages = np.lib.format.open_memmap(folder / "passages.npy.tmp", mode="w+", dtype=PASSAGE_DTYPE,
                                         shape=(n_passages,))
    chunk = 1 << 20
    for start in range(0, n_passages, chunk):  # the passage table, copied a chunk at a time
        passages[start:start + chunk] = np.fromfile(pass_tmp, dtype=PASSAGE_DTYPE, count=min(chunk, n_passages - start),
                                                    offset=start * PASSAGE_DTYPE.itemsize)
    passages.flush()
    del passages
    pass_tmp.unlink()
    atomic_save_npy(folder / "docs.offsets.npy", np.frombuffer(offsets, dtype="<i8"))
    os.replace(folder / "passages.npy.tmp", folder / "passages.npy")
    os.replace(docs_tmp, folder / "docs.jsonl")
    h = hashlib.sha256()
    for name in ("docs.jsonl", "passages.npy"):
        h.update(file_sha256(folder / name).encode())
    return h.hexdigest(), len(offsets) - 1, n_passages


class CorpusStore:
    """Read-only access to a built corpus; documents are read from disk on demand and the last ``CACHED`` kept
    (a build reads passages in order, a search a few hundred documents: a bounded cache serves both, where keeping
    every document read held the whole corpus in RAM by the end of a build's pass over it)."""

    CACHED = 4096

    def __init__(self, folder: Path):
        self.folder = folder
        try:
            self.offsets = np.load(folder / "docs.offsets.npy", mmap_mode="r")
            self.passages = np.load(folder / "passages.npy", mmap_mode="r")
        except FileNotFoundError as exc:
            raise DataError(f"incomplete corpus in {folder}: {exc.filename} is missing; rebuild the index") from None
        self._fh = open(folder / "docs.jsonl", "rb")
        self._cache: OrderedDict[int, Document] = OrderedDict()  # the last CACHED documents read (LRU)

    @property
    def n_docs(self) -> int:
        return len(self.offsets) - 1

    def doc(self, row: int) -> Document:
        doc = self._cache.get(row)
        if doc is not None:
            self._cache.move_to_end(row)
            return doc
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        self._fh.seek(start)
        doc = self._cache[row] = Document.from_json(json.loads(self._fh.read(end - start)))
        if len(self._cache) > self.CACHED:
            self._cache.popitem(last=False)
        return doc

    def passage_text(self, pid: int) -> str:
        row, start, end = self.passages[pid]
        return self.doc(int(row)).text[int(start):int(end)]

    def passage_texts(self, pids) -> list[str]:
        return [self.passage_text(int(p)) for p in pids]

    def iter_docs(self):
        self._fh.seek(0)
        for line in self._fh:
            yield Document.from_json(json.loads(line))

    def doc_passage_ranges(self) -> np.ndarray:
        """``[first, last + 1)`` passage rows of each document (passages are stored grouped by document)."""
        docs = np.asarray(self.passages["doc"])
        starts = np.searchsorted(docs, np.arange(self.n_docs + 1), side="left")
        return np.stack([starts[:-1], starts[1:]], axis=1)

    def close(self) -> None:
        self._fh.close()


class SeenIds:
    """The document ids met so far, in a private temporary SQLite database (SQLite keeps a small page cache and
    spills the rest to a temporary file, so memory stays bounded at any corpus size)."""

    def __init__(self):
        self.db = sqlite3.connect("")
        self.db.execute("CREATE TABLE ids (id TEXT PRIMARY KEY) WITHOUT ROWID")

    def add(self, doc_id: str) -> bool:
        """True when ``doc_id`` is new (and remember it), False when it was seen before."""
        return self.db.execute("INSERT OR IGNORE INTO ids VALUES (?)", (doc_id,)).rowcount == 1

    def close(self) -> None:
        self.db.close()


LOOKUP = "lookup.sqlite"


class PmidLookupWriter:
    """Writes ``(pmid, document row)`` pairs as they come to ``lookup.sqlite.tmp``; ``finish`` indexes it and
    renames it into place. The same pairs in the same order give the same bytes."""

    def __init__(self, folder: Path):
        self.path, self.tmp = folder / LOOKUP, folder / (LOOKUP + ".tmp")
        self.tmp.unlink(missing_ok=True)
        self.db = sqlite3.connect(self.tmp)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("CREATE TABLE pmid (pmid TEXT NOT NULL, row INTEGER NOT NULL)")

    def add(self, pairs: list[tuple[str, int]]) -> None:
        if pairs:
            self.db.executemany("INSERT INTO pmid VALUES (?, ?)", pairs)

    def finish(self) -> None:
        self.db.execute("CREATE INDEX pmid_key ON pmid (pmid, row)")
        self.db.commit()
        self.db.close()
        os.replace(self.tmp, self.path)


class PmidLookup:
    """PMID -> document rows of a built corpus, queried on disk (never loaded whole: MedCorp's PubMed part has
    23.9M PMIDs). Corpora built before ``lookup.sqlite`` existed kept the table in ``lookup.json``; it is read."""

    def __init__(self, folder: Path):
        self.db, self.legacy = None, None
        if (folder / LOOKUP).exists():
            self.db = sqlite3.connect(f"file:{folder / LOOKUP}?mode=ro", uri=True, check_same_thread=False)
        elif (folder / "lookup.json").exists():
            self.legacy = read_json(folder / "lookup.json")["pmid"]

    def rows(self, pmid: str | None) -> set[int]:
        if not pmid:
            return set()
        if self.db is not None:
            return {r for (r,) in self.db.execute("SELECT row FROM pmid WHERE pmid = ?", (str(pmid),))}
        return set((self.legacy or {}).get(str(pmid), []))
