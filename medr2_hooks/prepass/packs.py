"""A pre-pass's packs: made (:func:`run_prepass`), written as an artifact named by their content, read back
only when they are exactly the packs of a spec (:func:`read_packs`), and found by the lm-eval hook
(:func:`packs_for`: prepared by ``medr2 prepare``, else made in this process; under ``accelerate launch`` rank 0
makes them and the other ranks wait for its file)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path

from .. import methods
from ..data.record import Record
from ..fs import write_json
from .spec import PrepassSpec

log = logging.getLogger(__name__)
RANK_WAIT_S = 7 * 24 * 3600  # ranks > 0 wait this long for rank 0's packs


# -- packs: the artifact the hook reads ----------------------------------------------------------------------
def _digest(packs: list[dict]) -> str:
    return hashlib.sha256(json.dumps(packs, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()


def write_packs(spec: PrepassSpec, packs: list[dict]) -> tuple[Path, str]:
    """Write the packs artifact atomically, with the sha256 of its packs; ``(path, sha256 of its bytes)``."""
    path = spec.packs_path
    path.parent.mkdir(parents=True, exist_ok=True)
    # verbatim: the evidence is what the target reads, byte for byte (the identity holds public endpoints only)
    text = write_json(path, {"key": spec.key, "identity": spec.identity(), "packs": packs,
                             "packs_sha256": _digest(packs)}, indent=None, sort_keys=True, verbatim=True)
    return path, hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_packs(path: Path, spec: PrepassSpec) -> list[dict] | None:
    """The packs of ``spec`` at ``path`` (None when absent, unreadable or made for other content). Packs whose
    content does not match the sha256 written with them, or whose file does not match the sha256 the pre-pass
    record of this results folder holds, are refused: a DataError naming the file."""
    from ..errors import DataError

    try:
        raw = path.read_bytes()
        stored = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError):
        log.warning("prepared packs %s are damaged: ignored (the pre-pass runs again)", path)
        return None
    if not isinstance(stored, dict) or stored.get("key") != spec.key or \
            len(stored.get("packs") or []) != len(spec.eval_records):
        return None
    if stored.get("packs_sha256") != _digest(stored["packs"]):
        raise DataError(f"prepared packs {path} do not match the sha256 written with them (edited by hand or "
                        "damaged): delete the file and run `medr2 prepare` again")
    recorded = _recorded_sha256(spec, path)
    if recorded is not None and recorded != hashlib.sha256(raw).hexdigest():
        raise DataError(f"prepared packs {path} do not match the sha256 their pre-pass record {spec.record_path} "
                        "holds: delete the file and run `medr2 prepare` again")
    return stored["packs"]


def _recorded_sha256(spec: PrepassSpec, path: Path) -> str | None:
    try:
        packs = json.loads(spec.record_path.read_text(encoding="utf-8")).get("packs") or {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return packs.get("sha256") if Path(packs.get("packs", "")) == path else None


def distributed_rank() -> tuple[int, int]:
    """``(rank, world size)`` under ``accelerate launch`` / ``torchrun`` (``(0, 1)`` otherwise)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def packs_for(spec: PrepassSpec) -> list[dict]:
    """The task's packs: prepared by ``medr2 prepare`` (no model call here), else made in this process. Under
    ``accelerate launch`` only rank 0 makes them; the other ranks wait for its artifact."""
    packs = read_packs(spec.packs_path, spec)
    if packs is not None:
        log.info("%s: prepared packs %s (no pre-pass in this process)", spec.name, spec.packs_path)
        return packs
    rank, world = distributed_rank()
    if rank > 0:
        return _wait_for_packs(spec, rank)
    log.warning("%s: nothing prepared for these settings (%d items): running the pre-pass in this process (run "
                "`medr2 prepare` first to keep role models off the target's device)", spec.name, len(spec.eval_records))
    return run_prepass(spec)[0]


def _wait_for_packs(spec: PrepassSpec, rank: int) -> list[dict]:
    log.info("%s: rank %d waits for rank 0's packs at %s", spec.name, rank, spec.packs_path)
    deadline = time.time() + RANK_WAIT_S
    while time.time() < deadline:
        packs = read_packs(spec.packs_path, spec)
        if packs is not None:
            return packs
        time.sleep(5)
    raise TimeoutError(f"{spec.name}: rank {rank} waited {RANK_WAIT_S} s for {spec.packs_path}")


def run_prepass(spec: PrepassSpec, write: bool = True, shard: str | None = None,
                record_path: Path | None = None, cache=None) -> tuple[list[dict], dict]:
    """Run the method's pre-pass over the spec's items (every stage cached, in ``cache``, default the main stage
    cache); write its record (at ``record_path``, default the spec's) and, with ``write``, its packs."""
    from ..pipeline.toolbox import StageToolbox

    with kernel_threads(spec.threads):
        packs, record = prepare_records(StageToolbox(spec.cfg, cache=cache), spec.benchmark, spec.eval_records,
                                        spec.demos, spec.scoring)
    record["numerics"] = {"threads": spec.threads}
    record.update(benchmark=spec.benchmark, subject=spec.subject, key=spec.key, identity=spec.identity(), shard=shard,
                  roles_check=spec.roles_check,
                  subset={"items": len(spec.eval_records), "of": len(spec.eval_records) + len(spec.unprepared)}
                  if spec.limited else None)
    tokens = [p["prompt_tokens"] for p in packs if p.get("prompt_tokens") is not None]
    record["packed_tokens"] = {"items": len(tokens), "mean": round(sum(tokens) / len(tokens), 1) if tokens else None,
                               "max": max(tokens, default=None)}
    if write:
        record["packs"] = dict(zip(("packs", "sha256"), map(str, write_packs(spec, packs))))
    path = record_path or spec.record_path
    runs = record.pop("stage_runs", {})
    if runs:  # each stage's ranked documents as TREC runs beside the record (medr2 evidence scores them)
        from ..evidence.stage_runs import write_runs

        folder = path.with_name(f"{path.stem}.runs")
        record["stage_runs"] = {"folder": str(folder), "stages": write_runs(folder, runs, spec.name)}
    _write_record(record, path)
    return packs, record


@contextmanager
def kernel_threads(n: int):
    """torch's and FAISS's CPU threads set to ``n`` for the duration (restored after: an in-process pre-pass runs
    inside lm-eval, beside a target that may be on the CPU too)."""
    import faiss
    import torch

    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        faiss.omp_set_num_threads(before[1])


def prepare_records(pipeline, benchmark: str, eval_records: list[Record], demos: list[Record],
                    scoring: str = "letters"):
    """The pre-pass over records: stages get :meth:`Record.public` questions only (with the PubMed id retrieval
    must exclude); the demonstrations' own answers go to the rendered demonstrations (in the form ``scoring`` asks
    the target for), and evaluation answers go nowhere but lm-eval's scorer."""
    cfg = pipeline.cfg
    answer = methods.METHODS[cfg.method].answer if cfg.method in methods.METHODS else "default"
    return pipeline.declared.prepare(pipeline, benchmark, [r.public() for r in eval_records],
                                     [d.demo() for d in demos], scoring=scoring, answer=answer)


def _write_record(record: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)  # redacted: a served role's credentials never reach a committed record
    log.info("pre-pass record: %s (stages %s)", path, record["stage_seconds"])


