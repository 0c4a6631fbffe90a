"""Sparse retrievers.

- BM25 through bm25s (the embedded default): documents and queries go through the same tokenizer
  (:func:`bm25_tokenize`), the index is saved with bm25s' own format and memory-mapped for search.
- SPLADE (``naver/splade-v3`` by hub id): masked-LM logits, ``w_j = max_i log(1 + relu(logit_ij))`` over the
  attended tokens, vocabulary-sized sparse vectors, dot-product scoring as a CSR matrix product.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from ..llm.embedded import resolve


def bm25_tokenize(texts: list[str], stopwords: str = "en") -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(texts, lower=True, stopwords=stopwords, return_ids=False, show_progress=False)


class TokenIds:
    """Every passage's token ids as one flat int32 file plus offsets, handed to bm25s as its ``corpus.ids``: bm25s
    iterates them passage by passage (twice, plus once for lengths), so the corpus's tokens are never all in RAM.
    ``remap`` renumbers the first-seen ids into the sorted vocabulary's."""

    def __init__(self, path: Path, offsets: np.ndarray, remap: np.ndarray):
        self.offsets, self.remap = offsets, remap
        self.flat = np.memmap(path, dtype=np.int32, mode="r") if offsets[-1] else np.zeros(0, np.int32)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self):
        flat, offsets, remap = self.flat, self.offsets, self.remap
        for i in range(len(self)):
            yield remap[flat[offsets[i]:offsets[i + 1]]].tolist()


def build_bm25(batches, folder: Path, k1: float, b: float, method: str, stopwords: str) -> int:
    """A bm25s index of the passages in ``batches`` (lists of texts, in passage order), tokenised batch by batch
    and kept as ids on disk while bm25s scores them; returns the number of passages. The saved index is the same,
    byte for byte, as bm25s' own ``index`` of all the tokens at once (``tests/test_scale.py``)."""
    import bm25s

    scratch = folder.with_name(folder.name + ".ids.int32")
    vocab: dict[str, int] = {}
    offsets = [0]
    with open(scratch, "wb") as fh:
        for texts in batches:
            for doc in bm25_tokenize(texts, stopwords):
                np.fromiter((vocab.setdefault(t, len(vocab)) for t in doc), np.int32, len(doc)).tofile(fh)
                offsets.append(offsets[-1] + len(doc))
    # bm25s numbers its vocabulary in set order, which changes with Python's hash seed; a sorted vocabulary
    # makes the saved index byte-identical from one build to the next.
    terms = sorted(vocab)
    remap = np.empty(len(terms), np.int32)
    remap[np.fromiter((vocab[t] for t in terms), np.int64, len(terms))] = np.arange(len(terms), dtype=np.int32)
    ids = TokenIds(scratch, np.asarray(offsets, np.int64), remap)
    retriever = bm25s.BM25(k1=k1, b=b, method=method)
    retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab={t: i for i, t in enumerate(terms)}),
                    show_progress=False)
    del ids
    scratch.unlink()
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    retriever.save(str(tmp), show_progress=False)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return len(offsets) - 1


class BM25Index:
    """A saved bm25s index, searched with bm25s' numba backend (its compiled scorer and heap top-k, all cores).

    The numba backend sums each query term's precomputed scores in the same order as bm25s' default numpy
    backend, so scores are bit-identical; it is ~15-20x faster per query, after a one-off JIT compile (~9 s per
    process). ``backend="numpy"`` selects bm25s' default path (no compile; for one-off searches). Hits with a
    zero score (no query term in the passage) are not hits: their rows are -1.
    """

    BACKENDS = ("numba", "numpy")

    def __init__(self, folder: Path, stopwords: str = "en", backend: str = "numba"):
        import bm25s

        if backend not in self.BACKENDS:
            raise ValueError(f"unknown bm25s backend {backend!r}; valid: {', '.join(self.BACKENDS)}")
        self.backend = backend
        self.retriever = bm25s.BM25.load(str(folder), mmap=True, show_progress=False, backend=backend)
        self.stopwords = stopwords
        self.n_docs = int(self.retriever.scores["num_docs"])

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)``, each ``[n_queries, k]``; missing hits (no query term matches) have rows -1."""
        k = min(k, self.n_docs)
        tokens = bm25_tokenize(queries, self.stopwords)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        scores = np.zeros((len(queries), k), dtype=np.float32)
        ids = [self.retriever.get_tokens_ids(t) for t in tokens]  # a query with no known term has no hits
        known = [i for i, t in enumerate(ids) if t]
        if known:
            threads = -1 if self.backend == "numba" else 0  # numba: its parallel kernel on every core
            # numba takes the ids (looked up once); bm25s' numpy path takes the tokens
            given = [(ids if self.backend == "numba" else tokens)[i] for i in known]
            res_rows, res_scores = self.retriever.retrieve(given, k=k, show_progress=False, n_threads=threads)
            rows[known], scores[known] = res_rows, res_scores
        rows[scores <= 0] = -1
        scores[rows < 0] = 0.0
        return scores, rows


class SpladeEncoder:
    """SPLADE document/query encoder on any masked-LM checkpoint (weights from the hub or a local folder).

    ``device``: one device, or a list of devices that documents are encoded on together through
    sentence-transformers' multi-process pool (``SparseEncoder``, one worker process per GPU; building passes
    :func:`~.encoders.all_devices`). Both give the same weights: ``max_i log(1 + relu(logit_ij))`` over the
    attended tokens. Queries are encoded in this process, on the first device."""

    def __init__(self, name: str, max_length: int = 512, query_max_length: int = 256, batch_size: int = 16,
                 device: str | list[str] | None = None):
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        from ..llm.local import default_device

        self.name, self.max_length, self.query_max_length = name, max_length, query_max_length
        self.batch_size = batch_size
        self.path = resolve(name)
        devices = [device or default_device()] if device is None or isinstance(device, str) else list(device)
        self.device, self.pool_devices = devices[0], devices if len(devices) > 1 else None
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModelForMaskedLM.from_pretrained(self.path).to(self.device).eval()
        self.vocab_size = int(self.model.config.vocab_size)
        self._torch, self._pool, self._st = torch, None, None  # _st: the SparseEncoder a pool runs
        self._projection = _detach_output_projection(self.model, self.tokenizer, self.device)

    def vocabulary(self) -> list[str]:
        """The term of each vocabulary id (what a Lucene impact index stores and a query names)."""
        return self.tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))

    def encode(self, texts: list[str], query: bool = False):
        """CSR matrix ``[len(texts), vocab_size]`` of SPLADE weights.

        On one device, the next batch is tokenised in a thread while the device runs this one, and the pooled
        weights stay on the device (no wait for each batch) until ~64M of them (a GPU; ~1M on a CPU) are turned
        into CSR there and copied back: a process that waited for each batch and tokenised in between left an
        H200 idle 30-40% of the time (156-221 passages/s; now 300-319, the model alone 327-330)."""
        from concurrent.futures import ThreadPoolExecutor

        if self.pool_devices and not query and texts:
            return self._encode_pool(texts)
        torch = self._torch
        max_length = self.query_max_length if query else self.max_length
        size = self.batch_size
        flush_rows = max(size, _float_budget(torch.device(self.device)) // self.vocab_size)

        def tokenize(start: int):
            return self.tokenizer(texts[start:start + size], padding=True, truncation=True, max_length=max_length,
                                  return_tensors="pt")

        blocks, pending, rows = [], [], 0
        with ThreadPoolExecutor(max_workers=1) as tokenizer_thread, torch.no_grad():
            following = tokenizer_thread.submit(tokenize, 0) if texts else None
            for start in range(0, len(texts), size):
                batch = following.result().to(self.device)
                if start + size < len(texts):
                    following = tokenizer_thread.submit(tokenize, start + size)
                # max over attended tokens of log(1 + relu(logit)) = log(1 + relu(max logit)) (monotone)
                pending.append(torch.log1p(torch.relu(self._max_logits(batch))).float())
                rows += pending[-1].shape[0]
                if rows >= flush_rows or start + size >= len(texts):
                    blocks.append(_to_csr(torch.cat(pending)))
                    pending, rows = [], 0
        if not blocks:
            return _empty_csr(self.vocab_size)
        return blocks[0] if len(blocks) == 1 else _vstack(blocks)

    def _max_logits(self, batch, chunk: int | None = None):
        """``[batch, vocab]``: each term's largest logit over the attended tokens. With the output projection
        detached, the logits are made ``chunk`` vocabulary terms at a time and pooled at once, so the
        ``[batch, tokens, vocab]`` tensor is never whole (1 GB at 16 x 512 tokens x 30,522 terms in fp32); by
        default a chunk holds ~1M logits on a CPU (it stays in cache: 2x faster than whole logits), ~64M on a GPU."""
        torch = self._torch
        padding = ~batch["attention_mask"].bool().unsqueeze(-1)
        out = self.model(**batch).logits
        if self._projection is None:
            return out.masked_fill_(padding, float("-inf")).amax(dim=1)
        weight, bias = self._projection
        if chunk is None:
            chunk = max(64, _float_budget(out.device) // (out.shape[0] * out.shape[1]))
        pooled = out.new_empty((out.shape[0], weight.shape[0]))
        for start in range(0, weight.shape[0], chunk):
            logits = torch.nn.functional.linear(out, weight[start:start + chunk],
                                                None if bias is None else bias[start:start + chunk])
            pooled[:, start:start + chunk] = logits.masked_fill_(padding, float("-inf")).amax(dim=1)
        return pooled

    def _encode_pool(self, texts: list[str]):
        """Documents on every device at once: sentence-transformers' pool of worker processes (started on the
        first call, kept until :meth:`close`), returning sparse tensors, so no dense ``[texts, vocab]`` matrix."""
        from scipy import sparse

        if self._pool is None:
            from sentence_transformers import SparseEncoder
            from sentence_transformers.sparse_encoder.modules import SpladePooling

            model = SparseEncoder(self.path, device="cpu")
            pooling = next((m for m in model if isinstance(m, SpladePooling)), None)
            if pooling is None or (pooling.pooling_strategy, pooling.activation_function) != ("max", "relu"):
                raise ValueError(f"{self.name}: sentence-transformers loads it without SPLADE's max-log1p-relu "
                                 f"pooling ({pooling!r}); encode it on one device")
            model.max_seq_length = self.max_length
            self._pool = model.start_multi_process_pool(self.pool_devices)
            self._st = model
        coo = self._st.encode(texts, batch_size=self.batch_size, pool=self._pool,
                              convert_to_sparse_tensor=True).coalesce().cpu()
        rows, cols = coo.indices().numpy()
        matrix = sparse.csr_matrix((coo.values().float().numpy(), (rows, cols)), shape=(len(texts), self.vocab_size))
        matrix.sort_indices()
        return matrix

    def close(self) -> None:
        """Stop the worker processes of a multi-device encoder (a no-op on one device)."""
        if self._pool is not None:
            self._st.stop_multi_process_pool(self._pool)
            self._pool = None


def _float_budget(device) -> int:
    """How many floats one step of the SPLADE head holds at once: ~1M on a CPU (they stay in cache), ~64M on a GPU."""
    return 1 << 20 if device.type == "cpu" else 1 << 26


def _to_csr(weights):
    """A ``[rows, vocab]`` tensor (on any device) as a float32 scipy CSR matrix; only its nonzero entries travel."""
    from scipy import sparse

    rows, cols = weights.nonzero(as_tuple=True)
    values = weights[rows, cols]
    matrix = sparse.csr_matrix((values.cpu().numpy(), (rows.cpu().numpy(), cols.cpu().numpy())),
                               shape=tuple(weights.shape), dtype=np.float32)
    matrix.sort_indices()
    return matrix


def _empty_csr(vocab_size: int):
    from scipy import sparse

    return sparse.csr_matrix((0, vocab_size), dtype=np.float32)


def _vstack(blocks):
    from scipy import sparse

    return sparse.vstack(blocks, format="csr").astype(np.float32)


def _detach_output_projection(model, tokenizer, device: str):
    """Replace a masked LM's output projection (hidden state -> vocabulary logits, the last step of its head) by
    the identity, so that :meth:`SpladeEncoder._max_logits` applies it chunk by chunk; returns its ``(weight,
    bias)``. Where the model's logits are not that projection's output (checked on a probe batch), the model is
    left whole and None is returned."""
    import torch

    projection = model.get_output_embeddings()
    if not isinstance(projection, torch.nn.Linear):
        return None
    parent = next(((m, n) for m in model.modules() for n, c in m.named_children() if c is projection), None)
    if parent is None:
        return None
    probe = tokenizer(["Imatinib inhibits the BCR-ABL tyrosine kinase.", "Scurvy"], padding=True,
                      return_tensors="pt").to(device)
    with torch.no_grad():
        expected = model(**probe).logits
        setattr(*parent, torch.nn.Identity())
        hidden = model(**probe).logits
        if hidden.shape[-1] == projection.in_features and torch.allclose(projection(hidden), expected, atol=1e-4):
            return projection.weight, projection.bias
        setattr(*parent, projection)
    return None


def save_csr(path: Path, matrix) -> None:
    from scipy import sparse

    tmp = path.with_name(path.name + ".tmp.npz")
    sparse.save_npz(tmp, matrix, compressed=False)
    os.replace(tmp, path)


def load_csr_shards(folder: Path, vocab_size: int):
    """The passage-by-vocabulary CSR matrix of a build's SPLADE shards (``splade-NNNNN.npz``), in passage order."""
    from scipy import sparse

    shards = sorted(folder.glob("splade-[0-9]*.npz"))
    if not shards:
        return _empty_csr(vocab_size)
    return _vstack([sparse.load_npz(p) for p in shards])


class SpladeIndex:
    """SPLADE weights of every passage (a ``.npz`` CSR file, or a build's folder of shards) searched by sparse
    dot products. Held as the term-by-passage CSR matrix (an inverted index): a product with a CSC view would
    convert every passage's weights once per query batch (6x slower at 100k passages)."""

    def __init__(self, path: Path, encoder: SpladeEncoder):
        from scipy import sparse

        docs = load_csr_shards(path, encoder.vocab_size) if path.is_dir() else sparse.load_npz(path).tocsr()
        self.terms = docs.T.tocsr()
        del docs
        self.encoder = encoder

    def search(self, queries: list[str], k: int, chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)``, each ``[n_queries, k]``; passages sharing no term with the query are not hits
        (rows -1, as for BM25). The query-passage products stay sparse and are taken ``chunk`` queries at a
        time, so memory follows the matching pairs, never a dense ``[queries × passages]`` matrix. Ties: the
        lower row first (every passage scoring at least the k-th score is a candidate, so none is cut at random)."""
        q = self.encoder.encode(queries, query=True)
        scores = np.zeros((len(queries), k), dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        for start in range(0, len(queries), chunk):
            product = q[start:start + chunk] @ self.terms
            for i in range(product.shape[0]):
                lo, hi = product.indptr[i], product.indptr[i + 1]
                cols, vals = product.indices[lo:hi], product.data[lo:hi]
                keep = vals > 0
                cols, vals = cols[keep], vals[keep].astype(np.float32)
                if len(vals) > k:  # the k-th largest score in linear time; sort only what reaches it
                    top = vals >= np.partition(vals, len(vals) - k)[len(vals) - k]
                    cols, vals = cols[top], vals[top]
                order = np.lexsort((cols, -vals))[:k]  # score descending, then lower row first
                scores[start + i, :len(order)], rows[start + i, :len(order)] = vals[order], cols[order]
        return scores, rows

