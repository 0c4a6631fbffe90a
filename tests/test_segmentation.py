"""Segmentation: chapter split on headings, merging of small sections, the 10k-token cut, passages."""

from __future__ import annotations

import pytest

from medr2_hooks.corpus.document import Document
from medr2_hooks.corpus.segment import Segmentation, Tokens, chapter_documents, is_heading, passages, sections

BOOK = """Growth Adaptations

I. BASIC PRINCIPLES

A. An organ is in homeostasis with the physiologic stress placed on it.

B. An increase in stress can result in growth adaptations.

II. HYPERPLASIA AND HYPERTROPHY

A. An increase in stress leads to an increase in organ size.

1.

Fig. 1.1 Hypertrophy of the heart.

III. ATROPHY

A. A decrease in stress leads to a decrease in organ size."""

WS = Tokens("whitespace")


def test_heading_rule():
    assert is_heading("II. HYPERPLASIA AND HYPERTROPHY")
    assert is_heading("What is anatomy?")
    assert not is_heading("A. An organ is in homeostasis with the physiologic stress placed on it.")
    assert not is_heading("Fig. 1.1 Hypertrophy of the heart")
    assert not is_heading("1.")
    assert not is_heading("")


def test_sections_start_at_headings():
    titles = [title for title, _, _ in sections(BOOK)]
    assert titles == ["", "I. BASIC PRINCIPLES", "II. HYPERPLASIA AND HYPERTROPHY", "III. ATROPHY"]
    spans = sections(BOOK)
    assert "".join(BOOK[s:e] for _, s, e in spans) == BOOK  # sections tile the text


def _book(text=BOOK):
    return Document("book1", "Book One", text, "book", "en", meta={"book": "book1"})


def test_short_document_is_kept_whole():
    seg = Segmentation(tokenizer="whitespace", max_doc_tokens=10_000, passage_tokens=50, passage_overlap=5)
    (doc,) = chapter_documents([_book()], seg, WS)
    assert doc.doc_id == "book1" and doc.text == BOOK


def test_long_document_splits_on_chapters_and_merges_small_sections():
    seg = Segmentation(tokenizer="whitespace", min_doc_tokens=15, max_doc_tokens=40, passage_tokens=20,
                       passage_overlap=5)
    docs = chapter_documents([_book()], seg, WS)
    assert [d.doc_id for d in docs] == ["book1:00001", "book1:00002"]
    # the 2-word preface merges into the first chapter; the short last chapter joins the one before
    assert docs[0].title == "I. BASIC PRINCIPLES" and docs[0].text.startswith("Growth Adaptations")
    assert docs[1].title == "II. HYPERPLASIA AND HYPERTROPHY" and "III. ATROPHY" in docs[1].text
    assert all(d.meta["parent_id"] == "book1" and d.source_type == "book" for d in docs)


def test_what_still_exceeds_the_limit_is_cut_at_the_limit():
    text = "Chapter One\n\n" + " ".join(f"w{i}" for i in range(250))
    seg = Segmentation(tokenizer="whitespace", min_doc_tokens=1, max_doc_tokens=100, passage_tokens=20,
                       passage_overlap=5)
    docs = chapter_documents([_book(text)], seg, WS)
    sizes = [len(d.text.split()) for d in docs]
    assert max(sizes) <= 100 and sum(sizes) == 252
    assert [len(d.text.split()) for d in docs][:2] == [100, 100]


def test_passages_overlap_and_cover_the_text():
    text = " ".join(f"t{i}" for i in range(45))
    seg = Segmentation(tokenizer="whitespace", passage_tokens=20, passage_overlap=5)
    (spans,) = passages([text], seg, WS)
    words = [text[s:e].split() for s, e in spans]
    assert [w[0] for w in words] == ["t0", "t15", "t30"]
    assert [len(w) for w in words] == [20, 20, 15]
    assert words[0][-5:] == words[1][:5]  # 5-token overlap


def test_passages_fit_the_encoder_tokenizer():
    seg = Segmentation(tokenizer="embedded:minilm", passage_tokens=254, passage_overlap=32)
    tokens = Tokens(seg.tokenizer)
    text = " ".join(["hyperplasia and hypertrophy of cardiac myocytes"] * 200)
    (spans,) = passages([text], seg, tokens)
    counts = [len(tokens.spans([text[s:e]])[0]) for s, e in spans]
    assert max(counts) <= 254 and len(spans) > 3


def test_llm_amt_chunker_splits_on_blank_runs_drops_short_pieces_and_repacks_long_ones():
    from medr2_hooks.corpus.segment import AMT_MAX_WORDS, amt_pieces

    long_piece = " ".join(f"Sentence {i} has exactly six words." for i in range(400))  # 2,400 words
    text = ("Hypertrophy is an increase in cell size.\n\n1.\n\nToo short here\n\n"
            "Atrophy   is a decrease in cell size." + " " * 11 + "Metaplasia is a change in cell type.\n\n"
            + long_piece)
    pieces = amt_pieces(text)
    # "Atrophy" stands alone after its run of three spaces and is dropped (one word)
    assert pieces[:3] == ["Hypertrophy is an increase in cell size.", "is a decrease in cell size.",
                          "Metaplasia is a change in cell type."]
    assert "1." not in pieces and "Too short here" not in pieces  # <= 10 characters, <= 3 words
    rest = pieces[3:]
    assert [len(p.split()) for p in rest] == [996, 996, 408]  # 166 six-word sentences fit in 1,000 words
    assert all(len(p.split()) <= AMT_MAX_WORDS and p.endswith(".") for p in rest)
    assert " ".join(rest) == long_piece


def test_llm_amt_chunker_is_a_recipe_setting():
    from medr2_hooks.corpus.recipe import load_recipe
    from medr2_hooks.corpus.segment import Segmentation

    assert load_recipe("textbooks_demo_amt").segmentation.chunker == "llm_amt"
    with pytest.raises(ValueError, match="chunker must be one of"):
        Segmentation(chunker="paragraphs")


def test_token_counts_and_word_starts_agree_with_the_spans():
    """``counts`` (no spans) and the whitespace fast path of ``word_starts`` are shortcuts of the span-based
    computation; on real textbook text, odd Unicode spaces included, they give the same answers."""
    import gzip
    import re
    import sys

    from medr2_hooks import settings
    from medr2_hooks.corpus.segment import _word_starts

    assert all(chr(i).isspace() == bool(re.match(r"\s", chr(i))) for i in range(sys.maxunicode + 1))
    with gzip.open(settings.data_dir() / "corpus_textbooks" / "en" / "Pathoma_Husain.txt.gz", "rt") as fh:
        text = fh.read()[:200_000]
    texts = [text[i:i + 5_000] for i in range(0, len(text), 5_000)] + ["a\u00a0b\u2003c\x1cd  e\u3000f", "", " \n "]
    for tokens in (WS, Tokens("embedded:minilm")):
        spans = tokens.spans(texts)
        assert tokens.counts(texts) == [len(s) for s in spans]
        assert [tokens.word_starts(t, s) for t, s in zip(texts, spans)] == \
            [_word_starts(t, s) for t, s in zip(texts, spans)]
    assert not all(_word_starts(texts[0], Tokens("embedded:minilm").spans(texts[:1])[0]))  # sub-words are glued
