"""Each benchmark loader on the real shared files: counts, schema, demo pools."""

from __future__ import annotations

import json

import pytest

from medr2_hooks import data
from medr2_hooks.cli.main import main

EXPECTED = {
    "medqa_usmle": (2535, 10),
    "medqa_mcmle": (6840, 11),
    "medmcqa": (4170, 13),
    "pubmedqa": (990, 10),
    "mmlu_med": (1080, 9),
    "medxpertqa": (2440, 10),
    "medxpertqa_sampled": (234, 10),
    "nejmqa": (115, 5),
    "bioasq_yn": (608, 10),
    "mirage_mmlu": (1089, 0),
    "mirage_medqa": (1273, 0),
    "mirage_medmcqa": (4183, 0),
    "mirage_pubmedqa": (500, 0),
    "mirage_bioasq": (618, 0),
}
NOT_IN_MIRROR = ("rarearena_rds", "rarearena_rdc")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_pools_have_paper_counts_and_are_disjoint(name):
    pools = data.pools(name)
    assert (len(pools.eval), len(pools.demos)) == EXPECTED[name]
    eval_ids = {r.id for r in pools.eval}
    assert len(eval_ids) == len(pools.eval)
    assert not eval_ids & {r.id for r in pools.demos}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_record_is_well_formed(name):
    for record in data.load(name):
        assert record.question.strip()
        assert record.answer in record.options
        assert all(text.strip() for text in record.options.values())
        assert record.language == data.BENCHMARKS[name].language


def test_demo_choice_is_seeded_and_independent_of_file_order():
    records = data.load("medqa_usmle")
    first = data.demo_ids(records, 10)
    assert first == data.demo_ids(list(reversed(records)), 10)
    assert first != data.demo_ids(records, 10, seed=7)


def test_medqa_usmle_first_record_matches_file():
    record = data.load("medqa_usmle")[0]
    assert record.id == "dev-00001"
    assert record.options == {"A": "Chloramphenicol", "B": "Gentamicin", "C": "Ciprofloxacin",
                              "D": "Ceftriaxone", "E": "Trimethoprim"}
    assert record.answer == "D"


def test_four_option_medqa_variant_loads():
    from medr2_hooks.data import medqa

    records = medqa.load_usmle(data._root(None), options=4)
    assert len(records) == 2545 and all(len(r.options) == 4 for r in records)


def test_medmcqa_maps_cop_to_letter_and_keeps_subject():
    record = data.load("medmcqa")[0]
    assert record.answer == "A"  # cop 1
    assert record.meta["subject"] == "Physiology"


def test_pubmedqa_is_question_only_with_pmid():
    record = next(r for r in data.load("pubmedqa") if r.id == "21645374")
    assert record.options == {"yes": "yes", "no": "no", "maybe": "maybe"}
    assert record.answer == "yes" and record.meta["pmid"] == "21645374"
    assert "CONTEXTS" not in record.meta and "LONG_ANSWER" not in record.meta
    assert sum(r.meta["official_test"] for r in data.load("pubmedqa")) == 500


def test_mmlu_med_has_six_subjects_with_release_sizes():
    from collections import Counter

    sizes = Counter(r.meta["subject"] for r in data.load("mmlu_med"))
    assert sizes == {"anatomy": 135, "clinical_knowledge": 265, "professional_medicine": 272,
                     "medical_genetics": 100, "college_medicine": 173, "college_biology": 144}


def test_data_info_json_prints_exact_counts(capsys):
    assert main(["data", "info", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert {n: {"eval": c["eval"], "demos": c["demos"]} for n, c in counts.items() if n not in NOT_IN_MIRROR} == {
        name: {"eval": e, "demos": d} for name, (e, d) in EXPECTED.items()}
    assert counts["medxpertqa"]["inline_mismatch"] == 2  # kept with the options field (issue 30.3)
    assert all(counts[n]["eval"] is None and "not in the mirror" in counts[n]["missing"] for n in NOT_IN_MIRROR)


def test_record_doc_round_trip():
    record = data.load("medmcqa")[3]
    assert data.Record.from_doc(record.to_doc()) == record
