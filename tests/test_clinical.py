"""Clinical benchmarks (Table 8): MedXpertQA's two option layouts, NEJMQA cases, RareArena loading, strict
diagnosis-list parsing and Orphanet grading, and a RareArena run through lm-eval on the fixture."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from medr2_hooks import data
from medr2_hooks.errors import DataError, RowError

FIXTURE = Path(__file__).parent / "fixtures" / "rarearena"


def _first_medxpertqa_line(data_root) -> dict:
    path = data_root / "medxpertqa" / "medxpertqa_sampled_text_input.jsonl"
    return json.loads(path.read_text().splitlines()[0])


def test_medxpertqa_list_and_dict_option_layouts_give_the_same_record(data_root):
    from medr2_hooks.data.medxpertqa import record

    row = _first_medxpertqa_line(data_root)
    hub_row = {**row, "options": {o["letter"]: o["content"] for o in row["options"]}, "label": row["label"][0]}
    a, b = record(row, "f.jsonl", 1), record(hub_row, "f.jsonl", 1)
    assert a == b and list(a.options) == list("ABCDEFGHIJ") and a.answer == row["label"][0]
    assert len(data.pools("medxpertqa_sampled").eval) == 234 and len(data.pools("medxpertqa").eval) == 2440


@pytest.mark.parametrize("change, problem", [
    ({"label": []}, "exactly one correct option, found 0"),
    ({"label": ["A", "B"]}, "exactly one correct option, found 2"),
    ({"label": ["K"]}, "not one of the options"),
    ({"options": [{"letter": "K", "content": "x"}]}, "not one of A–J"),
    ({"question": "  "}, "'question' is empty"),
])
def test_medxpertqa_bad_items_name_the_file_line_and_field(data_root, change, problem):
    from medr2_hooks.data.medxpertqa import record

    with pytest.raises(RowError, match=problem) as err:
        record({**_first_medxpertqa_line(data_root), **change}, "f.jsonl", 7)
    assert "f.jsonl:7" in str(err.value)


def test_nejmqa_default_set_names_its_source_and_user_sets_load(tmp_path):
    pools = data.pools("nejmqa")
    assert (len(pools.eval), len(pools.demos)) == (115, 5)
    assert all("not the paper's NEJMQA" in r.meta["dataset"] for r in pools.eval)
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps({"id": 1, "case": "A 30-year-old ...", "question": "Diagnosis?",
                                "options": ["Lupus", "Gout"], "answer": "B"}) + "\n")
    (rec,) = data.load("nejmqa", cases_file=path)
    assert rec.options == {"A": "Lupus", "B": "Gout"} and rec.answer == "B" and rec.question.endswith("Diagnosis?")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "case": "c", "question": "q", "options": ["x", "y"], "answer": "C"}) + "\n")
    with pytest.raises(RowError, match="bad.jsonl:1: field 'answer'"):
        data.load("nejmqa", cases_file=bad)


def test_agentclinic_cases_without_exactly_one_correct_answer_are_errors(tmp_path):
    from medr2_hooks.data import nejmqa

    folder = tmp_path / "clinical_cases" / "agentclinic_nejm"
    folder.mkdir(parents=True)
    row = {"question": "q", "physical_exams": "e",
           "answers": [{"text": "a", "correct": True}, {"text": "b", "correct": True}]}
    (folder / "agentclinic_nejm_extended.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(RowError, match="exactly one correct answer, found 2"):
        nejmqa.load(tmp_path)


def test_rarearena_fixture_loads_and_rdc_adds_test_results():
    rds = data.load("rarearena_rds", cases_file=FIXTURE / "RDS.json")
    rdc = data.load("rarearena_rdc", cases_file=FIXTURE / "RDC.json")
    assert len(rds) == len(rdc) == 12 and rds[0].options == {} and rds[0].answer == "Gaucher disease"
    assert "Test results:" in rdc[0].question and "Test results:" not in rds[0].question
    assert rds[0].to_doc()["gold"] == -1
    with pytest.raises(DataError, match="not in the mirror"):
        data.load("rarearena_rds")


def test_rarearena_prompt_never_contains_the_diagnosis():
    from medr2_hooks.lmeval import direct

    rec = data.load("rarearena_rds", cases_file=FIXTURE / "RDS.json")[1]
    doc = {**rec.to_doc(), "benchmark": "rarearena_rds"}
    other = {**dataclasses.replace(rec, answer="Gaucher disease").to_doc(), "benchmark": "rarearena_rds"}
    text = direct.doc_to_text(doc)
    assert text == direct.doc_to_text(other) and text.endswith("Diagnoses:\n1.") and "Marfan" not in text


@pytest.mark.parametrize("prediction, grade", [
    ("Gaucher disease", 2),
    ("GAUCHER DISEASE.", 2),
    ("gaucher's disease", 2),  # possessive
    ("Gaucher’s disease", 2),  # typographic apostrophe
    ("Gaucher disease type 1", 2),  # the case's own diagnosis wording (RareArena's score-2 set)
    ("Gaucher disease type 2", 0),  # another subtype: the judge decides, the offline lower bound gives nothing
    ("Gaucher disease type 1 (non-neuronopathic)", 0),  # not an Orphanet name: no partial credit
    ("Sphingolipidosis", 0),  # direct parent grouping 17 diseases: RareArena's score-1 set stops at 10
    ("Fabry disease", 0),
    ("", 0),
])
def test_orphanet_grading(prediction, grade):
    from medr2_hooks.data import orphanet

    assert orphanet.load().grade(prediction, "Gaucher disease", "355", "Gaucher disease type 1") == grade


def test_orphanet_grading_broad_parents_and_ids():
    from medr2_hooks.data import orphanet

    tree = orphanet.load()
    assert tree.grade("Rare developmental defect with connective tissue involvement", "Marfan syndrome",
                      "558") == 0  # 45
    assert tree.grade("Marfan syndrome and Marfan-related disorders", "Marfan syndrome", "558") == 1  # 10 diseases
    assert tree.grade("Marfan syndrome", "Marfan syndrome (MFS)", "558") == 2  # same Orpha id, other wording
    assert tree.grade("Wilson disease", "Wilson's disease", None, "") == 2


@pytest.mark.parametrize("continuation, items", [
    (" Gaucher disease\n2. Niemann-Pick disease\n3. Fabry disease\n4. Pompe disease\n5. Wilson disease\n6. Extra",
     ["Gaucher disease", "Niemann-Pick disease", "Fabry disease", "Pompe disease", "Wilson disease"]),
    (" Gaucher disease - lipid-laden macrophages\n2) Fabry disease: pain\n3. Pompe disease (infantile)\n",
     ["Gaucher disease", "Fabry disease", "Pompe disease"]),
    (" Gaucher disease\n2. gaucher disease\n3. Fabry disease", ["Gaucher disease", "Fabry disease"]),  # repeat dropped
    (" Gaucher disease\n3. Fabry disease", ["Gaucher disease"]),  # numbering gap ends the list
    (" Gaucher disease\nThe patient also ...\n2. Fabry disease", ["Gaucher disease"]),
    ("\n\nI am not sure.", []),
    (" **Gaucher disease**.", ["Gaucher disease"]),
    # a chat reply (issue 40.2): a sentence, a blank line, then the list from "1."; or the list restarted at "1."
    ("Based on the findings, the most likely diagnoses are:\n\n1. Gaucher disease\n2. Fabry disease - pain\n\n"
     "These fit the case.", ["Gaucher disease", "Fabry disease"]),
    ("\n1. **Gaucher disease**\n2. **Fabry disease**", ["Gaucher disease", "Fabry disease"]),
])
def test_diagnosis_list_parsing(continuation, items):
    from medr2_hooks.lmeval.diagnosis import parse_list

    assert parse_list(continuation) == items


def test_diagnosis_metrics_count_short_and_invalid_lists_and_never_pad():
    from medr2_hooks.lmeval.diagnosis import process_results

    rec = data.load("rarearena_rds", cases_file=FIXTURE / "RDS.json")[0]  # Gaucher disease
    doc = rec.to_doc()
    assert process_results(doc, [" Fabry disease\n2. Gaucher disease"]) == {
        "top1": 0.0, "top5": 1.0, "top1_lenient": 0.0, "top5_lenient": 1.0, "invalid": 0.0, "short_list": 1.0}
    marfan = data.load("rarearena_rds", cases_file=FIXTURE / "RDS.json")[1].to_doc()
    assert process_results(marfan, [" Marfan syndrome and Marfan-related disorders\n2. x"])["top1_lenient"] == 1.0
    assert process_results(doc, [" ???"])["invalid"] == 1.0 and process_results(doc, ["\nnothing"])["invalid"] == 1.0
