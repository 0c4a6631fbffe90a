"""HyDE (issue 53), one module and one registry entry, on the real embedded models over the demo index: the passage is
written from the stem alone, searched on the encoder's document side averaged with the stem's embedding, packed as
vanilla RAG packs; its tasks, Table 2's addition, the dry-run and the stage runs all come from its declaration."""

from __future__ import annotations

import json

import numpy as np
import pytest

from medr2_hooks import data, methods

from pipeline_helpers import TINY, _pipeline, one_run

HYDE = {**TINY, **methods.method("hyde").variant(), "retrieve_k": 4, "coarse_k": 3,
        "options": {"hyde": {"passage_max_new_tokens": 24}}}


@pytest.fixture(scope="module")
def usmle():
    return data.pools("medqa_usmle").eval[:2]


@pytest.mark.slow
def test_hyde_writes_from_the_stem_searches_its_passage_on_the_document_side_and_packs_as_vanilla_rag(tmp_path,
                                                                                                      usmle):
    from medr2_hooks.pipeline import hyde
    from medr2_hooks.prepass.packs import prepare_records

    log: list = []
    m = _pipeline(tmp_path, log, **HYDE)
    packs, record = prepare_records(m, "medqa_usmle", usmle, [])
    assert record["pipeline"] == "hyde" and record["demos"] == 0 and set(record["stage_seconds"]) == {
        "hyde_passage", "retrieve", "pack"}

    # the writer and the searcher see the stem only: never an option, never the answer
    sent = " ".join(payload for kind, payload in log if kind in ("generate:hyde", "search"))
    for r in usmle:
        assert r.question[:60] in sent
        assert not any(text in sent for text in r.options.values() if len(text) > 3)
    assert [kind for kind, _ in log].count("generate:hyde") == 1  # both questions in one batched call

    # the dense search read (E_query(stem) + E_document(passage)) / 2, computed here by the encoder itself
    passages = [p["hyde_passage"] for p in packs]
    assert all(passages) and record["counts"]["hyde_fallbacks"] == 0
    encoder = m.searcher.query_encoder()
    stems = [r.question for r in usmle]
    expected = (encoder.model.encode_queries(stems) + encoder.model.encode_corpus(passages)) / 2
    np.testing.assert_allclose(m.searcher.document_side_vectors(stems, passages), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.searcher.document_side_vectors(stems, ["", ""]), encoder.encode_queries(stems),
                               rtol=1e-5, atol=1e-6)  # an unusable passage: the stem's embedding alone
    vectors = m.searcher.document_side_vectors(stems, passages)
    own = m.searcher.search(stems, k=4, vectors=vectors)
    plain = m.searcher.search(stems, k=4)
    for p, hits, stem_hits in zip(packs, own, plain):
        assert p["retrieved_ids"] == [h.doc_id for h in hits]  # the run searched the averaged vector
        assert [h.doc_id for h in hits] != [h.doc_id for h in stem_hits] or p is packs[-1]

    # vanilla RAG's packing: the first coarse_k candidates in retrieval order that fit, no demonstrations, no CoT
    for p in packs:
        assert p["prefix"].startswith("Evidence:\n[1] ") and p["n_demos"] == 0 and p["reasoning"] is None
        assert [e["doc_id"] for e in p["evidence"]] == p["retrieved_ids"][: len(p["evidence"])]
        assert 1 <= p["effective_k"] <= HYDE["coarse_k"]
    # what medr2 evidence scores: the dense run of the iteration, the selected and the packed documents
    assert {"dense.t1", "selected.final", "packed"} <= set(record["stage_runs"])
    assert hyde.prepare.__module__ == "medr2_hooks.pipeline.hyde"


def test_hyde_is_one_registry_entry_with_tasks_table_2_and_a_dry_run_count(tmp_path):
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.cost import run_lines
    from medr2_hooks.experiments.expand import expand
    from medr2_hooks.lmeval.registry import task_hook_kwargs

    assert methods.method("hyde").stages() == ("reformulate", "retrieve", "apply")
    assert methods.resolve("hyde").roles_used() == ("hyde",)
    tasks = ["medqa_usmle_hyde", "medqa_mcmle_hyde_gen", "medmcqa_hyde", "pubmedqa_hyde", "mmlu_med_hyde",
             "nejmqa_hyde_gen", "medxpertqa_hyde", "rarearena_rds_hyde", "rarearena_rdc_hyde", "bioasq_yn_hyde"]
    hooks = task_hook_kwargs(tasks)  # every benchmark's (mmlu_med_hyde: a group of its six subjects)
    assert len(hooks) == len(tasks) - 1 + 6 and {k["method"] for k in hooks.values()} == {"hyde"}
    runs = [r for r in expand(load_experiment("table2")) if r.method == "hyde"]
    assert len(runs) == 6 * 5  # beside vanilla RAG, every model and benchmark; its title says it is an addition
    assert "not in the paper" in methods.method("hyde").title

    lines, assumptions = run_lines(one_run(tmp_path, "hyde", "{options: {hyde: {passage_max_new_tokens: 100}}}"))
    written = [line for line in lines if line.stage == "hyde_passage"]
    assert {line.role for line in written} == {"hyde"}
    assert sum(line.requests for line in written) == assumptions["items"]
    assert sum(line.generated_tokens for line in written) == 100 * assumptions["items"]  # the ceiling: the cap


@pytest.mark.parametrize("options, message", [
    ({"hyde": {"passage_length": 5}}, "unknown key 'passage_length' for HydeOptions"),
    ({"hyde": {"passage_max_new_tokens": 0}}, "passage_max_new_tokens must be >= 1"),
    ({"llm_amt": {}}, "pipeline 'llm_amt' has no settings of its own"),
    ({"hyd": {}}, "options.hyd: not a pipeline"),
])
def test_a_setting_hyde_does_not_have_is_an_error(options, message):
    from medr2_hooks.config import ConfigError

    with pytest.raises((ConfigError, ValueError), match=message):
        methods.resolve("hyde", {"options": options})
    json.dumps(methods.resolve("hyde").to_json())  # the defaults filled in, as the run record shows them
