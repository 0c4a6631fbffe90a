"""Runs and inputs that cannot collide, escape, leak or go stale (each test failed on 44f83a9)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from medr2_hooks.cli.main import main
from medr2_hooks.config import ConfigError
from medr2_hooks.errors import DataError, Medr2Error

DOCS = [{"doc_id": f"d{i}", "title": f"Doc {i}", "text": text, "source_type": "book"} for i, text in enumerate([
    "Iron deficiency anemia is a microcytic hypochromic anemia with low ferritin.",
    "Chronic myeloid leukemia carries the Philadelphia chromosome t(9;22) BCR-ABL fusion.",
    "Vitamin B12 deficiency causes a megaloblastic anemia with neurological signs.",
])]


def tiny_recipe(folder: Path, docs=DOCS, name: str = "tiny", **overrides) -> Path:
    """A recipe YAML over a JSONL file of ``docs`` in ``folder`` (whitespace tokens, BM25 only by default)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    recipe = {"name": name, "sources": [{"reader": "generic_jsonl", "base": "recipe", "paths": "docs.jsonl"}],
              "segmentation": {"tokenizer": "whitespace", "min_doc_tokens": 1, "passage_tokens": 64,
                               "passage_overlap": 8},
              "dense": None, "bm25": {}, **overrides}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _quiet(*_):
    return None


# -- runs sharing a machine ------------------------------------------------------------------------------
def _names(queue):
    from medr2_hooks.lmeval.runner import default_run_name

    queue.put([default_run_name(["medqa_usmle_vanilla_rag"], "embedded:gemma-270m") for _ in range(3)])


def test_default_run_names_are_unique_across_processes_started_together():
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_names, args=(queue,)) for _ in range(3)]
    for p in procs:
        p.start()
    names = [n for _ in procs for n in queue.get(timeout=60)]
    for p in procs:
        p.join()
    assert len(set(names)) == 9
    from medr2_hooks.fs import safe_component

    assert all(safe_component(n, "run name") == n for n in names)


def _write_same_file(path, tag, rounds):
    from medr2_hooks.fs import atomic_write_text

    for i in range(rounds):
        atomic_write_text(Path(path), json.dumps({"writer": tag, "i": i, "pad": "x" * 20000}))


def test_atomic_writes_of_one_file_by_three_processes_never_fail_or_tear(tmp_path):
    target = tmp_path / "record.json"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_write_same_file, args=(str(target), t, 150)) for t in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert json.loads(target.read_text())["i"] == 149  # complete JSON, from a finished writer
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]  # no temporary file left behind


def _cache_writer(path, tag, queue):
    from medr2_hooks.cache import StageCache

    cache = StageCache(path)
    inputs = [f"q{i}" for i in range(300)]
    out = cache.cached("classify", inputs, {"model": "m"}, lambda xs: [{"q": x, "by": tag} for x in xs],
                       batch_size=7, shape={"q": str})
    queue.put([o["q"] for o in out] == inputs)
    cache.close()


def test_stage_cache_stays_consistent_under_three_concurrent_writers(tmp_path):
    from medr2_hooks.cache import StageCache

    path = tmp_path / "stages.sqlite"
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_cache_writer, args=(str(path), t, queue)) for t in range(3)]
    for p in procs:
        p.start()
    oks = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    assert oks == [True, True, True] and [p.exitcode for p in procs] == [0, 0, 0]
    cache = StageCache(path)
    again = cache.cached("classify", [f"q{i}" for i in range(300)], {"model": "m"},
                         lambda xs: pytest.fail("every row should be cached"), shape={"q": str})
    assert [a["q"] for a in again] == [f"q{i}" for i in range(300)] and cache.stats["classify:hit"] == 300


def test_prepass_records_are_named_by_their_content(data_root):
    from medr2_hooks.prepass.spec import prepass_spec
    from medr2_hooks.lmeval.runner import prepass_records

    method, small_window = "vanilla_rag", {"window": 1024}
    small = prepass_spec(benchmark="medqa_usmle", method=method, limit=3, method_override=small_window)
    large = prepass_spec(benchmark="medqa_usmle", method=method, limit=3, method_override={"window": 4096})
    more = prepass_spec(benchmark="medqa_usmle", method=method, limit=4, method_override=small_window)
    anatomy = prepass_spec(benchmark="mmlu_med", method=method, subject="anatomy", limit=3,
                           method_override=small_window)
    genetics = prepass_spec(benchmark="mmlu_med", method=method, subject="medical_genetics", limit=3,
                            method_override=small_window)
    generative = prepass_spec(benchmark="medqa_usmle", method=method, limit=3, method_override=small_window,
                              scoring="generative")
    paths = {s.record_path for s in (small, large, more, anatomy, genetics, generative)}
    assert len(paths) == 6
    assert prepass_spec(benchmark="medqa_usmle", method=method, limit=3,
                        method_override=small_window).record_path == small.record_path
    assert "anatomy" in anatomy.record_path.name

    # a run attaches the record of its own task's content, whatever other records were written after it started
    small.record_path.parent.mkdir(parents=True, exist_ok=True)
    small.record_path.write_text(json.dumps({"window": 1024}))
    large.record_path.write_text(json.dumps({"window": 4096}))
    try:
        configs = {"medqa_usmle_vanilla_rag": {"metadata": {"method_override": small_window, "limit": 3},
                                               "dataset_kwargs": {"benchmark": "medqa_usmle", "method": method}},
                   "medqa_usmle_direct": {"metadata": {"version": 1.0, "limit": 3},
                                          "dataset_kwargs": {"benchmark": "medqa_usmle", "method": "direct"}}}
        assert prepass_records(configs) == {"medqa_usmle_vanilla_rag": {"window": 1024}}
    finally:
        small.record_path.unlink()
        large.record_path.unlink()


# -- names that become paths --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../escaped_idx", "/tmp/escaped_idx", "a/b", "..", ""])
def test_index_names_that_would_escape_the_cache_are_errors(tmp_path, name):
    from medr2_hooks.corpus.recipe import load_recipe
    from medr2_hooks.retrieve.build import index_dir

    path = tiny_recipe(tmp_path, name="tiny")
    raw = yaml.safe_load(path.read_text())
    raw["name"] = name
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="not a safe name"):
        load_recipe(str(path))
    with pytest.raises(Medr2Error, match="not a safe name"):
        index_dir(name)


def test_run_and_method_names_that_would_escape_results_are_errors(tmp_path, capsys, monkeypatch):
    from medr2_hooks.pipeline.config import MethodConfig

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))
    assert main(["eval", "--tasks", "medqa_usmle_direct", "--run_name", "../../x", "--no_wandb"]) == 2
    assert "--run_name '../../x' is not a safe name" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="method name '../../x' is not a safe name"):
        MethodConfig.from_dict({"method": "../../x"})
    assert not (tmp_path / "x").exists() and not (tmp_path / "results").exists()


# -- indexes that go stale -----------------------------------------------------------------------------------
def test_an_edited_input_file_rebuilds_the_corpus_and_info_lists_the_inputs(tmp_path, monkeypatch, capsys):
    from medr2_hooks.corpus.recipe import load_recipe
    from medr2_hooks.retrieve.build import build

    monkeypatch.setenv("MEDR2_CACHE_DIR", str(tmp_path / "cache"))
    path = tiny_recipe(tmp_path / "src")
    first = build(load_recipe(str(path)), log=_quiet)
    assert first["counts"]["documents"] == 3
    with open(tmp_path / "src" / "docs.jsonl", "a") as fh:
        fh.write(json.dumps({"doc_id": "d9", "text": "Thalassemia trait gives microcytosis.", "source_type": "book"})
                 + "\n")
    second = build(load_recipe(str(path)), log=_quiet)
    assert second["counts"]["documents"] == 4 and second["corpus_hash"] != first["corpus_hash"]
    assert second["inputs"][0]["file"] == "docs.jsonl" and second["inputs"][0]["sha256"] != first["inputs"][0]["sha256"]
    assert main(["index", "info", "tiny"]) == 0
    assert "docs.jsonl" in capsys.readouterr().out


# -- credentials -----------------------------------------------------------------------------------------------
def test_redact_replaces_credentials_but_keeps_counters():
    from medr2_hooks.redact import redact

    cfg = {"llm": {"backend": "openai", "api_key": "sk-abc", "api_key_env": "MY_KEY", "max_new_tokens": 5},
           "roles": [{"hf_token": "hf_x"}], "usage": {"prompt_tokens": 12}, "model_args": "pretrained=x,api_key=sk-abc"}
    out = redact(cfg)
    assert "sk-abc" not in json.dumps(out) and "hf_x" not in json.dumps(out)
    assert out["llm"]["api_key_env"] == "MY_KEY" and out["llm"]["max_new_tokens"] == 5
    assert out["usage"] == {"prompt_tokens": 12} and out["model_args"] == "pretrained=x,api_key=<redacted>"


# -- settings checked before work starts --------------------------------------------------------------------------
@pytest.mark.parametrize("override, message", [
    ({"iterations": "five"}, "method.iterations: expected int, found str 'five'"),
    ({"window": -1}, "window must be >= 1, found -1"),
    ({"retrieve_k": 0}, "retrieve_k must be >= 1, found 0"),
    ({"evidence_share": 1.5}, "evidence_share must be > 0 and <= 1"),
    ({"conflict": {"threshold": 2}}, "threshold must be >= 0 and <= 1"),
    ({"conflict": {"top": "all"}}, "conflict.top: expected int"),
    ({"retrievers": "dense"}, "retrievers: expected list[str] | None"),
])
def test_method_settings_are_type_and_range_checked(override, message):
    from medr2_hooks.pipeline.config import MethodConfig

    with pytest.raises(ConfigError) as err:
        MethodConfig.from_dict(override, "medqa_usmle method")
    assert message in str(err.value) and "medqa_usmle method" in str(err.value)


@pytest.mark.parametrize("override, message", [
    ({"bm25": {"k1": "high"}}, "bm25.k1: expected float, found str 'high'"),
    ({"bm25": {"b": 3}}, "b must be >= 0 and <= 1"),
    ({"dense": {"max_length": "long"}}, "dense.max_length: expected int"),
    ({"sources": "x"}, "sources: expected list[Source]"),
    ({"segmentation": {"passage_tokens": 0, "passage_overlap": 0}}, "passage_tokens must be >= 1"),
])
def test_recipe_settings_are_checked_with_file_and_field(tmp_path, override, message):
    from medr2_hooks.corpus.recipe import load_recipe

    path = tiny_recipe(tmp_path, **override)
    with pytest.raises(ConfigError) as err:
        load_recipe(str(path))
    assert message in str(err.value) and str(path) in str(err.value)


def test_invalid_faiss_factory_is_found_before_any_passage_is_encoded(tmp_path, monkeypatch):
    from medr2_hooks.corpus.recipe import load_recipe
    from medr2_hooks.retrieve.build import build, index_dir

    monkeypatch.setenv("MEDR2_CACHE_DIR", str(tmp_path / "cache"))
    path = tiny_recipe(tmp_path / "src", dense={"encoder": "embedded:minilm", "factory": "IVF8,Bogus"})
    with pytest.raises(ConfigError, match="dense.factory 'IVF8,Bogus' is not a FAISS index_factory string"):
        build(load_recipe(str(path)), log=_quiet)
    assert not list(index_dir("tiny").rglob("emb-*.npy"))


@pytest.mark.parametrize("limit", ["-3", "0", "2.5"])
def test_bad_limit_is_a_one_line_error(limit, capsys):
    assert main(["eval", "--tasks", "medqa_usmle_direct", "--limit", limit, "--no_wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--limit must be" in err


@pytest.mark.parametrize("metadata, message", [("{bad", "not valid JSON"), ("[1,2]", "expected a JSON object")])
def test_bad_metadata_is_a_one_line_error(metadata, message, capsys):
    assert main(["eval", "--tasks", "medqa_usmle_direct", "--metadata", metadata, "--no_wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and "--metadata" in err


def test_sources_that_yield_no_document_are_clear_errors(tmp_path, monkeypatch):
    import dataclasses

    from medr2_hooks.corpus.recipe import load_recipe
    from medr2_hooks.retrieve.build import build

    monkeypatch.setenv("MEDR2_CACHE_DIR", str(tmp_path / "cache"))
    empty = tiny_recipe(tmp_path / "empty", docs=[])
    (tmp_path / "empty" / "docs.jsonl").write_text("\n")  # one blank line: no row, no document
    with pytest.raises(DataError, match="the sources yield no document"):
        build(load_recipe(str(empty)), log=_quiet)
    bad_rows = tiny_recipe(tmp_path / "bad", docs=[{"doc_id": "x"}, {"doc_id": "y", "text": ""}], name="bad")
    with pytest.raises(DataError, match="all input was skipped"):
        build(dataclasses.replace(load_recipe(str(bad_rows)), strict=False), log=_quiet)
    zero = tiny_recipe(tmp_path / "zero", name="zero")
    raw = yaml.safe_load(zero.read_text())
    raw["sources"].append({"reader": "generic_jsonl", "base": "recipe", "paths": "blank.jsonl"})
    zero.write_text(yaml.safe_dump(raw))
    (tmp_path / "zero" / "blank.jsonl").write_bytes(b"")
    with pytest.raises(DataError, match="blank.jsonl:0: empty file"):
        build(load_recipe(str(zero)), log=_quiet)
    manifest = build(dataclasses.replace(load_recipe(str(zero)), strict=False), log=_quiet)
    assert manifest["skipped"] == {"empty file (0 bytes)": 1} and manifest["counts"]["documents"] == 3


# -- damaged caches and shards ------------------------------------------------------------------------------------
def test_a_damaged_cache_file_is_moved_aside_named_and_counted(tmp_path, caplog):
    from medr2_hooks.cache import StageCache

    path = tmp_path / "stages.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    cache = StageCache(path)
    assert cache.stats["cache_file:damaged"] == 1
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("stages.sqlite.damaged-")]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not a database")
    assert str(path) in caplog.text and str(aside[0]) in caplog.text
    assert cache.cached("coarse", ["a"], {}, lambda xs: [0.5 for _ in xs], shape=float) == [0.5]


def test_a_cache_row_of_the_wrong_shape_is_corrupt_and_recomputed(tmp_path):
    from medr2_hooks.cache import StageCache

    cache = StageCache(tmp_path / "stages.sqlite")
    shape = {"query": str, "fallback": bool}
    cache.put_many("reformulate", {cache.key("q", {"m": 1}): ["not", "a", "mapping"]}, {"m": 1})
    out = cache.cached("reformulate", ["q"], {"m": 1}, lambda xs: [{"query": x, "fallback": False} for x in xs],
                       shape=shape)
    assert out == [{"query": "q", "fallback": False}] and cache.stats["reformulate:corrupt"] == 1
    again = StageCache(tmp_path / "stages.sqlite")
    assert again.cached("reformulate", ["q"], {"m": 1}, lambda xs: pytest.fail("recomputed twice"), shape=shape) == out


def test_a_shard_writes_its_own_segment_reads_the_main_file_and_the_assembly_merges_it(tmp_path):
    """Shards on other nodes must not write one SQLite file (its write-ahead log needs one host's shared memory):
    each writes a segment, reads the main file without locks or -shm, resumes from its segment; merge joins them."""
    from medr2_hooks.cache import StageCache

    path = tmp_path / "stages.sqlite"
    main = StageCache(path)
    main.put_many("coarse", {main.key("old", {}): 0.1}, {})
    main.close()  # the last connection checkpoints: the main file alone holds the rows
    before = path.read_bytes()

    def fail(xs):
        raise AssertionError(f"recomputed {xs}")

    shard = StageCache(path, segment="job-shard-0of2")
    assert shard.cached("coarse", ["old"], {}, fail, shape=float) == [0.1]  # from the main file
    assert shard.cached("coarse", ["new"], {}, lambda xs: [0.9 for _ in xs], shape=float) == [0.9]
    shard.close()
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "stages.sqlite", "stages.sqlite.segments"]  # no -wal / -shm beside the main file
    resumed = StageCache(path, segment="job-shard-0of2")  # a re-run of the same shard
    assert resumed.cached("coarse", ["new"], {}, fail, shape=float) == [0.9]
    resumed.close()
    with pytest.raises(Exception, match="not a safe name"):
        StageCache(path, segment="../elsewhere")

    main = StageCache(path)
    assert main.merge_segments() == 1 and not list((tmp_path / "stages.sqlite.segments").iterdir())
    assert main.cached("coarse", ["old", "new"], {}, fail, shape=float) == [0.1, 0.9]


def test_a_truncated_dense_shard_is_re_encoded(tmp_path):
    from medr2_hooks.retrieve.shards import encode_shards

    calls = []

    def encode(texts):
        calls.append(len(texts))
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    texts = lambda s, e: [f"passage {i}" * (i % 5 + 1) for i in range(s, e)]  # noqa: E731
    paths = encode_shards(tmp_path, 10, texts, encode, 4, {"encoder": "len"})
    before = [p.read_bytes() for p in paths]
    paths[1].write_bytes(before[1][: len(before[1]) - 9])
    calls.clear()
    encode_shards(tmp_path, 10, texts, encode, 4, {"encoder": "len"})
    assert calls == [4] and [p.read_bytes() for p in paths] == before


def test_an_unreachable_endpoint_names_the_role_stage_and_url(tmp_path):
    from medr2_hooks.cache import StageCache
    from medr2_hooks.data.record import Question
    from medr2_hooks.llm.openai_backend import EndpointError
    from medr2_hooks.pipeline.config import MethodConfig
    from medr2_hooks.pipeline.toolbox import StageToolbox

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    cfg = MethodConfig.from_dict({"roles": {"classifier": {"backend": "openai", "model": "m", "base_url": url,
                                                           "timeout": 5}}})
    m = StageToolbox(cfg, cache=StageCache(tmp_path / "stages.sqlite"))
    with pytest.raises(EndpointError) as err:
        m.classify([Question("q1", "Which drug treats CML?", {"A": "imatinib", "B": "aspirin"}, "en")])
    # the served role is identified by what its server reports (issue 28.8): the first thing that fails
    assert f"role 'classifier': cannot read {url}/models" in str(err.value)
    assert "is the server running?" in str(err.value)
    m.ids._ids["classifier"] = "openai:m@test"  # identified: the stage's request then fails, naming it
    with pytest.raises(EndpointError) as err:
        m.classify([Question("q1", "Which drug treats CML?", {"A": "imatinib", "B": "aspirin"}, "en")])
    assert "stage 'classify'" in str(err.value) and f"{url}/completions" in str(err.value)
    assert "role 'classifier" in str(err.value)


# -- machine-readable output ------------------------------------------------------------------------------------
def test_json_output_parses_whatever_libraries_print(tmp_path):
    path = tiny_recipe(tmp_path / "src", dense={"encoder": "embedded:minilm"})
    env = {**os.environ, "MEDR2_CACHE_DIR": str(tmp_path / "cache"), "WANDB_MODE": "offline"}
    medr2 = [sys.executable, "-m", "medr2_hooks.cli.main"]
    subprocess.run([*medr2, "index", "build", str(path)], env=env, check=True, capture_output=True)
    out = subprocess.run([*medr2, "index", "search", "tiny", "Philadelphia chromosome", "-k", "2", "--json"],
                         env=env, check=True, capture_output=True, text=True)
    hits = json.loads(out.stdout)
    assert hits[0]["hits"][0]["doc_id"] == "d1"
    assert "[INFO] Running in WANDB offline mode" in out.stderr  # what used to corrupt stdout


# -- end to end: a run's folder, records and files -----------------------------------------------------------------
@pytest.mark.slow
def test_a_run_records_its_own_prepass_and_no_credential_anywhere(tmp_path, monkeypatch):
    from medr2_hooks.prepass.spec import prepass_spec
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval
    from medr2_hooks.retrieve.build import ensure_index

    ensure_index("textbooks_demo", log=_quiet)
    secret, password = "sk-test-DO-NOT-WRITE-0123456789", "pw-DO-NOT-WRITE-9876"
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))
    llm = {"backend": "openai", "model": "served", "base_url": f"http://user:{password}@127.0.0.1:9/v1?key={password}",
           "api_key": secret}
    metadata = {"method_override": {"llm": llm}}
    # W&B records the command line: the one a user typed holds both (issue 31.2, 31.3)
    monkeypatch.setattr(sys, "argv", ["medr2", "eval", "--tasks", "medqa_usmle_vanilla_rag", "--metadata",
                                      json.dumps(metadata), "--model_args", f"base_url=http://u:{password}@h/v1"])
    # a decoy: the record of the same task with another window, written after the run starts
    decoy = prepass_spec(benchmark="medqa_usmle", method="vanilla_rag", method_override={"window": 1024}, limit=1)
    decoy.record_path.parent.mkdir(parents=True)
    out = run_eval(EvalConfig(tasks=["medqa_usmle_vanilla_rag"], limit=1, metadata=metadata, wandb=True))
    decoy.record_path.write_text("{}")
    record = out["run_record"]
    assert list(record["prepass"]) == ["medqa_usmle_vanilla_rag"]
    assert record["prepass"]["medqa_usmle_vanilla_rag"]["questions"] == 1
    assert record["prepass"]["medqa_usmle_vanilla_rag"]["config"]["llm"]["api_key"] == "<redacted>"
    written = [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    written.append(Path(record["prepass"]["medqa_usmle_vanilla_rag"]["packs"]["packs"]))  # the packs, in the cache
    assert any(p.name == "run.json" for p in written) and any(p.suffix == ".wandb" for p in written)
    assert any(p.name == "debug.log" for p in written)
    assert [p for p in written if secret.encode() in p.read_bytes() or password.encode() in p.read_bytes()] == []
    assert b"<redacted>" in next(p for p in written if p.suffix == ".wandb").read_bytes()  # the argv, redacted

    # a failed evaluation leaves no run folder behind
    with pytest.raises(Medr2Error):
        run_eval(EvalConfig(tasks=["medqa_usmle_vanilla_rag"], limit=1, run_name="fails", wandb=False,
                            metadata={"method_override": {"retrieve_k": 0}}))
    assert not (tmp_path / "results" / "runs" / "fails").exists()


def test_a_child_process_dies_with_its_parent(tmp_path):
    """``medr2 prepare`` under ``medr2 eval`` and ``medr2 serve`` under a rehearsal: a SIGKILLed parent (Slurm's
    time limit) leaves no orphan holding the GPU or the port."""
    import os
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "from medr2_hooks.procs import die_with_parent\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], preexec_fn=die_with_parent)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(child, 0)  # alive
    parent.kill()
    parent.wait()
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        try:  # reaped by init, or a zombie until then
            if open(f"/proc/{child}/stat").read().split()[2] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the child outlived its parent")
