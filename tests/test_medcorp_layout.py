"""``index/medcorp.yaml`` builds from the public hub layout (issue 16, point 4), in miniature: files written here
in exactly the layout of ``MedRAG/pubmed``, ``MedRAG/wikipedia``, ``MedRAG/textbooks`` (``chunk/*.jsonl`` with
``id, title, content, contents`` [+ ``PMID``]) and ``epfl-llm/guidelines`` (``open_guidelines.jsonl`` with
``id, source, title, clean_text, raw_text, url, overview``). The recipe's encoders need GPUs and the hub, so the
miniature swaps them for BM25 over whitespace tokens; the sources, readers and paths are the recipe's own."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace

WORDS = ("myocardial infarction troponin aspirin heparin stent ischemia artery pressure dose renal clearance "
         "insulin glucose ketoacidosis sepsis lactate antibiotic culture fever biopsy carcinoma staging therapy "
         "trial cohort randomized placebo outcome mortality guideline recommendation evidence grade").split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _write(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _miniature(tmp_path):
    rng = random.Random(0)
    for corpus, stem in (("pubmed", "pubmed23n0001"), ("wikipedia", "wiki20220301en000"),
                         ("textbooks", "Anatomy_Gray")):
        rows = []
        for i in range(300):
            title, content = _text(rng, 6), _text(rng, rng.randint(40, 160))
            row = {"id": f"{stem}_{i}", "title": title, "content": content, "contents": f"{title}. {content}"}
            if corpus == "pubmed":
                row["PMID"] = str(100000 + i)
            rows.append(row)
        _write(tmp_path / corpus / "chunk" / f"{stem}.jsonl", rows)
    _write(tmp_path / "guidelines" / "open_guidelines.jsonl",
           [{"id": f"g{i:04d}", "source": rng.choice(["cdc", "who", "nice"]), "title": _text(rng, 5),
             "clean_text": _text(rng, rng.randint(200, 600)), "raw_text": "raw", "url": "https://example.org",
             "overview": "o"} for i in range(100)])
    return _recipe(tmp_path)


def _recipe(tmp_path):
    from medr2_hooks.corpus.recipe import BM25, load_recipe

    recipe = load_recipe("medcorp")
    return replace(recipe, sources=[replace(s, base=str(tmp_path)) for s in recipe.sources],
                   segmentation=replace(recipe.segmentation, tokenizer="whitespace", max_doc_tokens=300,
                                        passage_tokens=64, passage_overlap=8), dense=None, splade=None, bm25=BM25())


def test_medcorp_reads_the_four_public_corpora_in_their_layout(tmp_path):
    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.retrieve.build import build

    build(_miniature(tmp_path), tmp_path / "index", log=lambda *_: None)

    store = CorpusStore(tmp_path / "index" / "corpus")
    docs = list(store.iter_docs())
    store.close()
    sources = Counter(d.source_type for d in {d.doc_id.split(":")[0]: d for d in docs}.values())
    assert sources == {"paper": 300, "entry": 300, "book": 300, "guideline": 100}  # long guidelines split in pieces
    assert {d.evidence_level for d in docs if d.source_type == "guideline"} == {3}
    assert {d.evidence_level for d in docs if d.source_type != "guideline"} == {None}
    papers = [d for d in docs if d.source_type == "paper"]
    assert papers[0].meta["pmid"] == "100000" and papers[0].doc_id == "pubmed23n0001_0"
    assert {d.meta["publisher"] for d in docs if d.source_type == "guideline"} <= {"cdc", "who", "nice"}


def test_the_corpus_is_written_in_batches_with_the_same_bytes(tmp_path, monkeypatch):
    """Streaming ingestion: sources are read, segmented and written a batch at a time; the corpus files do not
    depend on the batch size (guidelines longer than max_doc_tokens are split across pieces inside a batch)."""
    from medr2_hooks.retrieve import build as build_module
    from medr2_hooks.retrieve.build import build_corpus

    recipe = _miniature(tmp_path)
    whole = build_corpus(recipe, tmp_path / "whole", log=lambda *_: None)
    monkeypatch.setattr(build_module, "CORPUS_BATCH", 7)
    batched = build_corpus(recipe, tmp_path / "batched", log=lambda *_: None)
    assert batched["corpus_hash"] == whole["corpus_hash"] and batched["documents"] == whole["documents"] > 1000
    for name in ("docs.jsonl", "docs.offsets.npy", "passages.npy", "lookup.sqlite"):
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "batched" / name).read_bytes(), name
