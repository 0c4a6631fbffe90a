"""Paper-scale corpus paths (issue 16) on small inputs: the streamed BM25 build gives bm25s' own index byte for
byte, and a 10k-document synthetic corpus (a real textbook's word distribution) builds and finds its documents."""

from __future__ import annotations

import random

import pytest

from medr2_hooks.corpus.synthetic import documents, word_distribution, write_jsonl


@pytest.fixture(scope="module")
def words(data_root):
    return word_distribution(data_root / "corpus_textbooks" / "en" / "First_Aid_Step1.txt.gz")


def test_streamed_bm25_equals_bm25s_over_all_tokens(tmp_path, words):
    import bm25s

    from medr2_hooks.retrieve.sparse import build_bm25

    texts = [d["text"] for d in documents(3000, *words, seed=1)]
    texts[7] = "the of and"  # a passage of stopwords only: no token
    n = build_bm25((texts[i:i + 512] for i in range(0, len(texts), 512)), tmp_path / "ours", 1.5, 0.75, "lucene", "en")
    assert n == 3000
    # the raw library: every text tokenised at once, ids over the sorted vocabulary
    tokens = bm25s.tokenize(texts, lower=True, stopwords="en", return_ids=False, show_progress=False)
    vocab = {t: i for i, t in enumerate(sorted({t for doc in tokens for t in doc}))}
    raw = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    raw.index(bm25s.tokenization.Tokenized(ids=[[vocab[t] for t in doc] for doc in tokens], vocab=vocab),
              show_progress=False)
    raw.save(str(tmp_path / "raw"), show_progress=False)
    ours = sorted(p.name for p in (tmp_path / "ours").iterdir())
    assert ours == sorted(p.name for p in (tmp_path / "raw").iterdir())
    for name in ours:
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "raw" / name).read_bytes(), name
    assert not list(tmp_path.glob("*.int32"))  # the scratch ids are gone


@pytest.mark.slow
def test_a_10k_document_corpus_builds_and_finds_its_documents(tmp_path, words):
    from medr2_hooks.corpus.recipe import BM25, Recipe, Source
    from medr2_hooks.corpus.segment import Segmentation
    from medr2_hooks.retrieve.build import build
    from medr2_hooks.retrieve.searcher import Searcher

    docs = list(documents(10_000, *words, seed=2))
    write_jsonl(tmp_path / "syn.jsonl", docs)
    recipe = Recipe(name="syn10k", sources=[Source(reader="generic_jsonl", paths="syn.jsonl", base=str(tmp_path))],
                    segmentation=Segmentation(tokenizer="whitespace", max_doc_tokens=10_000, passage_tokens=128,
                                              passage_overlap=16), dense=None, bm25=BM25())
    manifest = build(recipe, tmp_path / "index", log=lambda *_: None)
    assert manifest["counts"]["documents"] == 10_000 and manifest["counts"]["passages"] >= 10_000
    rng = random.Random(0)
    picked = rng.sample(docs, 20)
    queries = [" ".join(d["text"].split()[5:35]) for d in picked]
    hits = Searcher.open(tmp_path / "index").search(queries, k=1, unit="document")
    assert [h[0].doc_id for h in hits] == [d["doc_id"] for d in picked]


@pytest.mark.slow
def test_two_node_shards_merge_to_the_one_machine_manifest(tmp_path, words, monkeypatch):
    """``--corpus-only``, then parts 0/2 and 1/2 (as two nodes would, into one shared folder), then the merge: the
    manifest (every file's sha256 included) equals a one-machine build's, and the merge encodes nothing."""
    import json

    from medr2_hooks.corpus.recipe import BM25, Dense, Recipe, Source
    from medr2_hooks.corpus.segment import Segmentation
    from medr2_hooks.errors import Medr2Error
    from medr2_hooks.retrieve import encoders
    from medr2_hooks.retrieve.build import build, build_corpus, build_part

    write_jsonl(tmp_path / "syn.jsonl", documents(150, *words, seed=3, mean_tokens=60))
    recipe = Recipe(name="syn", sources=[Source(reader="generic_jsonl", paths="syn.jsonl", base=str(tmp_path))],
                    segmentation=Segmentation(tokenizer="whitespace", passage_tokens=48, passage_overlap=8),
                    dense=Dense(shard_size=32, factory="Flat"), bm25=BM25())
    one = build(recipe, tmp_path / "one", log=lambda *_: None)

    with pytest.raises(Medr2Error, match="--corpus-only"):
        build_part(recipe, (0, 2), tmp_path / "two", log=lambda *_: None)
    build_corpus(recipe, tmp_path / "two" / "corpus", log=lambda *_: None)
    for i in (1, 0):
        assert build_part(recipe, (i, 2), tmp_path / "two", log=lambda *_: None)["part"] == f"{i}/2"
    shards = sorted(p.name for p in (tmp_path / "two" / "dense").glob("emb-*.npy"))
    assert len(shards) == -(-one["counts"]["passages"] // 32) >= 4
    calls = []
    real = encoders.DenseEncoder.encode_corpus
    monkeypatch.setattr(encoders.DenseEncoder, "encode_corpus", lambda self, t: calls.append(len(t)) or real(self, t))
    two = build(recipe, tmp_path / "two", log=lambda *_: None)
    assert calls == []
    assert json.dumps(two, sort_keys=True) == json.dumps(one, sort_keys=True)


def test_a_bad_shard_spec_is_a_one_line_error(capsys):
    from medr2_hooks.cli.main import main

    for bad in ("two/8", "8/8", "²/3", "1/³"):  # "²".isdigit() is True and int("²") a ValueError traceback
        assert main(["index", "build", "textbooks_demo", "--shard", bad]) == 2
        err = capsys.readouterr().err
        assert "expected i/n with 0 <= i < n" in err and len(err.splitlines()) == 1, err
    assert main(["prepare", "--tasks", "medqa_usmle_medr2", "--shard", "²/3"]) == 2
    assert "expected i/n with 0 <= i < n" in capsys.readouterr().err


@pytest.mark.slow
def test_ivf_lists_on_disk_find_what_the_in_memory_ivf_finds(tmp_path, words):
    """``dense.on_disk``: the IVF lists are filled shard by shard into ``index.ivfdata`` (faiss.contrib.ondisk);
    searches equal the in-memory IVF's, the recipe's nprobe is applied (nprobe = nlist: exact search), and the
    index still finds its lists after the folder is moved."""
    import shutil

    from medr2_hooks.corpus.recipe import Dense, Recipe, Source
    from medr2_hooks.corpus.segment import Segmentation
    from medr2_hooks.retrieve.build import build
    from medr2_hooks.retrieve.searcher import Searcher

    docs = list(documents(120, *words, seed=4, mean_tokens=60))
    write_jsonl(tmp_path / "syn.jsonl", docs)
    hits = {}
    for name, dense in (("flat", Dense(shard_size=32)), ("memory", Dense(shard_size=32, factory="IVF4,Flat", nprobe=4)),
                        ("disk", Dense(shard_size=32, factory="IVF4,Flat", nprobe=4, on_disk=True))):
        recipe = Recipe(name=name, sources=[Source(reader="generic_jsonl", paths="syn.jsonl", base=str(tmp_path))],
                        segmentation=Segmentation(tokenizer="whitespace", passage_tokens=48, passage_overlap=8),
                        dense=dense, bm25=None)
        manifest = build(recipe, tmp_path / name, log=lambda *_: None)
        assert ("dense/index.ivfdata" in manifest["files"]) == (name == "disk")
        if name == "disk":
            shutil.move(tmp_path / name, tmp_path / "moved")
        queries = [" ".join(d["text"].split()[:20]) for d in docs[:10]]
        found = Searcher.open(tmp_path / ("moved" if name == "disk" else name),
                              retrievers=("dense",)).search(queries, k=5)
        hits[name] = [[(h.doc_id, round(h.scores["dense"], 4)) for h in q] for q in found]
    assert hits["disk"] == hits["memory"] == hits["flat"]


def test_on_disk_needs_an_ivf_factory(tmp_path):
    from medr2_hooks.config import ConfigError
    from medr2_hooks.corpus.recipe import Dense, Recipe, Source
    from medr2_hooks.retrieve.build import check_factory

    recipe = Recipe(name="x", sources=[Source(reader="generic_jsonl", paths="x.jsonl")],
                    dense=Dense(factory="HNSW32", on_disk=True))
    with pytest.raises(ConfigError, match="not an IVF index"):
        check_factory("HNSW32", 384, recipe)
    check_factory("IVF64,PQ8", 384, recipe.__class__(name="x", sources=recipe.sources,
                                                      dense=Dense(factory="IVF64,PQ8", on_disk=True)))


def test_lucene_runs_within_the_heap_it_is_given(tmp_path):
    """The JVM starts with ``-Xmx`` (Anserini's indexing buffer is half of it), so a Lucene build's memory is
    bounded at any corpus size. A fresh process: a JVM's heap is fixed when it starts."""
    import subprocess
    import sys

    pytest.importorskip("pyserini")
    code = ("from medr2_hooks.retrieve.lucene import jvm; j = jvm(300); "
            "print(j.autoclass('java.lang.Runtime').getRuntime().maxMemory() // 2**20)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 250 <= int(out.stdout.strip().splitlines()[-1]) <= 300


def test_build_resources_are_checked_before_any_work(capsys):
    from medr2_hooks.cli.main import main

    assert main(["index", "build", "textbooks_demo", "--heap-mb", "64"]) == 2
    assert "heap_mb must be >= 128" in capsys.readouterr().err
    assert main(["index", "build", "textbooks_demo", "--threads", "0"]) == 2
    assert "threads must be >= 1" in capsys.readouterr().err
    for part in (["--corpus-only"], ["--shard", "0/2"]):  # no JVM starts there: the flags would do nothing
        assert main(["index", "build", "textbooks_demo", *part, "--threads", "2"]) == 2
        assert "not with --corpus-only or --shard" in capsys.readouterr().err
    assert main(["index", "build", "textbooks_demo", "--workers-per-gpu", "0"]) == 2
    assert "workers_per_gpu must be >= 1" in capsys.readouterr().err
    assert main(["index", "build", "textbooks_demo", "--corpus-only", "--workers-per-gpu", "2"]) == 2
    assert "--corpus-only does not run" in capsys.readouterr().err


def test_the_corpus_store_keeps_a_bounded_number_of_documents(tmp_path, words, monkeypatch):
    """A build reads every passage once, in order: the store's document cache stays at its bound and the texts are
    those of the documents (the cache used to keep every document read: the whole corpus by the end of a build)."""
    from medr2_hooks.corpus.recipe import BM25, Recipe, Source
    from medr2_hooks.corpus.segment import Segmentation
    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.retrieve.build import build_corpus

    docs = list(documents(300, *words, seed=5, mean_tokens=40))
    write_jsonl(tmp_path / "syn.jsonl", docs)
    recipe = Recipe(name="syn", sources=[Source(reader="generic_jsonl", paths="syn.jsonl", base=str(tmp_path))],
                    segmentation=Segmentation(tokenizer="whitespace", passage_tokens=400, passage_overlap=8),
                    dense=None, bm25=BM25())
    build_corpus(recipe, tmp_path / "corpus", log=lambda *_: None)
    monkeypatch.setattr(CorpusStore, "CACHED", 16)
    store = CorpusStore(tmp_path / "corpus")
    texts = store.passage_texts(range(len(store.passages)))
    assert len(store._cache) == 16 and len(texts) == len(docs)
    assert [t.split() for t in texts] == [d["text"].split() for d in docs]
    assert store.passage_text(0) == texts[0]  # evicted long ago: read again from disk
