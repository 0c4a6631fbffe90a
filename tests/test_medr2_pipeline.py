"""The Med-R² pre-pass with the real embedded model over the demo textbook index: f_u, batched label
scoring, leakage (gold never reaches a stage), the stage cache, and provenance."""

from __future__ import annotations

import dataclasses
import json

import pytest

from medr2_hooks import data

from pipeline_helpers import TINY, _model_calls, _pipeline

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def gemma():
    from medr2_hooks.llm.hf import HFBackend

    return HFBackend("embedded:gemma-270m", batch_size=8)


def test_score_choices_equals_scoring_each_label_separately(gemma):
    prompts = ["Which kind of text is this? Text: The heart pumps blood.\nKind of text:", "Is it relevant? Answer:"]
    labels = [" definition", " cause-and-effect", " yes", " randomized controlled trial"]
    shared = gemma.score_choices(prompts, labels)
    separate = gemma.score([p for p in prompts for _ in labels], labels * 2)
    for i in range(2):
        assert shared[i] == pytest.approx([s for s, _ in separate[4 * i: 4 * i + 4]], abs=1e-3)


def test_usefulness_uses_the_reference_answer_and_a_truly_empty_no_document_row(gemma):
    from medr2_hooks.rerank import fine

    assert fine.answer_prompt("What is the capital of France?",
                              None) == "Question: What is the capital of France?\nAnswer:"
    calls = gemma.usage.calls
    [(l_init, l_x), (other_init, _)] = fine.answer_losses(gemma, [
        ("What is the capital of France?", "Paris",
         ["Paris is the capital and largest city of France.", "Mitochondria make ATP."]),
        ("What makes ATP?", "Mitochondria", ["Mitochondria make ATP."])])
    assert gemma.usage.calls == calls + 1  # the k + 1 rows of every question in one batch
    assert other_init != l_init
    (alone,) = gemma.score(["Question: What is the capital of France?\nAnswer:"], [" Paris"])
    assert l_init == pytest.approx(-alone[0] / alone[1], abs=1e-4)
    assert fine.f_u(l_init, l_x[0]) > 0  # the helpful document lowers the answer's loss
    assert fine.f_u(l_init, l_x[0]) > fine.f_u(l_init, l_x[1])


def test_guidelines_get_level_3_without_a_model_call(gemma):
    from medr2_hooks.rerank import fine

    calls = gemma.usage.calls
    out = fine.evidence_levels(gemma, ["Adults with asthma should use inhaled corticosteroids."], ["guideline"])
    assert out == [{"level": 3, "probs": None, "fixed": True}] and gemma.usage.calls == calls


@pytest.fixture(scope="module")
def usmle():
    pools = data.pools("medqa_usmle")
    return pools.eval[:2], pools.demos[:1]


def test_prepass_records_provenance_caches_and_never_sees_the_gold(tmp_path, usmle):
    from medr2_hooks.prepass.packs import prepare_records

    records, demos = usmle
    first_log: list = []
    packs, record = prepare_records(_pipeline(tmp_path, first_log), "medqa_usmle", records, demos)

    # provenance: every evidence item carries the Eq. 1 factors, iterations are recorded
    for p in packs:
        assert p["evidence"], "demo index returns evidence for every question"
        for ev in p["evidence"]:
            assert {"doc_id", "source_type", "evidence_level", "f_h", "f_g", "f_u", "F"} <= set(ev)
            assert ev["F"] == pytest.approx(ev["f_h"] * ev["f_g"] * (1 + ev["f_u"]))
        assert 1 <= len(p["iterations"]) <= TINY["iterations"]
        assert p["iterations"][0]["mu"] is None  # no previous set at t = 1
        assert p["effective_k"] == len(p["evidence"])
    assert record["usage"] and record["stage_seconds"]["cot"] > 0
    # the loop and the CoTs, recorded (issue 28.4, 28.9): lengths against the budget, where Alg. 2 stopped
    assert record["cot_tokens"]["n"] > 0 and record["cot_tokens"]["budget"] == TINY["cot_max_new_tokens"]
    assert 0 <= record["cot_tokens"]["at_limit"] <= record["cot_tokens"]["n"]
    assert sum(record["loop"]["stopped_at"].values()) == len(records)
    # a demonstration's rationale was made knowing its answer; one that concludes another is left out, counted
    rationale_prompts = [payload for kind, payload in first_log if kind == "generate:cot"
                         and "The correct answer to the medical question is" in payload]
    assert rationale_prompts and all(demos[0].question in json.loads(p)[0][0] for p in rationale_prompts)
    shown = sum(p["prefix"].count("Reasoning:") for p in packs[:1])
    assert shown + record["counts"].get("demos_disagreeing", 0) >= 1
    # every stage's ranked documents per iteration (issue 29.3): the evaluation items only
    runs = record["stage_runs"]
    assert {"dense.t1", "bm25.t1", "fused.t1", "coarse.t1", "fine.t1", "selected.t1", "packed",
            "fine.final"} <= set(runs)
    assert set(runs["packed"]) == {r.id for r in records}
    for r, p in zip(records, packs):
        assert runs["packed"][r.id] == list(dict.fromkeys(ev["doc_id"] for ev in p["evidence"]))
        assert set(runs["coarse.t1"][r.id]) <= set(runs["fused.t1"][r.id])

    # retrieval queries: the question (+ reformulation / CoT), never the options block
    queries = [q for kind, payload in first_log if kind == "search" for q in json.loads(payload)]
    for r in records + demos:
        block = "".join(f"{k}. {v}\n" for k, v in r.options.items())
        assert all(block.strip() not in q for q in queries)
        assert all(f"\nA. {r.options['A']}" not in q for q in queries)

    # identical second run: zero model calls, same packs
    again: list = []
    packs2, record2 = prepare_records(_pipeline(tmp_path, again), "medqa_usmle", records, demos)
    assert _model_calls(again) == [] and record2["usage"] == {}
    assert [p["evidence"] for p in packs2] == [p["evidence"] for p in packs]

    # leakage: other gold answers change no stage input (all cache hits, no model call, same evidence)
    swapped = [dataclasses.replace(r, answer=next(k for k in r.options if k != r.answer)) for r in records]
    leak_log: list = []
    packs3, _ = prepare_records(_pipeline(tmp_path, leak_log), "medqa_usmle", swapped, demos)
    assert _model_calls(leak_log) == []
    assert [p["evidence"] for p in packs3] == [p["evidence"] for p in packs]
    assert [p["prefix"] for p in packs3] == [p["prefix"] for p in packs]

    # another window: retrieval and reranking are reused; only packing runs again
    window_log: list = []
    packs4, record4 = prepare_records(_pipeline(tmp_path, window_log, window=3072), "medqa_usmle", records, demos)
    assert _model_calls(window_log) == []
    assert record4["cache"].get("retrieve:hit", 0) > 0 and record4["cache"].get("coarse:miss", 0) == 0
    assert "pack" in record4["stage_seconds"]


def test_pubmedqa_abstract_and_long_answer_reach_no_model(tmp_path, data_root):
    from medr2_hooks.data.readers import read_json
    from medr2_hooks.prepass.packs import prepare_records

    pools = data.pools("pubmedqa")
    records, demos = pools.eval[:1], pools.demos[:1]
    raw = read_json(data_root / "pubmedqa" / "ori_pqal.json")
    log: list = []
    prepare_records(_pipeline(tmp_path, log, iterations=1), "pubmedqa", records, demos)
    sent = " ".join(payload for _, payload in log)
    for r in records + demos:
        assert json.dumps(raw[r.id]["LONG_ANSWER"])[1:40] not in sent
        assert all(json.dumps(ctx)[1:40] not in sent for ctx in raw[r.id]["CONTEXTS"])


def test_vanilla_rag_searches_the_raw_question_densely_and_calls_no_model(tmp_path, usmle):
    from medr2_hooks.prepass.packs import prepare_records

    records, demos = usmle
    log: list = []
    variant = {"method": "vanilla_rag", "retrievers": ["dense"], "classify": False, "reformulate": False,
               "rerank": False, "cot": False}
    packs, record = prepare_records(_pipeline(tmp_path, log, **variant), "medqa_usmle", records, demos)
    queries = [q for kind, payload in log if kind == "search" for q in json.loads(payload)]
    assert queries == [r.question for r in records + demos]  # exactly the raw questions, once each
    assert _model_calls(log) == []
    for p in packs:
        assert p["evidence"] and all(set(e["scores"]) == {"dense"} for e in p["evidence"])
        assert p["n_demos"] == 0 and p["cot"] is None and len(p["iterations"]) == 1
