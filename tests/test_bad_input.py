"""Bad input gets a clear error naming file, line and field; unknown names list the valid ones."""

from __future__ import annotations

import json
import shutil

import pytest

from medr2_hooks import data
from medr2_hooks.cli.main import main
from medr2_hooks.errors import DataError, RowError, UnknownNameError


@pytest.fixture
def mirror(tmp_path, data_root):
    """A writable copy of the MedMCQA and MedQA-USMLE files to corrupt."""
    for sub in ("medmcqa", "medqa_usmle/US"):
        (tmp_path / sub).mkdir(parents=True)
    shutil.copy(data_root / "medmcqa" / "dev.json", tmp_path / "medmcqa" / "dev.json")
    for split in ("dev", "test"):
        shutil.copy(data_root / "medqa_usmle/US" / f"{split}.jsonl", tmp_path / "medqa_usmle/US" / f"{split}.jsonl")
    data._load_builtin.cache_clear()
    yield tmp_path
    data._load_builtin.cache_clear()


def _rewrite_line(path, lineno, transform):
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[lineno - 1] = transform(lines[lineno - 1])
    path.write_text("".join(lines), encoding="utf-8")


def test_unknown_benchmark_lists_valid_ones():
    with pytest.raises(UnknownNameError) as err:
        data.pools("medqa_usa")
    assert "medqa_usmle" in str(err.value) and "pubmedqa" in str(err.value)


def test_cli_unknown_benchmark_exits_2_with_list(capsys):
    assert main(["data", "info", "nope"]) == 2
    assert ("valid benchmarks: bioasq_yn, medmcqa, medqa_mcmle, medqa_usmle, medxpertqa, "
            "medxpertqa_sampled, mirage_bioasq, mirage_medmcqa, "
            "mirage_medqa, mirage_mmlu, mirage_pubmedqa, mmlu_med, nejmqa, pubmedqa, rarearena_rdc, rarearena_rds") \
        in capsys.readouterr().err


def test_missing_file_names_path_setting_and_hub(tmp_path):
    with pytest.raises(DataError) as err:
        data.load("medmcqa", data_dir=tmp_path)
    message = str(err.value)
    assert str(tmp_path / "medmcqa" / "dev.json") in message
    assert "MEDR2_DATA_DIR" in message and "openlifescienceai/medmcqa" in message


def test_malformed_json_line_names_file_and_line(mirror):
    path = mirror / "medmcqa" / "dev.json"
    _rewrite_line(path, 7, lambda line: line[:40] + "\n")
    with pytest.raises(RowError) as err:
        data.load("medmcqa", data_dir=mirror)
    assert f"{path}:7:" in str(err.value) and "invalid JSON" in str(err.value)


def test_missing_field_names_it(mirror):
    path = mirror / "medmcqa" / "dev.json"

    def drop_opc(line):
        obj = json.loads(line)
        del obj["opc"]
        return json.dumps(obj) + "\n"

    _rewrite_line(path, 12, drop_opc)
    with pytest.raises(RowError) as err:
        data.load("medmcqa", data_dir=mirror)
    assert err.value.line == 12 and err.value.field == "opc" and "is missing" in str(err.value)


@pytest.mark.parametrize("bad", [0, 5, None])
def test_out_of_range_or_missing_answer_is_reported_not_guessed(mirror, bad):
    path = mirror / "medmcqa" / "dev.json"

    def set_cop(line):
        obj = json.loads(line)
        obj["cop"] = bad
        return json.dumps(obj) + "\n"

    _rewrite_line(path, 3, set_cop)
    with pytest.raises(RowError) as err:
        data.load("medmcqa", data_dir=mirror)
    assert err.value.line == 3 and err.value.field == "cop"


def test_medqa_answer_not_among_options_is_reported(mirror):
    path = mirror / "medqa_usmle/US" / "test.jsonl"

    def set_answer(line):
        obj = json.loads(line)
        obj["answer_idx"] = "F"
        return json.dumps(obj) + "\n"

    _rewrite_line(path, 20, set_answer)
    with pytest.raises(RowError) as err:
        data.load("medqa_usmle", data_dir=mirror)
    assert f"{path}:20:" in str(err.value) and "answer_idx" in str(err.value) and "'F'" in str(err.value)


def test_mmlu_csv_row_with_wrong_arity(tmp_path, data_root):
    shutil.copytree(data_root / "mmlu_med", tmp_path / "mmlu_med")
    path = tmp_path / "mmlu_med" / "test" / "anatomy_test.csv"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines.insert(4, "only,three,fields\n")
    path.write_text("".join(lines), encoding="utf-8")
    data._load_builtin.cache_clear()
    with pytest.raises(RowError) as err:
        data.load("mmlu_med", data_dir=tmp_path)
    assert err.value.line == 5 and "expected 6 fields, found 3" in str(err.value)


def test_unknown_task_lists_ours():
    from medr2_hooks.lmeval.registry import check_tasks

    with pytest.raises(UnknownNameError) as err:
        check_tasks(["medqa_usmle_drect"])
    assert "medqa_usmle_direct" in str(err.value) and "pubmedqa_direct" in str(err.value)


def test_unknown_embedded_model_lists_valid_ones():
    from medr2_hooks.llm.embedded import resolve

    with pytest.raises(UnknownNameError) as err:
        resolve("embedded:llama-70b")
    assert "embedded:gemma-270m" in str(err.value)
