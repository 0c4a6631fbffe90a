"""Issue 31: the holes an adversarial probe found on 85cbdde, each closed (nothing deleted outside its folder,
nothing shadowed, no empty answers from a bad batch size, no truncated evidence level, tracebacks become one-line
errors naming the file). Each test failed on 85cbdde. Sweep state and run summaries: tests/test_experiments.py;
packs: tests/test_prepare.py; credentials: tests/test_reliability.py; `medr2 serve`: tests/test_serve.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from medr2_hooks.cli.main import main
from test_declared import _rows, _write


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDR2_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path


# -- 1. benchmark remove -------------------------------------------------------------------------------------------
def test_benchmark_remove_deletes_only_what_the_registry_wrote(config_dir, capsys):
    from medr2_hooks.lmeval.usertasks import user_tasks_dir

    victim = config_dir / "proj"
    (victim / "my_bench").mkdir(parents=True)
    (victim / "my_bench.yaml").write_text("mine\n")
    (victim / "my_bench" / "data.csv").write_text("mine\n")
    deep = config_dir / "config" / "victim"
    deep.mkdir(parents=True)
    (config_dir / "config" / "victim.yaml").write_text("mine\n")
    for name in (str(victim / "my_bench"), "../victim", "../../proj/my_bench", "my_bench"):
        assert main(["benchmark", "remove", name]) == 2
        assert "registered benchmark" in capsys.readouterr().err
    assert (victim / "my_bench.yaml").read_text() == "mine\n" and (victim / "my_bench" / "data.csv").is_file()
    assert (config_dir / "config" / "victim.yaml").is_file() and deep.is_dir()

    decl, _ = _write(config_dir, _rows(10))
    assert main(["benchmark", "add", str(decl)]) == 0
    own = user_tasks_dir() / "my_usmle" / "notes.yaml"  # the user's own file beside the generated tasks
    own.write_text("task: not_ours\n")
    assert main(["benchmark", "remove", "my_usmle"]) == 0
    assert own.is_file() and [p.name for p in own.parent.iterdir()] == ["notes.yaml"]


# -- 5. shadowing ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["medr2_qa", "medr2_clinical", "mmlu_med_medr2", "medqa_usmle_medr2"])
def test_a_declared_benchmark_cannot_shadow_shipped_tasks_or_groups(config_dir, capsys, name):
    decl, path = _write(config_dir, _rows(10))
    decl.write_text(decl.read_text().replace("name: my_usmle", f"name: {name}"))
    decl = decl.rename(decl.with_name(f"{name}.yaml"))
    assert main(["benchmark", "add", str(decl)]) == 2
    err = capsys.readouterr().err
    assert "shipped task or group" in err or "built-in benchmark" in err, err
    from medr2_hooks.lmeval.registry import task_manager

    assert task_manager().task_index["medr2_qa_medr2"].yaml_path.is_relative_to(
        __import__("medr2_hooks.settings", fromlist=["tasks_dir"]).tasks_dir())


def test_two_declared_benchmarks_cannot_make_the_same_task(config_dir, capsys, monkeypatch):
    """Method names hold underscores, so with a method `cot` the benchmarks `xy_medr2` and `xy` would both make
    `xy_medr2_cot` (and `xy_medr2` names a task of `xy`): the second is refused."""
    from types import MappingProxyType

    from medr2_hooks import methods

    monkeypatch.setitem(methods.METHODS, "cot", methods.Method("cot", "CoT only", MappingProxyType({}), "test"))
    decl, _ = _write(config_dir, _rows(10))
    decl.write_text(decl.read_text().replace("name: my_usmle", "name: xy"))
    assert main(["benchmark", "add", str(decl.rename(decl.with_name("xy.yaml")))]) == 0
    decl, _ = _write(config_dir, _rows(10))
    decl.write_text(decl.read_text().replace("name: my_usmle", "name: xy_medr2"))
    assert main(["benchmark", "add", str(decl.rename(decl.with_name("xy_medr2.yaml")))]) == 2
    assert "which is a task of the registered benchmark 'xy'" in capsys.readouterr().err


# -- 6. batch sizes ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, message", [
    ({"backend": "hf", "model": "embedded:gemma-270m", "batch_size": -1}, "llm.batch_size must be a whole number >= 1"),
    ({"backend": "hf", "model": "embedded:gemma-270m", "batch_size": 0}, "llm.batch_size must be a whole number >= 1"),
    ({"backend": "openai", "model": "m", "concurrency": 0}, "llm.concurrency must be a whole number >= 1"),
    ({"backend": "openai", "model": "m", "timeout": -5}, "llm.timeout must be a number of seconds > 0"),
    ({"backend": "hf"}, "llm.model: a model name is required"),
])
def test_role_specs_that_cannot_work_are_config_errors(spec, message):
    from medr2_hooks.config import ConfigError
    from medr2_hooks.pipeline.config import MethodConfig

    with pytest.raises(ConfigError, match=message):
        MethodConfig.from_dict({"llm": spec})
    with pytest.raises(ConfigError, match=message.replace("llm.", "roles.cot.")):
        MethodConfig.from_dict({"roles": {"cot": spec}})


def test_a_backend_or_server_with_a_non_positive_batch_is_refused(capsys):
    from medr2_hooks.llm.hf import HFBackend

    with pytest.raises(ValueError, match="batch_size must be a whole number >= 1, found -1"):
        HFBackend("embedded:gemma-270m", batch_size=-1)
    for flag in ("--batch-size", "--batch_size", "--max-batch"):
        with pytest.raises(SystemExit):
            main(["serve", flag, "0"])
        assert "must be >= 1" in capsys.readouterr().err


# -- 15. clear errors instead of tracebacks -------------------------------------------------------------------------
def test_a_csv_that_is_not_utf8_is_a_one_line_error(config_dir, capsys):
    decl, path = _write(config_dir, _rows(10))
    head, rest = path.read_bytes().split(b"\n", 1)
    path.write_bytes(head + b"\n" + rest.replace(b" ", " caf\u00e9 ".encode("latin-1"), 1))  # one Latin-1 byte
    for args in (["benchmark", "add", str(decl)], ["benchmark", "add", str(decl), "--lenient"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "not UTF-8 text" in err and str(path) in err and len(err.splitlines()) == 1, err


def test_a_csv_with_a_byte_order_mark_or_a_long_field_loads(config_dir, capsys):
    """Excel's "CSV UTF-8" starts with a BOM ("'qid' is not a column of the header (\\ufeffqid, ...)"); a field
    over csv's 128 KB default was a traceback."""
    rows = _rows(10)
    rows[3][1] = rows[3][1] + " " + "x" * 200_000
    decl, path = _write(config_dir, rows)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert main(["benchmark", "add", str(decl), "--json"]) == 0
    assert '"items": 10' in capsys.readouterr().out


def test_a_damaged_stage_segment_is_a_one_line_error(tmp_path):
    from medr2_hooks.cache import StageCache
    from medr2_hooks.errors import Medr2Error

    main_cache = StageCache(tmp_path / "stages.sqlite")
    segment = StageCache(tmp_path / "stages.sqlite", segment="job-shard-0of2")
    segment.put_many("s", {"k": 1}, {"c": 1})
    segment.close()
    good = segment.write_path.read_bytes()
    for damaged in (good[: len(good) // 3], os.urandom(8192), b"SQLite format 3\x00" + os.urandom(4000)):
        segment.write_path.write_bytes(damaged)
        with pytest.raises(Medr2Error, match=r"stage cache segment .*job-shard-0of2.sqlite: cannot merge it"):
            main_cache.merge_segments()
    main_cache.close()


def test_output_piped_to_a_closed_reader_ends_quietly():
    """`medr2 tasks | head -1` printed a BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "medr2_hooks.cli.main", "tasks"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


# -- 16. YAML alias bombs ----------------------------------------------------------------------------------------------
def test_a_yaml_alias_bomb_is_refused_at_once(config_dir, capsys):
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    decl = config_dir / "bomb.yaml"
    decl.write_text("\n".join(levels) + "\nname: bomb\ntitle: *i\n")
    started = time.perf_counter()
    assert main(["benchmark", "add", str(decl)]) == 2
    err = capsys.readouterr().err
    assert time.perf_counter() - started < 5 and "YAML aliases (*name) are not allowed" in err and len(err) < 400


def test_errors_never_print_unbounded_values():
    from medr2_hooks.config import ConfigError, checked

    nested = [["x" * 1000] * 50] * 50
    with pytest.raises(ConfigError) as caught:
        checked(nested, str, "title")
    assert len(str(caught.value)) < 300 and "list of 50" in str(caught.value)


# -- 17. limits and file modes -----------------------------------------------------------------------------------------
def test_an_experiment_limit_must_be_positive():
    from medr2_hooks.experiments.config import Experiment, ModelSpec

    for limit in (-3, 0):
        with pytest.raises(ValueError, match=f"limit must be >= 1, found {limit}"):
            Experiment("x", [ModelSpec("m")], ["direct"], ["medqa_usmle"], limit=limit)


def test_every_file_written_gets_the_umask_mode(tmp_path):
    """Packs and registered declarations were written 0600 (mkstemp) while stage segments were 0644: one rule,
    0666 less the umask, for every file."""
    from medr2_hooks.cache import StageCache
    from medr2_hooks.fs import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "packs.json", "{}")
        segment = StageCache(tmp_path / "stages.sqlite", segment="s-shard-0of1")
        segment.put_many("s", {"k": 1}, {"c": 1})
        segment.close()
        os.umask(0o002)
        atomic_write_text(tmp_path / "shared.json", "{}")
    finally:
        os.umask(old)
    assert oct((tmp_path / "packs.json").stat().st_mode & 0o777) == oct(0o644)
    assert oct(segment.write_path.stat().st_mode & 0o777) == oct(0o644)
    assert oct((tmp_path / "shared.json").stat().st_mode & 0o777) == oct(0o664)


def test_wrap_refuses_to_replace_a_benchmark_it_did_not_make(config_dir, capsys):
    decl, _ = _write(config_dir, _rows(10))
    decl.write_text(decl.read_text().replace("name: my_usmle", "name: wrap_medmcqa"))
    assert main(["benchmark", "add", str(decl.rename(decl.with_name("wrap_medmcqa.yaml")))]) == 0
    assert main(["wrap", "medmcqa", "--method", "direct"]) == 2
    assert "registered by `medr2 benchmark add`, not made by medr2 wrap" in capsys.readouterr().err
    from medr2_hooks.data.user import declarations

    assert declarations()["wrap_medmcqa"].wraps is None  # untouched
