"""Plumbing of the hub-only models (SPLADE-v3, bge-reranker-v2-m3) on tiny models built locally from a
config with random weights: pooling, sparsity, index round trip, scoring. Not for reported numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    from medr2_hooks.llm.embedded import resolve

    return AutoTokenizer.from_pretrained(resolve("embedded:minilm"))


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory, minilm_tokenizer):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=minilm_tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    folder = tmp_path_factory.mktemp("tiny_splade")
    BertForMaskedLM(config).save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    return str(folder)


TEXTS = ["Imatinib inhibits the BCR-ABL tyrosine kinase in chronic myeloid leukemia.",
         "Vitamin C deficiency causes scurvy.", "Insulin lowers blood glucose."]


def test_splade_pooling_is_max_log1p_relu_over_attended_tokens(tiny_mlm):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from medr2_hooks.retrieve.sparse import SpladeEncoder

    encoder = SpladeEncoder(tiny_mlm, max_length=64, query_max_length=32, batch_size=2, device="cpu")
    assert encoder._projection is not None  # BERT's head: the logits are made vocabulary chunk by chunk
    matrix = encoder.encode(TEXTS)
    assert matrix.shape == (3, encoder.vocab_size)
    tok, model = AutoTokenizer.from_pretrained(tiny_mlm), AutoModelForMaskedLM.from_pretrained(tiny_mlm).eval()
    for i, text in enumerate(TEXTS):
        batch = tok([text], return_tensors="pt", truncation=True, max_length=64)
        with torch.no_grad():
            logits = model(**batch).logits[0]
        expected = torch.log1p(torch.relu(logits)).max(dim=0).values.numpy()
        assert np.allclose(matrix[i].toarray()[0], expected, atol=1e-5)
    assert (matrix.toarray() >= 0).all()
    assert matrix.nnz < matrix.shape[0] * matrix.shape[1]  # relu zeroes make the vectors sparse


def test_splade_head_is_left_whole_when_its_logits_are_not_the_projection(tiny_mlm):
    """A masked LM that transforms its logits after the output projection (here a soft cap) keeps its head:
    chunking the projection would drop the cap."""
    from transformers import AutoTokenizer, BertForMaskedLM

    from medr2_hooks.retrieve.sparse import _detach_output_projection

    class Capped(BertForMaskedLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = 2.0 * torch.tanh(out.logits / 2.0)
            return out

    tok, model = AutoTokenizer.from_pretrained(tiny_mlm), Capped.from_pretrained(tiny_mlm).eval()
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch).logits
        assert _detach_output_projection(model, tok, "cpu") is None
        assert torch.equal(model(**batch).logits, before)


def test_splade_index_round_trip_and_dot_product_scoring(tmp_path, tiny_mlm):
    from medr2_hooks.retrieve.sparse import SpladeEncoder, SpladeIndex, save_csr

    encoder = SpladeEncoder(tiny_mlm, max_length=64, query_max_length=32, device="cpu")
    docs = encoder.encode(TEXTS)
    save_csr(tmp_path / "docs.npz", docs)
    index = SpladeIndex(tmp_path / "docs.npz", encoder)
    assert (index.terms != docs.T.tocsr()).nnz == 0
    queries = ["BCR-ABL kinase inhibitor", "scurvy"]
    scores, rows = index.search(queries, k=3)
    dense = encoder.encode(queries, query=True).toarray() @ docs.toarray().T
    expected = np.argsort(-dense, axis=1, kind="stable")[:, :3]
    best = np.take_along_axis(dense, expected, axis=1)
    assert np.array_equal(rows, np.where(best > 0, expected, -1))  # no shared term: not a hit
    assert np.allclose(scores, np.where(best > 0, best, 0.0), atol=1e-4)
    # the same top-k whatever the query chunking (the products are never one dense matrix)
    assert np.array_equal(index.search(queries, k=3, chunk=1)[1], rows)
    # more matches than k, with exact ties (each text 4 times): the k-th score's ties go to the lower rows
    repeated = encoder.encode(TEXTS * 4)
    save_csr(tmp_path / "repeated.npz", repeated)
    scores, rows = SpladeIndex(tmp_path / "repeated.npz", encoder).search(queries, k=5)
    dense = encoder.encode(queries, query=True).toarray() @ repeated.toarray().T
    expected = np.argsort(-dense, axis=1, kind="stable")[:, :5]
    assert (dense > 0).sum(axis=1).min() > 5 and np.array_equal(rows, expected)
    assert np.allclose(scores, np.take_along_axis(dense, expected, axis=1), atol=1e-4)


def test_splade_retriever_in_a_built_index(tmp_path, tiny_mlm):
    from medr2_hooks.config import from_dict
    from medr2_hooks.corpus.recipe import Recipe
    from medr2_hooks.retrieve.build import build
    from medr2_hooks.retrieve.searcher import Searcher

    (tmp_path / "docs.jsonl").write_text("".join(
        f'{{"doc_id": "d{i}", "text": "{t}", "source_type": "book"}}\n' for i, t in enumerate(TEXTS)))
    recipe = from_dict(Recipe, {"name": "tiny", "folder": str(tmp_path),
                                "sources": [{"reader": "generic_jsonl", "base": "recipe", "paths": "docs.jsonl"}],
                                "segmentation": {"tokenizer": "whitespace"}, "dense": None, "bm25": {},
                                "splade": {"model": tiny_mlm, "max_length": 64, "query_max_length": 32}}, "tiny")
    manifest = build(recipe, folder=tmp_path / "idx", log=lambda *_: None)
    assert "splade" in manifest and "splade/splade-00000.npz" in manifest["files"]
    (hits,) = Searcher.open(tmp_path / "idx").search(["scurvy vitamin"], k=3)
    assert {h.doc_id for h in hits} == {"d0", "d1", "d2"}
    assert all({"splade", "bm25"} >= set(h.scores) for h in hits)


def test_splade_shards_resume_and_equal_one_encoding(tmp_path, tiny_mlm, monkeypatch):
    """Shard by shard (2 passages each): a lost shard is the only one encoded again, and the shards together are
    the matrix one call over every passage gives."""
    from medr2_hooks.config import from_dict
    from medr2_hooks.corpus.recipe import Recipe
    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.retrieve import sparse as sparse_module
    from medr2_hooks.retrieve.build import build
    from medr2_hooks.retrieve.sparse import SpladeEncoder, load_csr_shards

    texts = TEXTS * 3
    (tmp_path / "docs.jsonl").write_text("".join(
        f'{{"doc_id": "d{i}", "text": "{t}", "source_type": "book"}}\n' for i, t in enumerate(texts)))
    recipe = from_dict(Recipe, {"name": "tiny", "folder": str(tmp_path),
                                "sources": [{"reader": "generic_jsonl", "base": "recipe", "paths": "docs.jsonl"}],
                                "segmentation": {"tokenizer": "whitespace"}, "dense": None, "bm25": None,
                                "splade": {"model": tiny_mlm, "max_length": 64, "shard_size": 2}}, "tiny")
    build(recipe, folder=tmp_path / "idx", log=lambda *_: None)
    shards = sorted((tmp_path / "idx" / "splade").glob("splade-*.npz"))
    assert len(shards) == 5
    encoder = SpladeEncoder(tiny_mlm, max_length=64)
    store = CorpusStore(tmp_path / "idx" / "corpus")
    whole = encoder.encode(store.passage_texts(range(len(store.passages))))
    store.close()
    ours = load_csr_shards(tmp_path / "idx" / "splade", encoder.vocab_size)
    assert ours.shape == whole.shape and abs(ours - whole).max() < 1e-5
    shards[3].unlink()
    calls = []
    real = sparse_module.SpladeEncoder.encode
    monkeypatch.setattr(sparse_module.SpladeEncoder, "encode",
                        lambda self, t, query=False: calls.append(len(t)) or real(self, t, query))
    build(recipe, folder=tmp_path / "idx", log=lambda *_: None)
    assert calls == [2]


@pytest.mark.slow
def test_splade_build_on_a_pool_of_devices_writes_the_one_device_shards(tmp_path, tiny_mlm, monkeypatch):
    """The multi-GPU build's code path with two CPU workers (sentence-transformers' pool, as on 2 GPUs): the
    shards hold the same terms and weights as one process's, and the workers are stopped when the build ends."""
    import multiprocessing

    from medr2_hooks.config import from_dict
    from medr2_hooks.corpus.recipe import Recipe
    from medr2_hooks.retrieve import encoders
    from medr2_hooks.retrieve.build import build
    from medr2_hooks.retrieve.sparse import load_csr_shards

    (tmp_path / "docs.jsonl").write_text("".join(
        f'{{"doc_id": "d{i}", "text": "{t}", "source_type": "book"}}\n' for i, t in enumerate(TEXTS * 5)))
    recipe = from_dict(Recipe, {"name": "tiny", "folder": str(tmp_path),
                                "sources": [{"reader": "generic_jsonl", "base": "recipe", "paths": "docs.jsonl"}],
                                "segmentation": {"tokenizer": "whitespace"}, "dense": None, "bm25": None,
                                "splade": {"model": tiny_mlm, "max_length": 64, "shard_size": 8}}, "tiny")
    build(recipe, folder=tmp_path / "one", log=lambda *_: None)
    monkeypatch.setattr(encoders, "all_devices", lambda workers_per_gpu=1: ["cpu", "cpu"])
    build(recipe, folder=tmp_path / "pool", log=lambda *_: None)
    assert not multiprocessing.active_children()
    one = load_csr_shards(tmp_path / "one" / "splade", 30522)
    pool = load_csr_shards(tmp_path / "pool" / "splade", 30522)
    assert one.shape == pool.shape == (15, 30522) and one.nnz > 0
    # same terms; weights equal to float rounding (the pool batches texts sorted by length, so the padding
    # and hence the matrix shapes of the forward passes differ)
    assert np.array_equal(one.indptr, pool.indptr) and np.array_equal(one.indices, pool.indices)
    assert abs(one - pool).max() < 1e-5
    assert len(list((tmp_path / "pool" / "splade").glob("splade-*.npz"))) == 2


def test_splade_build_on_one_gpu_encodes_in_one_process_whatever_the_workers(tmp_path, monkeypatch):
    """On one GPU the one-process loop is faster than a pool of workers on it (319 against 267 passages/s on an
    H200), so --workers-per-gpu does not start a pool there; over several GPUs it sizes the pool."""
    from medr2_hooks.config import from_dict
    from medr2_hooks.corpus.recipe import Recipe
    from medr2_hooks.retrieve import build as build_module, encoders, sparse

    class Chosen(Exception):
        pass

    def encoder(*args, device=None):
        raise Chosen(device)

    (tmp_path / "docs.jsonl").write_text('{"doc_id": "d0", "text": "Imatinib inhibits BCR-ABL.", '
                                         '"source_type": "book"}\n')
    recipe = from_dict(Recipe, {"name": "tiny", "folder": str(tmp_path),
                                "sources": [{"reader": "generic_jsonl", "base": "recipe", "paths": "docs.jsonl"}],
                                "segmentation": {"tokenizer": "whitespace"}, "dense": None, "bm25": None,
                                "splade": {"model": "unused", "shard_size": 8}}, "tiny")
    monkeypatch.setattr(sparse, "SpladeEncoder", encoder)
    for gpus, expected in ((1, "cuda:0"), (2, ["cuda:0", "cuda:0", "cuda:1", "cuda:1"])):
        monkeypatch.setattr(encoders, "all_devices", lambda workers_per_gpu=1, gpus=gpus: [
            f"cuda:{i}" for i in range(gpus) for _ in range(workers_per_gpu)])
        with pytest.raises(Chosen) as chosen:
            build_module.build(recipe, folder=tmp_path / "index", log=lambda *_: None,
                               resources=build_module.Resources(workers_per_gpu=2))
        assert chosen.value.args[0] == expected


def test_splade_pyserini_impact_index_scores_the_quantised_dot_product(tmp_path, tiny_mlm):
    pytest.importorskip("pyserini", reason="the pyserini backend is the optional sparse extra")
    from medr2_hooks.config import from_dict
    from medr2_hooks.corpus.recipe import Recipe
    from medr2_hooks.retrieve.build import build
    from medr2_hooks.retrieve.searcher import Searcher
    from medr2_hooks.retrieve.sparse import SpladeEncoder

    texts = TEXTS + ["Metformin is first-line therapy for type 2 diabetes.",
                     "Warfarin inhibits vitamin K epoxide reductase."]
    (tmp_path / "docs.jsonl").write_text("".join(
        f'{{"doc_id": "d{i}", "text": "{t}", "source_type": "book"}}\n' for i, t in enumerate(texts)))
    recipe = from_dict(Recipe, {"name": "tiny", "folder": str(tmp_path),
                                "sources": [{"reader": "generic_jsonl", "base": "recipe", "paths": "docs.jsonl"}],
                                "segmentation": {"tokenizer": "whitespace"}, "dense": None, "bm25": None,
                                "splade": {"model": tiny_mlm, "max_length": 64, "query_max_length": 32,
                                           "index": "pyserini", "quantization": 100}}, "tiny")
    manifest = build(recipe, folder=tmp_path / "idx", log=lambda *_: None)
    assert manifest["splade"]["lucene"]["quantization"] == 100
    encoder = SpladeEncoder(tiny_mlm, max_length=64, query_max_length=32, device="cpu")
    queries = ["BCR-ABL kinase inhibitor", "scurvy", "diabetes metformin"]
    quantise = lambda m: np.rint(m.toarray() * 100)  # noqa: E731
    expected = quantise(encoder.encode(queries, query=True)) @ quantise(encoder.encode(texts)).T
    scores, rows = Searcher.open(tmp_path / "idx")._ranked("splade", queries, 5)
    assert np.allclose(scores, np.take_along_axis(expected, rows, axis=1))  # Lucene's impact score = integer dot
    assert np.allclose(scores, -np.sort(-expected, axis=1))  # ... and the ranking is by it


def test_cross_encoder_reranker_plumbing(tmp_path, minilm_tokenizer):
    from transformers import BertConfig, BertForSequenceClassification

    from medr2_hooks.rerank.coarse import CrossEncoderReranker

    torch.manual_seed(0)
    config = BertConfig(vocab_size=minilm_tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    minilm_tokenizer.save_pretrained(tmp_path)
    reranker = CrossEncoderReranker(str(tmp_path), max_length=64, batch_size=2, device="cpu")
    pairs = [("What causes scurvy?", t) for t in TEXTS]
    scores = reranker.score(pairs)
    assert len(scores) == 3 and all(0.0 < s < 1.0 for s in scores)  # normalize=True: sigmoid scores
    assert reranker.score(pairs[:1]) == pytest.approx(scores[:1], abs=1e-5)
    assert reranker.model_id.startswith("cross_encoder:")
