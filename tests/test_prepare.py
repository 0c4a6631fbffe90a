"""``medr2 prepare``: the pre-pass before the target loads, packs the hook reads without a model call, shards
(any order, and on a local Ray cluster) that assemble to the same bytes, and ranks that wait for rank 0."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline_helpers import TINY

pytestmark = pytest.mark.slow

# one prompt per forward pass: a model call's result then does not depend on its batch (see lmeval/prepare.py)
ONE_BY_ONE = {**TINY, "llm": {"backend": "hf", "model": "embedded:gemma-270m", "batch_size": 1}}
TASK = "medqa_usmle_medr2"


def _metadata(limit: int = 3, **override) -> dict:
    return {"limit": limit, "method_override": {**ONE_BY_ONE, **override}}


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A fresh stage cache and packs folder that still sees the built indexes and converted models."""
    from medr2_hooks import settings
    from medr2_hooks.retrieve.build import ensure_index

    real = settings.cache_dir()
    ensure_index("textbooks_demo", log=lambda *_: None)

    def make(name: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        for shared in ("indexes", "models"):
            if (real / shared).exists():
                (folder / shared).symlink_to(real / shared)
        monkeypatch.setenv("MEDR2_CACHE_DIR", str(folder))
        monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / f"{name}-results"))
        return folder

    return make


def _hook_kwargs(metadata: dict) -> dict:
    from medr2_hooks.lmeval.prepass import task_hook_kwargs

    return task_hook_kwargs([TASK], metadata)[TASK]


def test_prepared_packs_reach_the_hook_without_a_model_call(own_cache, monkeypatch, caplog):
    from medr2_hooks.lmeval import medr2 as hook
    from medr2_hooks.lmeval.prepare import prepare_tasks

    own_cache("single")
    out = prepare_tasks([TASK], _metadata(limit=2), log=lambda *_: None)[TASK]
    assert out["items"] == 2 and out["model_calls"] > 0 and Path(out["packs"]).is_file()
    assert out["sha256"] == __import__("hashlib").sha256(Path(out["packs"]).read_bytes()).hexdigest()
    record = json.loads(Path(out["record"]).read_text())
    assert record["packs"]["packs"] == out["packs"] and record["stage_seconds"] and record["usage"]

    # the hook of the same task and settings reads the packs: building a pipeline would be a failure
    monkeypatch.setattr("medr2_hooks.pipeline.medr2.MedR2.__init__", lambda *a, **k: pytest.fail("pre-pass in lm-eval"))
    stored = json.loads(Path(out["packs"]).read_text())["packs"]
    rows = hook.load_dataset(**_hook_kwargs(_metadata(limit=2)))["test"]
    assert [r["prefix"] for r in rows] == [p["prefix"] for p in stored]

    # plain lm_eval --limit 2 (the hook sees no limit) follows the prepared prefix, and says so
    with caplog.at_level(logging.WARNING):
        rows = hook.load_dataset(**_hook_kwargs({"method_override": ONE_BY_ONE}))["test"]
    assert len(rows) == 2 and "evaluates the first 2 of its" in caplog.text

    # a second prepare reuses the packs
    assert prepare_tasks([TASK], _metadata(limit=2), log=lambda *_: None)[TASK]["reused"] is True


def test_shards_in_any_order_and_ray_workers_assemble_the_same_packs(own_cache):
    from medr2_hooks.lmeval.prepare import Shard, prepare_tasks

    quiet = lambda *_: None  # noqa: E731
    own_cache("unsharded")
    started = time.perf_counter()
    whole = prepare_tasks([TASK], _metadata(), log=quiet)[TASK]
    unsharded_s = time.perf_counter() - started
    reference = Path(whole["packs"]).read_bytes()

    cache = own_cache("sharded")
    started = time.perf_counter()
    for i in (1, 0):  # any order
        part = prepare_tasks([TASK], _metadata(), Shard(i, 2), log=quiet)[TASK]
        assert part["shard"] == f"{i}/2" and part["record"].endswith(f".shard-{i}of2.json")
        assert part["items"] == len(range(i, 3, 2)) and Path(part["record"]).is_file()
    # each shard wrote only its own segment of the stage cache (shards may run on different nodes)
    segments = cache / "stages.sqlite.segments"
    assert not (cache / "stages.sqlite").exists() and len(list(segments.glob("*.sqlite"))) == 2
    assembled = prepare_tasks([TASK], _metadata(), log=quiet)[TASK]
    assert not list(segments.glob("*.sqlite"))  # merged into the main file
    sharded_s = time.perf_counter() - started
    assert assembled["model_calls"] == 0  # assembly only reads the cache
    assert Path(assembled["packs"]).read_bytes() == reference
    print(f"unsharded {unsharded_s:.1f} s, two shards + assembly {sharded_s:.1f} s")

    # the run record of an evaluation over these packs carries the shards' records
    from medr2_hooks.lmeval.runner import prepass_records

    config = {TASK: {"metadata": {k: v for k, v in _hook_kwargs(_metadata()).items() if k != "benchmark"},
                     "dataset_kwargs": {"benchmark": "medqa_usmle"}}}
    attached = prepass_records(config)[TASK]
    assert sorted(s["shard"] for s in attached["shards"]) == ["0/2", "1/2"]

    # Ray, as a user runs it: `medr2 prepare --ray` in its own process. In the test process, Ray's crash-signal
    # handlers would replace the JVM's (pyserini's Lucene runs in this process too), and the JVM's own SIGSEGVs
    # (implicit null checks) would then kill pytest: a segfault seen in a local CI run.
    pytest.importorskip("ray")
    own_cache("ray")
    env = {**os.environ, "WANDB_MODE": "offline"}
    done = subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "prepare", "--tasks", TASK, "--metadata",
                           json.dumps(_metadata()), "--ray", "--workers", "2", "--json"],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)[TASK]
    assert [s["shard"] for s in out["shards"]] == ["0/2", "1/2"] and out["model_calls"] == 0
    assert Path(out["packs"]).read_bytes() == reference


def test_a_shard_refuses_to_build_a_missing_index(tmp_path, monkeypatch):
    """n array tasks would each build it at once into one folder: the index is built before the shards."""
    from medr2_hooks.errors import Medr2Error
    from medr2_hooks.lmeval.prepare import Shard, prepare_tasks

    monkeypatch.setenv("MEDR2_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))
    with pytest.raises(Medr2Error, match=r"index 'textbooks_demo' is not built .*medr2 index build textbooks_demo"):
        prepare_tasks([TASK], _metadata(), Shard(1, 2), log=lambda *_: None)
    assert not (tmp_path / "cache" / "indexes").exists()


def test_ranks_above_zero_wait_for_rank_zeros_packs(own_cache, monkeypatch):
    from medr2_hooks.lmeval import medr2 as hook
    from medr2_hooks.lmeval.prepass import prepass_spec

    own_cache("ranks")
    vanilla = {"method": "vanilla_rag", "retrievers": ["dense"], "reformulate": False, "rerank": False, "cot": False}
    spec = prepass_spec(benchmark="medqa_usmle", method=vanilla, limit=2)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(hook, "RANK_WAIT_S", 1)
    with pytest.raises(TimeoutError, match="rank 1 waited"):
        hook.packs_for(spec)
    monkeypatch.setattr(hook, "RANK_WAIT_S", 120)
    rank0 = threading.Thread(target=hook.run_prepass, args=(spec,))
    rank0.start()
    _, packs = hook.packs_for(spec)
    rank0.join()
    assert len(packs) == 2 and json.loads(spec.packs_path.read_text())["packs"] == packs
