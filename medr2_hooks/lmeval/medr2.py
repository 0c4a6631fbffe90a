"""lm-eval hooks for the retrieval-augmented tasks (``*_medr2``, ``*_medr2_cot``, ablations).

``load_dataset`` (lm-eval's ``custom_dataset``, called once per task) loads the evaluation and demo pools,
runs the method's pre-pass over all of them in batches (cached on disk), and returns docs that carry the
prompt prefix (demonstrations + selected evidence) and the provenance (evidence with f_h, f_g, f_u, F,
iterations, CoT) as JSON, so ``--log_samples`` shows what each answer was given. The run record (stage
times, model calls, tokens, cache hits, fallback counts) is written next to the cache and logged.

Task keywords: ``benchmark``, ``method`` (a name in the registry, :mod:`medr2_hooks.methods`), ``scoring``,
``subject``, and from ``--metadata`` optionally ``limit`` (pre-pass only the first N evaluation items: lm-eval's
``--limit`` is not visible to dataset hooks), ``source``, ``data_dir``.
``--metadata '{"method_override": {"window": 8192}}'`` overrides method settings.

The dataset always holds the whole benchmark, so lm-eval reports its true size (``n-samples.original``); with a
``limit`` only the first N rows carry packs, and evaluating any other row stops with an error naming the fix
(``--limit N``), so a subset is never presented as the benchmark and never evaluated without evidence.
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
from ..errors import Medr2Error
from .prepass import PrepassSpec, distributed_rank, prepass_spec, read_packs, write_packs
from .direct import judge_field

log = logging.getLogger(__name__)
RANK_WAIT_S = 7 * 24 * 3600  # ranks > 0 wait this long for rank 0's packs


def load_dataset(**kwargs):
    import datasets

    judge = kwargs.pop("judge", None)
    spec = prepass_spec(**kwargs)
    extra = judge_field(spec.benchmark, judge)
    packs = packs_for(spec)
    rows = []
    for r, p in zip(spec.eval_records, packs):
        p = dict(p)
        rows.append({**r.to_doc(), **extra, "benchmark": spec.benchmark, "prefix": p.pop("prefix"),
                     "reasoning": p.pop("reasoning", None) or "", "provenance": json.dumps(p, ensure_ascii=False)})
    prepared = len(rows)
    for r in spec.unprepared:  # counted by lm-eval (n-samples.original), never evaluated: see _prefix
        rows.append({**r.to_doc(), **extra, "benchmark": spec.benchmark, "prefix": None, "reasoning": "",
                     "provenance": json.dumps({"unprepared": f"{spec.name}: first {prepared} items prepared"})})
    return datasets.DatasetDict(test=datasets.Dataset.from_list(rows))


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


def _prefix(doc: dict) -> str:
    """The row's evidence prefix; a row past the prepared ``limit`` is an error, never a prompt without evidence."""
    if doc["prefix"] is None:
        raise Medr2Error(f"item {doc['id']} was not prepared: {json.loads(doc['provenance'])['unprepared']} (the task "
                         "metadata's limit). Evaluate the same number with lm-eval's --limit, or drop the metadata "
                         "limit to prepare and evaluate the whole benchmark")
    return doc["prefix"]


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

    packs, record = prepare_records(MedR2(spec.cfg, cache=cache), spec.benchmark, spec.eval_records, spec.demos,
                                    spec.scoring)
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
        from ..pipeline.stage_runs import write_runs

        folder = path.with_name(f"{path.stem}.runs")
        record["stage_runs"] = {"folder": str(folder), "stages": write_runs(folder, runs, spec.name)}
    _write_record(redact(record), path)
    return packs, record


PREPARE = {"medr2": "medr2_hooks.pipeline.run:prepare", "llm_amt": "medr2_hooks.pipeline.llm_amt:prepare"}


def prepare_records(pipeline, benchmark: str, eval_records: list[Record], demos: list[Record],
                    scoring: str = "letters"):
    """The pre-pass over records: stages get :meth:`Record.public` questions only (with the PubMed id retrieval
    must exclude); the demonstrations' own answers go to the rendered demonstrations (in the form ``scoring`` asks
    the target for), and evaluation answers go nowhere but lm-eval's scorer."""
    from importlib import import_module

    module, func = PREPARE[pipeline.cfg.pipeline].split(":")
    prepare = getattr(import_module(module), func)
    return prepare(pipeline, benchmark, [r.public() for r in eval_records], [d.demo() for d in demos], scoring=scoring)


def _write_record(record: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1, ensure_ascii=False, default=str))
    log.info("pre-pass record: %s (stages %s)", path, record["stage_seconds"])


def doc_to_text(doc: dict) -> str:
    question = prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public())
    return _prefix(doc) + prompts.with_reasoning(question, doc.get("reasoning"))


def doc_to_choice(doc: dict) -> list[str]:
    return list(doc["choice_labels"])


def doc_to_target(doc: dict) -> int:
    return doc["gold"]


def doc_to_text_medrag(doc: dict) -> str:
    """MedRAG's prompt around the pack's evidence (its numbered documents, as packed within the window)."""
    evidence = json.loads(doc["provenance"]).get("evidence_texts") if doc["prefix"] is not None else None
    _prefix(doc)
    return prompts.medrag_prompt(evidence or [], Record.from_doc(doc).public())


def doc_to_text_generative(doc: dict) -> str:
    """Generative scoring: demonstrations and evidence, then the question (with the method's reasoning where the
    method gives the target one) and the cue to reason and answer."""
    question = prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public())
    return _prefix(doc) + prompts.generative_prompt(question, doc.get("reasoning"))
