"""``medr2 prepare``: the pre-pass of retrieval tasks as its own stage, before any target model loads.

Each task's pre-pass runs to completion (every stage cached), its packs are written as an artifact named by
their content (:mod:`.packs`), and the process exits, releasing every role model. The lm-eval hook then
only reads the packs.

Sharding runs on existing engines: ``--shard i/n`` (0 <= i < n) prepares items ``i, i+n, …`` of every task's
evaluation items and demonstrations (a Slurm array task, a ``wandb agent`` run, or a Ray worker each take one
shard), writing only to its own segment of the content-addressed stage cache (:class:`~medr2_hooks.cache.StageCache`:
SQLite's write-ahead log does not work across hosts, so shards on other nodes must not write one shared file).
An unsharded ``medr2 prepare`` afterwards merges the segments and assembles the packs from the cache without a
model call. ``--ray`` does both on a Ray cluster: one shard per worker (one GPU each when the cluster has GPUs),
then the assembly on the driver. The cache folder (``MEDR2_CACHE_DIR``) must be on a filesystem every worker
sees (NFS, Lustre, GPFS).

A shard's values are the values an unsharded run computes when every process computes with the same kernel
threads (the spec's ``threads``, set in every process that runs the pre-pass: :func:`.packs.kernel_threads`) and
each model call's result does not depend on which other prompts share its batch (one prompt per batch, or a
batch-invariant engine); with batched float kernels the last bits of a score can differ between batch compositions.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .. import settings
from ..errors import Medr2Error
from .packs import read_packs, run_prepass
from .spec import prepass_spec
from ..fs import read_json

# settings every worker needs to see the same data, cache and results as the driver
SHARED_ENV = ("MEDR2_DATA_DIR", "MEDR2_CACHE_DIR", "MEDR2_RESULTS_DIR", "HF_HUB_OFFLINE", "HF_HOME",
              "OPENAI_BASE_URL", "TOKENIZERS_PARALLELISM")


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        import re

        head, sep, tail = text.partition("/")
        digits = re.compile(r"[0-9]{1,9}")  # ASCII digits: str.isdigit() accepts "²", which int() refuses
        if not (sep and digits.fullmatch(head) and digits.fullmatch(tail)) or not 0 <= int(head) < int(tail):
            raise Medr2Error(f"--shard: expected i/n with 0 <= i < n (e.g. 0/4, or $SLURM_ARRAY_TASK_ID/4), "
                             f"found {text!r}")
        return cls(int(head), int(tail))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def prepare_tasks(hooks: dict[str, dict], shard: Shard | None = None, log=print) -> dict:
    """Prepare every task of ``hooks`` (task name -> the keyword arguments lm-eval gives its dataset hook:
    :func:`medr2_hooks.lmeval.registry.task_hook_kwargs`); per task, what was written (packs path and sha256,
    record)."""
    from ..cache import StageCache, stable_hash
    from ..retrieve.build import ensure_index, index_dir

    if not hooks:
        raise Medr2Error("no task to prepare: none of the tasks has a pre-pass (direct tasks need none)")
    if shard is None:
        main = StageCache()
        merged = main.merge_segments()
        main.close()
        if merged:
            log(f"stage cache: merged {merged} rows of shard segments")
        cache = None
    else:  # named by the job, so a re-run of the same shard resumes from its own segment
        cache = StageCache(segment=f"{stable_hash(hooks)[:16]}-shard-{shard.index}of{shard.count}")
    out = {}
    for task, kwargs in hooks.items():
        spec = prepass_spec(**kwargs)
        if shard is None:
            ensure_index(spec.cfg.index, log=log)
        elif not (index_dir(spec.cfg.index) / "manifest.json").is_file():  # n shards would build it in one folder
            raise Medr2Error(f"{task}: index {spec.cfg.index!r} is not built in {index_dir(spec.cfg.index)}; build it "
                             f"once before the shards run (medr2 index build {spec.cfg.index})")
        started = time.perf_counter()
        if shard is not None:
            part = spec.shard(shard.index, shard.count)
            # named after the whole task's pre-pass, so the evaluation over the assembled packs finds it
            record_path = spec.record_path.with_name(f"{spec.record_path.stem}.shard-{shard.index}of{shard.count}.json")
            run_prepass(part, write=False, shard=str(shard), record_path=record_path, cache=cache)
            out[task] = {"shard": str(shard), "items": len(part.eval_records), "demos": len(part.demos),
                         "record": str(record_path), "seconds": round(time.perf_counter() - started, 2)}
            log(f"{task}: shard {shard}: {len(part.eval_records)} items + {len(part.demos)} demonstrations cached")
            continue
        # reused only with this results folder's record beside them: packs live in the user's cache and outlive
        # a results folder; without the record the run could not say how its packs were made (stages cached)
        if spec.record_path.is_file() and read_packs(spec.packs_path, spec) is not None and \
                not _roles_changed(spec, log):
            from ..corpus.store import file_sha256

            out[task] = {"packs": str(spec.packs_path), "sha256": file_sha256(spec.packs_path),
                         "record": str(spec.record_path), "items": len(spec.eval_records), "reused": True}
            log(f"{task}: already prepared: {spec.packs_path}")
            continue
        _, record = run_prepass(spec)
        calls = sum(u["calls"] for u in record["usage"].values())
        out[task] = {**record["packs"], "record": str(spec.record_path), "items": len(spec.eval_records),
                     "model_calls": calls, "seconds": round(time.perf_counter() - started, 2)}
        log(f"{task}: {len(spec.eval_records)} items prepared in {out[task]['seconds']} s ({calls} model calls): "
            f"{record['packs']['packs']}")
    if cache is not None:
        cache.close()
    return out


def _roles_changed(spec, log) -> bool:
    """Whether a served role's live identity (what its server reports now) differs from the one the packs' pre-pass
    recorded: then the pre-pass runs again (its stages miss the cache under the new identity). A server that cannot
    be reached now is reported and the packs are kept (roles are often stopped once their work is done)."""

    from ..errors import Medr2Error
    from ..pipeline.identity import backend_identity

    recorded = read_json(spec.record_path).get("models") or {}
    for role, identity in recorded.items():
        if not identity.startswith("openai:"):
            continue
        try:
            now = backend_identity(spec.cfg.role(role), live=True)
        except Medr2Error as exc:
            log(f"{spec.name}: role {role}: {exc}; keeping the packs made with {identity}")
            continue
        if now != identity:
            log(f"{spec.name}: role {role} is served with other settings now ({now}, was {identity}): preparing again")
            return True
    return False


def _ray_shard(hooks: dict[str, dict], shard: Shard, env: dict) -> dict:
    os.environ.update(env)
    return prepare_tasks(hooks, shard, log=lambda *_: None)


def prepare_with_ray(hooks: dict[str, dict], workers: int | None = None, address: str | None = None,
                     log=print) -> dict:
    """One shard per Ray worker (a GPU each when the cluster has GPUs), then the assembly here."""
    import ray

    from ..retrieve.build import ensure_index

    for kwargs in hooks.values():  # once, here, before the workers read them
        ensure_index(prepass_spec(**kwargs).cfg.index, log=log)
    if not address:  # a local cluster of our own: its workers at the driver's priority, not Ray's default nice 15
        os.environ.setdefault("RAY_worker_niceness", "0")  # (on a busy node they would all but stop)
    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
             **({} if address else {"num_cpus": workers or os.cpu_count()}))
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        count = workers or gpus or int(ray.cluster_resources().get("CPU", 1))
        remote = ray.remote(num_gpus=1 if gpus else 0, num_cpus=1)(_ray_shard)
        # the driver's thread count: a Ray worker's own default would follow OMP_NUM_THREADS, which Ray sets to 1
        env = {k: os.environ[k] for k in SHARED_ENV if k in os.environ} | {"MEDR2_THREADS": str(settings.threads())}
        log(f"ray: {count} shards on {ray.cluster_resources()}")
        shards = ray.get([remote.remote(hooks, Shard(i, count), env) for i in range(count)])
    finally:
        ray.shutdown()
    out = prepare_tasks(hooks, log=log)
    for task in out:
        out[task]["shards"] = [s[task] for s in shards]
    return out
