"""A corpus declared in a recipe with ``reader: table`` (issue 15, point 2): a user's own guidelines as a CSV and
a field mapping, indexed and searched with no Python; bad tables are errors naming file, line and column."""

from __future__ import annotations

import csv
import json

import pytest

from medr2_hooks.errors import DataError


def _guidelines(tmp_path, n: int = 40):
    """Real abstracts (PubMedQA contexts from the shared data) as a guideline table with a level column."""
    from medr2_hooks import settings

    raw = json.loads((settings.data_dir() / "pubmedqa" / "ori_pqal.json").read_text())
    path = tmp_path / "my_guidelines.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["gid", "heading", "body", "kind", "grade"])
        for pmid, obj in list(raw.items())[:n]:
            writer.writerow([f"g{pmid}", obj["QUESTION"], "\n".join(obj["CONTEXTS"]), "paper", "2"])
    return path, raw


def _recipe(tmp_path, options: dict):
    import yaml

    from medr2_hooks.corpus.recipe import load_recipe

    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({
        "name": "mine", "sources": [{"reader": "table", "base": str(tmp_path), "paths": "my_guidelines.csv",
                                     "options": options}],
        "segmentation": {"tokenizer": "whitespace", "max_doc_tokens": 300, "passage_tokens": 64, "passage_overlap": 8},
        "dense": None, "bm25": {}}))
    return load_recipe(str(path))


def test_a_table_corpus_is_indexed_and_searched(tmp_path):
    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.retrieve.build import build
    from medr2_hooks.retrieve.searcher import Searcher

    _, raw = _guidelines(tmp_path)
    recipe = _recipe(tmp_path, {"fields": {"doc_id": "gid", "title": "heading", "text": "body",
                                           "source_type": "kind", "evidence_level": "grade"}})
    build(recipe, tmp_path / "index", log=lambda *_: None)
    store = CorpusStore(tmp_path / "index" / "corpus")
    docs = {d.doc_id.split(":")[0]: d for d in store.iter_docs()}
    store.close()
    assert len(docs) == 40 and {d.source_type for d in docs.values()} == {"paper"}
    assert {d.evidence_level for d in docs.values()} == {2}
    pmid, first = next(iter(raw.items()))
    assert docs[f"g{pmid}"].title == first["QUESTION"] and docs[f"g{pmid}"].meta["source"] == "my_guidelines.csv:2"
    hits = Searcher.open(tmp_path / "index").search([first["CONTEXTS"][0][:200]], k=3, unit="document")[0]
    assert hits[0].doc_id.split(":")[0] == f"g{pmid}"


def test_a_fixed_source_type_stands_in_for_a_column(tmp_path):
    from medr2_hooks.corpus.document import SkipReport
    from medr2_hooks.corpus.sources import table

    _guidelines(tmp_path, 5)
    docs = list(table("my_guidelines.csv", tmp_path, SkipReport(), {"doc_id": "gid", "text": "body"},
                      source_type="guideline"))
    assert len(docs) == 5 and {(d.source_type, d.evidence_level, d.title) for d in docs} == {("guideline", 3, "")}


@pytest.mark.parametrize("options,error", [
    ({"fields": {"doc_id": "gid", "text": "content"}, "source_type": "guideline"}, "column 'content'"),
    ({"fields": {"doc_id": "gid", "body": "body"}, "source_type": "guideline"}, "fields must map doc_id and text"),
    ({"fields": {"doc_id": "gid", "text": "body"}}, "source_type column in fields or a fixed source_type"),
])
def test_bad_table_mappings_are_errors(tmp_path, options, error):
    from medr2_hooks.retrieve.build import build

    _guidelines(tmp_path, 5)
    with pytest.raises(DataError, match=error):
        build(_recipe(tmp_path, options), tmp_path / "index", log=lambda *_: None)


def test_an_unknown_reader_option_is_a_config_error(tmp_path):
    from medr2_hooks.config import ConfigError

    _guidelines(tmp_path, 5)
    with pytest.raises(ConfigError, match="unknown option 'field'; valid options: fields, format"):
        _recipe(tmp_path, {"field": {"doc_id": "gid", "text": "body"}})


def test_a_bad_level_is_a_row_error_naming_file_line_and_column(tmp_path):
    from medr2_hooks.corpus.document import SkipReport
    from medr2_hooks.corpus.sources import table
    from medr2_hooks.errors import RowError

    fields = {"doc_id": "gid", "text": "body", "source_type": "kind", "evidence_level": "grade"}
    path, _ = _guidelines(tmp_path, 5)
    original = path.read_text()
    # 3.9 used to become level 3 and true level 1 (the most credible): only whole numbers 1-9 are levels
    for bad in ("12", "3.9", "3.0", "true", "high", "0"):
        path.write_text(original.replace(",paper,2", f",paper,{bad}", 1))
        with pytest.raises(RowError, match=rf"my_guidelines.csv:2: field 'grade' invalid field: evidence level "
                                           rf"'{bad}' is not a whole number 1-9"):
            list(table("my_guidelines.csv", tmp_path, SkipReport(), fields))
    path.write_text(original.replace(",paper,2", ",paper, 7 ", 1))
    assert [d.evidence_level for d in table("my_guidelines.csv", tmp_path, SkipReport(), fields)][:2] == [7, 2]

    from medr2_hooks.corpus.sources import evidence_level_of

    assert [evidence_level_of(v) for v in (1, 9, "4", None, "")] == [1, 9, 4, None, None]
    for bad in (3.9, True, 10, 2.0):
        with pytest.raises(ValueError, match="is not a whole number 1-9"):
            evidence_level_of(bad)
