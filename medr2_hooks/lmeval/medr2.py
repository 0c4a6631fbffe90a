"""lm-eval hooks for the retrieval-augmented tasks (``*_medr2``, ``*_medr2_cot``, ablations).

``load_dataset`` (lm-eval's ``custom_dataset``, called once per task) loads the evaluation and demo pools,
runs the method's pre-pass over all of them in batches (cached on disk), and returns docs that carry the
prompt prefix (demonstrations + selected evidence) and the provenance (evidence with f_h, f_g, f_u, F,
iterations, CoT) as JSON, so ``--log_samples`` shows what each answer was given. The run record (stage
times, model calls, tokens, cache hits, fallback counts) is written next to the cache and logged.

Task metadata: ``benchmark``, ``method`` (a MethodConfig mapping), ``variant`` (settings a task family
changes, e.g. Med-R²-CoT's ``cot_in_first_query``), and optionally ``limit`` (pre-pass only the
first N evaluation items: lm-eval's ``--limit`` is not visible to dataset hooks), ``source``, ``data_dir``,
``subject``. ``--metadata '{"method_override": {"window": 8192}}'`` overrides method settings.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from ..apply import prompts
from ..data.record import Record
from ..fs import atomic_write_text
from ..redact import redact
from .prepass import PrepassSpec, distributed_rank, prepared_prefix, prepass_spec, read_packs, write_packs

log = logging.getLogger(__name__)
RANK_WAIT_S = 7 * 24 * 3600  # ranks > 0 wait this long for rank 0's packs


def load_dataset(**kwargs):
    import datasets

    spec = prepass_spec(**kwargs)
    spec, packs = packs_for(spec)
    rows = []
    for r, p in zip(spec.eval_records, packs):
        p = dict(p)
        rows.append({**r.to_doc(), "benchmark": spec.benchmark, "prefix": p.pop("prefix"),
                     "reasoning": p.pop("reasoning", None) or "", "provenance": json.dumps(p, ensure_ascii=False)})
    return datasets.DatasetDict(test=datasets.Dataset.from_list(rows))


def packs_for(spec: PrepassSpec) -> tuple[PrepassSpec, list[dict]]:
    """The task's packs: prepared by ``medr2 prepare`` (no model call here), else made in this process. Under
    ``accelerate launch`` only rank 0 makes them; the other ranks wait for its artifact."""
    packs = read_packs(spec.packs_path, spec)
    if packs is not None:
        log.info("%s: prepared packs %s (no pre-pass in this process)", spec.name, spec.packs_path)
        return spec, packs
    prefix = prepared_prefix(spec)
    if prefix is not None:
        log.warning("%s: using the packs `medr2 prepare --limit %d` made, so this task evaluates the first %d of "
                    "its %d items only (run `medr2 prepare` without --limit for all of them)", spec.name,
                    len(prefix.eval_records), len(prefix.eval_records), len(spec.eval_records))
        return prefix, read_packs(prefix.packs_path, prefix)
    rank, world = distributed_rank()
    if rank > 0:
        return spec, _wait_for_packs(spec, rank)
    log.warning("%s: nothing prepared for these settings: running the pre-pass in this process (run `medr2 "
                "prepare` first to keep role models off the target's device)", spec.name)
    return spec, run_prepass(spec)[0]


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
    from ..pipeline.medr2 import MedR2

    packs, record = prepare_records(MedR2(spec.cfg, cache=cache), spec.benchmark, spec.eval_records, spec.demos)
    record.update(benchmark=spec.benchmark, subject=spec.subject, key=spec.key, identity=spec.identity(), shard=shard)
    tokens = [p["prompt_tokens"] for p in packs if p.get("prompt_tokens") is not None]
    record["packed_tokens"] = {"items": len(tokens), "mean": round(sum(tokens) / len(tokens), 1) if tokens else None,
                               "max": max(tokens, default=None)}
    if write:
        record["packs"] = dict(zip(("packs", "sha256"), map(str, write_packs(spec, packs))))
    _write_record(redact(record), record_path or spec.record_path)
    return packs, record


PREPARE = {"medr2": "medr2_hooks.pipeline.run:prepare", "llm_amt": "medr2_hooks.pipeline.llm_amt:prepare"}


def prepare_records(pipeline, benchmark: str, eval_records: list[Record], demos: list[Record]):
    """The pre-pass over records: stages get :meth:`Record.public` questions only; the demonstrations' own
    answers go to the rendered demonstrations, and evaluation answers go nowhere but lm-eval's scorer."""
    from importlib import import_module

    module, func = PREPARE[pipeline.cfg.pipeline].split(":")
    prepare = getattr(import_module(module), func)
    return prepare(pipeline, benchmark, [r.public() for r in eval_records], [r.meta.get("pmid") for r in eval_records],
                   [d.public() for d in demos], [d.answer for d in demos], [d.meta.get("pmid") for d in demos])


def _write_record(record: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1, ensure_ascii=False, default=str))
    log.info("pre-pass record: %s (stages %s)", path, record["stage_seconds"])


def doc_to_text(doc: dict) -> str:
    question = prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public())
    return doc["prefix"] + prompts.with_reasoning(question, doc.get("reasoning"))


def doc_to_choice(doc: dict) -> list[str]:
    return list(doc["choice_labels"])


def doc_to_target(doc: dict) -> int:
    return doc["gold"]


def doc_to_text_generative(doc: dict) -> str:
    """The generative variant: evidence and demonstrations, then the question with the CoT cue."""
    from .generative import doc_to_text as question_with_cue

    return doc["prefix"] + question_with_cue(doc)
