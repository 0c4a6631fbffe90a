"""Synthetic corpora of N snippet-length documents for scale measurements (``bench/bench_scale.py``) and the
10k-document scale test; never an evidence source for an evaluation.

Words are drawn from the word distribution of a real medical text (a MedQA textbook from the data mirror), so
document frequencies, vocabulary growth and posting-list lengths look like a medical corpus's rather than a
uniform draw's; lengths vary around ``mean_tokens`` (default 200, MedRAG's snippet size).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

WORD = re.compile(r"[a-z][a-z\-]+")


def word_distribution(path: Path, max_words: int = 50_000) -> tuple[list[str], np.ndarray]:
    """The ``max_words`` most frequent words of a text file (``.gz`` allowed) and their probabilities."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        counts = Counter(WORD.findall(fh.read().lower()))
    words, freq = zip(*counts.most_common(max_words))
    freq = np.asarray(freq, dtype=np.float64)
    return list(words), freq / freq.sum()


def documents(n: int, words: list[str], probs: np.ndarray, seed: int = 0, mean_tokens: int = 200,
              batch: int = 1000) -> Iterator[dict]:
    """``n`` documents ``{doc_id, title, text, source_type}``, deterministic for a seed, drawn ``batch`` at a time."""
    rng = np.random.default_rng(seed)
    vocab = np.asarray(words, dtype=object)
    for start in range(0, n, batch):
        size = min(batch, n - start)
        lengths = np.clip(rng.normal(mean_tokens, mean_tokens / 4, size).astype(int), 8, 4 * mean_tokens)
        draws = rng.choice(len(words), size=int(lengths.sum()) + 6 * size, p=probs)
        at = 0
        for i, length in enumerate(lengths):
            title = " ".join(vocab[draws[at:at + 6]])
            text = " ".join(vocab[draws[at + 6:at + 6 + length]])
            at += 6 + length
            yield {"doc_id": f"syn{start + i}", "title": title, "text": text, "source_type": "paper"}


def write_jsonl(path: Path, docs) -> int:
    """Write documents as JSONL (the ``generic_jsonl`` reader's schema); returns how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps(doc) + "\n")
            count += 1
    return count
