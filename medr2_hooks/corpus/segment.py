"""Segmentation (paper §3.2.1): long documents are split on natural chapters first — the headings of the
textbooks — and what still exceeds ``max_doc_tokens`` (10,000) is cut at the limit. For retrieval every
document is further split into overlapping passages that fit the encoder; passages keep their document id
and character span, so a document's score can be the best of its passages.

Headings are the textbooks' own short title lines (a line of at most ``HEADING_MAX_WORDS`` words with no
sentence-final punctuation, not a figure or table caption). Sections shorter than ``min_doc_tokens`` are
merged into the section that follows (the last one into the one before), so a heading never stands alone
as a document. Passages start and end on word boundaries, so re-tokenizing a passage gives at most
``passage_tokens`` tokens.

``chunker: llm_amt`` replaces the chapter split with LLM-AMT's textbook chunking rule (method-notes §4):
split on runs of 2–11 blank characters, drop pieces of at most 10 characters or at most 3 words, and
re-pack pieces over 1,000 words into pieces of at most 1,000 words ending on sentence ends. The MedQA text
files separate paragraphs with a blank line, so runs of spaces *or newlines* count as separators here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..config import in_range
from .document import Document

# Bump when a change here alters the segments: built corpora record it and rebuild on a mismatch.
SEGMENTER_VERSION = 2
HEADING_MAX_WORDS = 12
_SENTENCE_END = tuple(".,;:!。；：，！、")
_CAPTION = re.compile(r"^(fig(ure)?|table|box)\.?\s*\d", re.IGNORECASE)
CHUNKERS = ("chapters", "llm_amt")
_AMT_SEPARATOR = re.compile(r"[ \t\n]{2,11}")
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")
AMT_MAX_WORDS = 1000
_ENUMERATOR = re.compile(r"^[\dIVXivx]+[.)]?$|^[A-Za-z][.)]$")


@dataclass(frozen=True)
class Segmentation:
    chunker: str = "chapters"  # chapters (paper) | llm_amt (the LLM-AMT baseline's textbook chunks)
    tokenizer: str = "embedded:minilm"  # a tokenizer name/path, an embedded: name, or "whitespace"
    min_doc_tokens: int = 200
    max_doc_tokens: int = 10_000
    passage_tokens: int = 254  # all-MiniLM-L6-v2 reads 256 tokens: 254 + [CLS] + [SEP]
    passage_overlap: int = 32

    def __post_init__(self):
        if self.chunker not in CHUNKERS:
            raise ValueError(f"chunker must be one of {', '.join(CHUNKERS)}, found {self.chunker!r}")
        for name in ("max_doc_tokens", "passage_tokens"):
            in_range(self, name, 1)
        in_range(self, "min_doc_tokens", 0)
        if not 0 <= self.passage_overlap < self.passage_tokens:
            raise ValueError("passage_overlap must be >= 0 and smaller than passage_tokens")


class Tokens:
    """Token character spans of texts, from a Hugging Face fast tokenizer or whitespace."""

    def __init__(self, name: str):
        self.name = name
        self._tok = None
        if name != "whitespace":
            from transformers import AutoTokenizer

            from ..llm.embedded import resolve

            self._tok = AutoTokenizer.from_pretrained(resolve(name))
            self._tok.model_max_length = 10**9  # we only want offsets; no truncation warnings

    def spans(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        if self._tok is None:
            return [[m.span() for m in re.finditer(r"\S+", t)] for t in texts]
        enc = self._tok(texts, add_special_tokens=False, return_offsets_mapping=True,
                        return_attention_mask=False, return_token_type_ids=False)
        return [[tuple(o) for o in offsets] for offsets in enc["offset_mapping"]]

    def counts(self, texts: list[str]) -> list[int]:
        """Tokens per text, without their spans (``str.split`` and ``\\S+`` split on the same Unicode whitespace)."""
        if self._tok is None:
            return [len(t.split()) for t in texts]
        enc = self._tok(texts, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False)
        return [len(ids) for ids in enc["input_ids"]]

    def word_starts(self, text: str, spans: list[tuple[int, int]]) -> list[bool]:
        """Whether each token begins a word (not a sub-word continuation glued to the previous token). Whitespace
        tokens are maximal runs of non-space characters, so none is ever glued to the one before."""
        if self._tok is None:
            return [True] * len(spans)
        return _word_starts(text, spans)


def is_heading(line: str) -> bool:
    s = line.strip()
    if not s or len(s.split()) > HEADING_MAX_WORDS or len(s) > 120:
        return False
    if s.endswith(_SENTENCE_END) or _CAPTION.match(s) or _ENUMERATOR.match(s):
        return False
    return s[0].isupper() or s[0].isdigit() or not s[0].isascii()


def sections(text: str) -> list[tuple[str, int, int]]:
    """``(heading, start, end)`` character spans, one per heading (text before the first: heading "")."""
    starts, pos = [(0, "")], 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        prev_blank = i == 0 or not lines[i - 1].strip()
        next_blank = i + 1 >= len(lines) or not lines[i + 1].strip()
        if pos > 0 and prev_blank and next_blank and is_heading(line):
            starts.append((pos, line.strip()))
        pos += len(line) + 1
    bounds = [s for s, _ in starts[1:]] + [len(text)]
    return [(title, start, end) for (start, title), end in zip(starts, bounds) if text[start:end].strip()]


def _cut(text: str, spans: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """Character ranges of ``text`` holding at most ``limit`` tokens each (``spans`` empty: under the limit)."""
    if len(spans) <= limit:
        return [(0, len(text))]
    cuts = [spans[i][0] for i in range(limit, len(spans), limit)]
    edges = [0, *cuts, len(text)]
    return list(zip(edges[:-1], edges[1:]))


def chapter_documents(docs: list[Document], seg: Segmentation, tokens: Tokens) -> list[Document]:
    """Split documents longer than ``max_doc_tokens`` on headings, merge small sections, cut what is left."""
    out: list[Document] = []
    for doc in docs:
        secs = sections(doc.text)
        sizes = tokens.counts([doc.text[s:e] for _, s, e in secs])
        if sum(sizes) <= seg.max_doc_tokens:
            out.append(doc)
            continue
        groups: list[tuple[str, int, int, int]] = []  # (title, start, end, approximate tokens)
        for (title, start, end), size in zip(secs, sizes):
            if groups and groups[-1][3] < seg.min_doc_tokens:
                g_title, g_start, _, g_size = groups.pop()
                title, start, size = g_title or title, g_start, g_size + size
            groups.append((title, start, end, size))
        if len(groups) > 1 and groups[-1][3] < seg.min_doc_tokens:  # a short last section joins the one before
            (title, start, _, size), (_, _, end, last) = groups[-2], groups[-1]
            groups[-2:] = [(title, start, end, size + last)]
        merged = []
        for title, start, end, size in groups:
            spans = tokens.spans([doc.text[start:end]])[0] if size > seg.max_doc_tokens else []
            merged.append((title, start, end, spans))
        piece = 0
        for title, start, end, spans in merged:
            body = doc.text[start:end]
            for a, b in _cut(body, spans, seg.max_doc_tokens):
                text = body[a:b].strip()
                if not text:
                    continue
                piece += 1
                out.append(replace(doc, doc_id=f"{doc.doc_id}:{piece:05d}", title=title or doc.title, text=text,
                                   meta={**doc.meta, "chapter": title, "parent_id": doc.doc_id}))
    return out


def amt_pieces(text: str) -> list[str]:
    """LLM-AMT's textbook chunks of ``text``, in order."""
    out = []
    for piece in _AMT_SEPARATOR.split(text):
        piece = piece.strip()
        if len(piece) <= 10 or len(piece.split()) <= 3:
            continue
        if len(piece.split()) <= AMT_MAX_WORDS:
            out.append(piece)
            continue
        current: list[str] = []
        for sentence in _SENTENCE.split(piece):
            words = len(sentence.split())
            if current and sum(len(s.split()) for s in current) + words > AMT_MAX_WORDS:
                out.append(" ".join(current))
                current = []
            current.append(sentence)
        if current:
            out.append(" ".join(current))
    return out


def amt_documents(docs: list[Document]) -> list[Document]:
    """One document per LLM-AMT chunk, numbered within its source document."""
    return [replace(doc, doc_id=f"{doc.doc_id}:amt{i:06d}", text=piece, meta={**doc.meta, "parent_id": doc.doc_id})
            for doc in docs for i, piece in enumerate(amt_pieces(doc.text), 1)]


def documents(docs: list[Document], seg: Segmentation, tokens: Tokens) -> list[Document]:
    """The recipe's documents: chapters (paper) or LLM-AMT chunks."""
    return amt_documents(docs) if seg.chunker == "llm_amt" else chapter_documents(docs, seg, tokens)


def _word_starts(text: str, spans: list[tuple[int, int]]) -> list[bool]:
    """Whether each token begins a word (not a sub-word continuation glued to the previous token)."""
    out = []
    for i, (start, _) in enumerate(spans):
        glued = (i > 0 and start == spans[i - 1][1] and text[start - 1:start].isalnum()
                 and text[start:start + 1].isalnum())
        out.append(not glued)
    return out


def passages(texts: list[str], seg: Segmentation, tokens: Tokens) -> list[list[tuple[int, int]]]:
    """Per text, the character spans of overlapping passages of at most ``passage_tokens`` tokens."""
    step = seg.passage_tokens - seg.passage_overlap
    out = []
    for text, spans in zip(texts, tokens.spans(texts)):
        starts = tokens.word_starts(text, spans)
        windows, first = [], 0
        while first < len(spans):
            last = min(first + seg.passage_tokens, len(spans)) - 1
            while last + 1 < len(spans) and not starts[last + 1] and last > first:
                last -= 1  # do not cut a word: end before its first sub-word token
            if last + 1 < len(spans) and not starts[last + 1]:
                last = min(first + seg.passage_tokens, len(spans)) - 1  # one word longer than a window: cut it
            windows.append((spans[first][0], spans[last][1]))
            if last == len(spans) - 1:
                break
            nxt = max(first + 1, min(first + step, last + 1 - seg.passage_overlap))
            while nxt < last and not starts[nxt]:
                nxt += 1
            first = nxt
        out.append(windows)
    return out
