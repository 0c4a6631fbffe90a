"""Index build and search on a small real corpus: BM25 and dense results equal the raw libraries,
fusion maths, PMID exclusion, encoder refusal, bad input, byte-identical resume after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from medr2_hooks.config import from_dict
from medr2_hooks.corpus.recipe import Recipe
from medr2_hooks.errors import Medr2Error, RowError
from medr2_hooks.retrieve.hybrid import Fused, fuse, rrf_score

pytestmark = pytest.mark.filterwarnings("ignore")

N_PUBMED = 40


@pytest.fixture(scope="session")
def corpus_files(tmp_path_factory, data_root):
    """A small real corpus: 40 PubMedQA abstracts (papers) and one textbook (Pathoma, book)."""
    folder = tmp_path_factory.mktemp("corpus")
    raw = json.loads((data_root / "pubmedqa" / "ori_pqal.json").read_text())
    subset = dict(list(raw.items())[:N_PUBMED])
    (folder / "pqal_subset.json").write_text(json.dumps(subset))
    return folder, subset


def small_recipe(folder: Path, **overrides) -> Recipe:
    raw = {
        "name": "small",
        "folder": str(folder),
        "sources": [
            {"reader": "pubmedqa_contexts", "base": "recipe", "paths": "pqal_subset.json"},
            {"reader": "medqa_textbooks", "paths": "corpus_textbooks/en/Pathoma_Husain.txt.gz"},
        ],
        "segmentation": {"tokenizer": "embedded:minilm", "passage_tokens": 254, "passage_overlap": 32},
        "dense": {"encoder": "embedded:minilm", "max_length": 256, "batch_size": 32, "shard_size": 256},
        "bm25": {},
        **overrides,
    }
    return from_dict(Recipe, raw, "test recipe")


@pytest.fixture(scope="session")
def small_index(tmp_path_factory, corpus_files):
    from medr2_hooks.retrieve.build import build

    folder = tmp_path_factory.mktemp("index")
    build(small_recipe(corpus_files[0]), folder=folder, log=lambda *_: None)
    return folder


@pytest.fixture(scope="session")
def searcher(small_index):
    from medr2_hooks.retrieve.searcher import Searcher

    return Searcher.open(small_index)


QUERIES = [
    "Philadelphia chromosome translocation in chronic myeloid leukemia",
    "Do mitochondria play a role in remodelling lace plant leaves during programmed cell death?",
    "iron deficiency anemia microcytic",
]


# -- fusion maths ------------------------------------------------------------------------------------------
def test_rrf_score_uses_zero_based_ranks_and_k_100():
    assert rrf_score(0) == pytest.approx(1 / 101)
    assert rrf_score(4, rrf_k=60) == pytest.approx(1 / 65)


def test_union_keeps_every_unit_once_with_both_scores():
    fused = fuse({"dense": [("a", 0.9), ("b", 0.8)], "bm25": [("b", 12.0), ("c", 7.0)]}, "union")
    assert [f.key for f in fused] == ["b", "a", "c"]
    b = fused[0]
    assert b.scores == {"dense": 0.8, "bm25": 12.0} and b.ranks == {"dense": 1, "bm25": 0}
    assert b.fused == pytest.approx(1 / 102 + 1 / 101)
    assert fused[1] == Fused("a", {"dense": 0.9}, {"dense": 0}, pytest.approx(1 / 101))


def test_rrf_keeps_top_k_by_fused_score():
    ranked = {"dense": [("a", 1), ("b", 1), ("c", 1)], "bm25": [("c", 1), ("d", 1), ("b", 1)]}
    fused = fuse(ranked, "rrf", k=2)
    # b: 1/102 + 1/103, c: 1/103 + 1/101, a: 1/101, d: 1/102
    assert [f.key for f in fused] == ["c", "b"]
    with pytest.raises(ValueError):
        fuse(ranked, "max")


# -- build and search ----------------------------------------------------------------------------------------
def test_manifest_records_recipe_corpus_encoder_and_counts(small_index):
    manifest = json.loads((small_index / "manifest.json").read_text())
    assert manifest["counts"]["source_documents"] == N_PUBMED + 1
    assert manifest["counts"]["passages"] >= manifest["counts"]["documents"] > N_PUBMED
    assert manifest["dense"]["encoder"]["id"] == "embedded:minilm"
    assert manifest["dense"]["encoder"]["pooling"] == "mean" and manifest["dense"]["factory"] == "Flat"
    assert manifest["dense"]["ntotal"] == manifest["counts"]["passages"]
    assert len(manifest["corpus_hash"]) == 64 and "dense/index.faiss" in manifest["files"]


def test_bm25_top_k_is_identical_to_raw_bm25s(searcher):
    import bm25s

    store = searcher.store
    texts = store.passage_texts(range(len(store.passages)))
    raw = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    raw.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    raw_rows, raw_scores = raw.retrieve(bm25s.tokenize(QUERIES, stopwords="en", show_progress=False), k=10,
                                        show_progress=False)
    scores, rows = searcher._ranked("bm25", QUERIES, 10)
    assert np.array_equal(rows, raw_rows)
    assert np.allclose(scores, raw_scores)


def test_bm25_numba_backend_is_bit_identical_to_bm25s_numpy_backend(searcher, small_index):
    from medr2_hooks import data
    from medr2_hooks.retrieve.sparse import BM25Index

    queries = QUERIES + [r.question for r in data.pools("medqa_usmle").eval[:50]]
    numba = BM25Index(small_index / "bm25", backend="numba").search(queries, 10)
    numpy_ = BM25Index(small_index / "bm25", backend="numpy").search(queries, 10)
    assert np.array_equal(numba[1], numpy_[1]) and np.array_equal(numba[0], numpy_[0])
    with pytest.raises(ValueError, match="valid: numba, numpy"):
        BM25Index(small_index / "bm25", backend="jax")


def test_bm25_hits_without_a_matching_term_are_not_returned(searcher):
    scores, rows = searcher._ranked("bm25", ["leukemia zzzunknownzzz"], searcher.store.passages.shape[0])
    matched = rows[0] >= 0
    assert 0 < matched.sum() < rows.shape[1]  # only passages that contain "leukemia"
    assert (scores[0][matched] > 0).all() and (scores[0][~matched] == 0).all()
    texts = searcher.store.passage_texts(rows[0][matched].tolist())
    assert all("leukemia" in t.lower() for t in texts)


@pytest.fixture(scope="module")
def lucene_index(tmp_path_factory, corpus_files):
    pytest.importorskip("pyserini", reason="the pyserini backend is the optional sparse extra")
    from medr2_hooks.retrieve.build import build

    folder = tmp_path_factory.mktemp("lucene_index")
    manifest = build(small_recipe(corpus_files[0], dense=None, bm25={"backend": "pyserini"}), folder=folder,
                     log=lambda *_: None)
    return folder, manifest


def test_pyserini_lucene_bm25_agrees_with_bm25s(lucene_index, searcher):
    """Same terms (pre-tokenised by the shared tokenizer), Lucene's BM25: the rankings agree, and scores differ
    only by Lucene's one-byte document-length norms."""
    from medr2_hooks import data
    from medr2_hooks.retrieve.searcher import Searcher

    folder, manifest = lucene_index
    assert manifest["bm25"]["backend"] == "pyserini" and len(manifest["bm25"]["lucene"]["input_sha256"]) == 64
    assert not any(name.startswith("bm25/lucene") for name in manifest["files"])  # identified by input hash
    report = json.loads((folder / "build_report.json").read_text())  # ... but its size is reported
    lucene_bytes = sum(p.stat().st_size for p in (folder / "bm25" / "lucene").rglob("*") if p.is_file())
    assert lucene_bytes > 0 and report["index_bytes"] >= lucene_bytes
    queries = QUERIES + [r.question for r in data.pools("medqa_usmle").eval[:50]]
    lucene = Searcher.open(folder)._ranked("bm25", queries, 10)
    bm25s_ = searcher._ranked("bm25", queries, 10)
    top1 = np.mean(lucene[1][:, 0] == bm25s_[1][:, 0])
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(lucene[1], bm25s_[1])])
    assert top1 >= 0.9 and overlap >= 0.9, (top1, overlap)
    for i in range(len(queries)):
        ours = dict(zip(bm25s_[1][i].tolist(), bm25s_[0][i].tolist()))
        for row, score in zip(lucene[1][i].tolist(), lucene[0][i].tolist()):
            if row in ours:
                assert score == pytest.approx(ours[row], rel=0.06)
    (hits,) = Searcher.open(folder).search([QUERIES[0]], k=5)
    assert hits and all(set(h.scores) == {"bm25"} for h in hits)


def test_pyserini_rebuild_gives_the_same_manifest(lucene_index, corpus_files, tmp_path):
    from medr2_hooks.retrieve.build import build

    _, manifest = lucene_index
    again = build(small_recipe(corpus_files[0], dense=None, bm25={"backend": "pyserini"}), folder=tmp_path / "again",
                  log=lambda *_: None)
    assert again == manifest


def test_recipe_rejects_unknown_sparse_backends(corpus_files):
    from medr2_hooks.config import ConfigError

    with pytest.raises((ConfigError, ValueError), match="valid: bm25s, pyserini"):
        small_recipe(corpus_files[0], bm25={"backend": "lucene"})
    with pytest.raises((ConfigError, ValueError), match="method must be lucene"):
        small_recipe(corpus_files[0], bm25={"backend": "pyserini", "method": "robertson"})


def test_dense_top_k_is_identical_to_brute_force_inner_product(searcher, small_index):
    shards = sorted((small_index / "dense").glob("emb-*.npy"))
    embeddings = np.concatenate([np.load(p) for p in shards])
    queries = searcher.query_encoder().encode_queries(QUERIES)
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1, atol=1e-4)
    brute = queries @ embeddings.T
    expected = np.argsort(-brute, axis=1, kind="stable")[:, :10]
    scores, rows = searcher._ranked("dense", QUERIES, 10)
    assert np.array_equal(rows, expected)
    assert np.allclose(scores, np.take_along_axis(brute, expected, axis=1), atol=1e-5)


def test_hybrid_union_returns_both_scores_and_metadata(searcher):
    (hits,) = searcher.search(QUERIES[:1], k=5)
    assert 5 <= len(hits) <= 10
    assert any(set(h.scores) == {"dense", "bm25"} for h in hits)
    top = hits[0]
    assert top.source_type == "book" and top.meta["book"] == "Pathoma_Husain"
    assert "BCR-ABL" in " ".join(h.text for h in hits)
    assert top.text == searcher.store.doc(int(searcher.store.passages[top.passage]["doc"])).text[top.start:top.end]


def test_document_unit_scores_a_document_by_its_best_passage(searcher):
    (docs,) = searcher.search(QUERIES[:1], k=5, unit="document", fusion="rrf")
    (passages,) = searcher.search(QUERIES[:1], k=50, unit="passage", fusion="rrf", depth=200)
    assert len({d.doc_id for d in docs}) == len(docs) == 5
    for d in docs:
        best = max(p.scores.get("dense", -1) for p in passages if p.doc_id == d.doc_id)
        assert d.scores.get("dense", -1) == pytest.approx(best) or "dense" not in d.scores


def test_pubmedqa_own_pmid_is_excluded_per_query(searcher, corpus_files):
    _, subset = corpus_files
    pmid, item = next(iter(subset.items()))
    queries = [item["QUESTION"], item["QUESTION"]]
    with_own, without_own = searcher.search(queries, k=10, exclude_pmids=[None, pmid])
    assert with_own[0].doc_id == f"pmid:{pmid}"
    assert f"pmid:{pmid}" not in {h.doc_id for h in without_own}
    assert len(without_own) >= 10


def test_the_excluded_own_article_says_where_it_would_have_ranked(searcher, corpus_files, tmp_path):
    """PubMedQA excludes a question's own abstract; the pre-pass records where a search of the stem would have
    ranked it (per retriever and fused), cached like any stage, summarised for the report."""
    from medr2_hooks.cache import StageCache
    from medr2_hooks.data.record import Question
    from medr2_hooks.pipeline.config import MethodConfig
    from medr2_hooks.pipeline.toolbox import StageToolbox
    from medr2_hooks.evidence.stage_runs import own_article_summary

    _, subset = corpus_files
    (pmid, item), (other, _) = list(subset.items())[:2]
    stem = item["QUESTION"]
    none, own, missing = searcher.own_ranks([stem, stem, stem], [None, pmid, "0"], depth=20)
    assert none == {}
    assert own["fused"] == 1  # the stem finds its own abstract first (test_pubmedqa_own_pmid_is_excluded_per_query)
    assert set(own) == {*searcher.retrievers, "fused"} and all(1 <= r <= 20 for r in own.values())
    assert missing == {name: None for name in (*searcher.retrievers, "fused")}  # a PMID the index does not hold
    (hits,) = searcher.search([stem], k=20, unit="document", fusion="union")
    for name in searcher.retrievers:  # the rank is the article's place in that retriever's own document list
        mine = [h for h in hits if h.doc_id == f"pmid:{pmid}"][0]
        assert own[name] == mine.ranks[name] + 1

    m = StageToolbox(MethodConfig(), cache=StageCache(tmp_path / "stages.sqlite"), searcher=searcher)
    yes_no = {"A": "yes", "B": "no"}
    questions = [Question("a", stem, yes_no, "en", pmid), Question("b", subset[other]["QUESTION"], yes_no, "en", other),
                 Question("c", stem, yes_no, "en")]
    ranks = m.own_article_ranks(questions)
    assert set(ranks) == {"a", "b"} and ranks["a"]["fused"] == 1
    assert m.own_article_ranks(questions) == ranks and m.cache.stats["own_rank:hit"] == 2
    summary = own_article_summary(ranks)
    assert summary["n"] == 2 and summary["by_retriever"]["fused"]["at_1"] == sum(r["fused"] == 1
                                                                                for r in ranks.values())
    assert list(summary["by_retriever"])[-1] == "fused" and summary["ranks"] == ranks


@pytest.mark.parametrize("name", ["dense", "bm25"])
def test_one_retrievers_hits_are_its_own_top_k_assembled_when_read(small_index, corpus_files, name):
    """One retriever, passages: its own top k under either fusion, with its scores and ranks, the question's own
    article excluded; documents are read from the store only when a query's hits are first read."""
    from medr2_hooks.retrieve.searcher import Searcher

    s = Searcher.open(small_index, retrievers=(name,))
    scores, rows = s._ranked(name, QUERIES, 10)
    for fusion in ("union", "rrf"):
        got = s.search(QUERIES, k=10, fusion=fusion)
        for qi, hits in enumerate(got):
            expected = [(r, sc) for r, sc in zip(rows[qi].tolist(), scores[qi].tolist()) if r >= 0][:10]
            assert len(hits) == len(expected)
            assert [(h.passage, h.scores[name]) for h in hits] == expected
            assert [(h.ranks, h.fused) for h in hits] == [({name: i}, round(rrf_score(i), 6))
                                                         for i in range(len(expected))]
    pmid, item = next(iter(corpus_files[1].items()))
    (mine,), (without,) = s.search([item["QUESTION"]], k=5), s.search([item["QUESTION"]], k=5, exclude_pmids=[pmid])
    assert mine[0].doc_id == f"pmid:{pmid}" and f"pmid:{pmid}" not in {h.doc_id for h in without}
    others = [h.passage for h in mine if h.doc_id != f"pmid:{pmid}"]  # its article has several passages
    assert len(without) == 5 and [h.passage for h in without][:len(others)] == others
    reads = []
    s.store.doc = lambda row, doc=s.store.doc: (reads.append(row), doc(row))[1]
    lazy = s.search(QUERIES, k=10)
    assert reads == [] and len(lazy[0]) == 10
    assert lazy[0][0].text and len(reads) == 10  # the first query's ten hits, nothing of the others


def test_searching_with_another_encoder_is_refused(small_index):
    from medr2_hooks.retrieve.encoders import DenseEncoder
    from medr2_hooks.retrieve.searcher import Searcher

    other = DenseEncoder("embedded:minilm", pooling="cls", max_length=256)
    with pytest.raises(Medr2Error, match="refusing"):
        Searcher.open(small_index, query_encoder=other).search(QUERIES[:1])


def test_empty_query_is_an_error(searcher):
    with pytest.raises(Medr2Error, match="empty query"):
        searcher.search(["  "])


# -- bad input -------------------------------------------------------------------------------------------------
BAD_LINES = {
    "empty document": '{"doc_id": "d2", "text": "   ", "source_type": "book"}',
    "missing field": '{"doc_id": "d3", "source_type": "book"}',
    "invalid JSON": '{"doc_id": "d4", "text": ',
    "duplicate doc_id": '{"doc_id": "d1", "text": "again", "source_type": "book"}',
}


def _generic(folder: Path, lines: list[str], name="docs.jsonl", gz=False) -> Recipe:
    import gzip

    data = ("\n".join(lines) + "\n").encode()
    path = folder / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    return small_recipe(folder, sources=[{"reader": "generic_jsonl", "base": "recipe", "paths": path.name}],
                        dense=None, segmentation={"tokenizer": "whitespace"})


@pytest.mark.parametrize("reason", list(BAD_LINES))
def test_bad_document_is_an_error_naming_file_and_line_in_strict_mode(tmp_path, reason):
    from medr2_hooks.retrieve.build import build

    good = '{"doc_id": "d1", "text": "Imatinib inhibits BCR-ABL.", "source_type": "book"}'
    recipe = _generic(tmp_path, [good, BAD_LINES[reason]])
    with pytest.raises(RowError) as err:
        build(recipe, folder=tmp_path / "idx", log=lambda *_: None)
    assert err.value.line == 2 and reason in str(err.value) and "docs.jsonl" in str(err.value)


def test_lenient_mode_skips_and_counts_every_bad_input(tmp_path):
    import dataclasses

    from medr2_hooks.retrieve.build import build

    good = ['{"doc_id": "d1", "text": "Imatinib inhibits BCR-ABL.", "source_type": "book"}',
            '{"doc_id": "d5", "text": "Hydroxyurea for sickle cell disease.", "source_type": "guideline"}']
    recipe = _generic(tmp_path, [good[0], *BAD_LINES.values(), good[1]])
    (tmp_path / "docs.jsonl").write_bytes((tmp_path / "docs.jsonl").read_bytes()
                                          + b'{"doc_id": "d6", "text": "bad \xff byte"}\n')
    manifest = build(dataclasses.replace(recipe, strict=False), folder=tmp_path / "idx", log=lambda *_: None)
    assert manifest["counts"]["documents"] == 2
    assert manifest["skipped"] == {"duplicate doc_id": 1, "empty document": 1, "invalid JSON": 1,
                                   "invalid UTF-8": 1, "missing field": 1}
    docs = [json.loads(line) for line in (tmp_path / "idx" / "corpus" / "docs.jsonl").read_text().splitlines()]
    assert docs[1]["evidence_level"] == 3  # guidelines are fixed at the guideline level


def test_truncated_gzip_is_reported(tmp_path):
    from medr2_hooks.retrieve.build import build

    lines = [f'{{"doc_id": "d{i}", "text": "passage number {i} about leukemia", "source_type": "book"}}'
             for i in range(2000)]
    recipe = _generic(tmp_path, lines, gz=True)
    path = tmp_path / "docs.jsonl.gz"
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(RowError, match="truncated or corrupt gzip") as err:
        build(recipe, folder=tmp_path / "idx", log=lambda *_: None)
    assert "docs.jsonl.gz" in str(err.value)


def test_unknown_recipe_key_is_an_error():
    from medr2_hooks.config import ConfigError

    with pytest.raises(ConfigError, match="unknown key 'factroy'.*valid keys"):
        small_recipe(Path("."), dense={"factroy": "Flat"})


# -- resume after kill -9 ------------------------------------------------------------------------------------
BUILD_SCRIPT = """
import sys
from medr2_hooks.config import from_dict
from medr2_hooks.corpus.recipe import Recipe
from medr2_hooks.retrieve.build import build
import json
build(from_dict(Recipe, json.loads(sys.argv[1]), "recipe"), folder=__import__("pathlib").Path(sys.argv[2]))
"""


@pytest.mark.slow
def test_build_killed_mid_encoding_resumes_to_identical_bytes(tmp_path, corpus_files):
    folder = corpus_files[0]
    recipe = {"name": "resume", "folder": str(folder),
              "sources": [{"reader": "pubmedqa_contexts", "base": "recipe", "paths": "pqal_subset.json"}],
              "segmentation": {"tokenizer": "embedded:minilm", "passage_tokens": 62, "passage_overlap": 8},
              "dense": {"encoder": "embedded:minilm", "max_length": 64, "batch_size": 16, "shard_size": 16},
              "bm25": {}}
    args = [sys.executable, "-c", BUILD_SCRIPT, json.dumps(recipe)]
    env = {**os.environ, "TQDM_DISABLE": "1"}
    subprocess.run([*args, str(tmp_path / "straight")], check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen([*args, str(killed)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "dense" / "emb-00002.npy").exists():
        assert proc.poll() is None and time.time() < deadline, "build ended before it could be killed"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "manifest.json").exists()
    shards_before = {p.name: p.stat().st_mtime_ns for p in (killed / "dense").glob("emb-*.npy")}
    subprocess.run([*args, str(killed)], check=True, env=env, capture_output=True)

    straight_files = {p.relative_to(tmp_path / "straight"): p.read_bytes()
                      for p in (tmp_path / "straight").rglob("*") if p.is_file() and p.name != "build_report.json"}
    killed_files = {p.relative_to(killed): p.read_bytes()
                    for p in killed.rglob("*") if p.is_file() and p.name != "build_report.json"}
    assert straight_files.keys() == killed_files.keys()
    assert all(straight_files[k] == killed_files[k] for k in straight_files)
    for name, mtime in shards_before.items():  # finished shards were not re-encoded
        assert (killed / "dense" / name).stat().st_mtime_ns == mtime
