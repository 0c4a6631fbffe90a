"""Benchmark loaders: one typed :class:`Record` per item, evaluation pool and CoT-demonstration pool.

>>> from medr2_hooks import data
>>> pools = data.pools("medqa_usmle")          # local mirror (MEDR2_DATA_DIR), demos split off
>>> len(pools.eval), len(pools.demos)
(2535, 10)
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from functools import lru_cache
from importlib import import_module
from pathlib import Path

from .. import settings
from ..errors import DataError, UnknownNameError
from .declared import Declaration
from .mmlu import SUBJECTS as MMLU_SUBJECTS
from .record import Question, Record

__all__ = ["BENCHMARKS", "Benchmark", "Pools", "Question", "Record", "benchmark", "names", "load", "pools", "DEMO_SEED"]

DEMO_SEED = 2025
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Benchmark:
    name: str
    local: str | None  # "module:function(root) -> list[Record]" (None: a declared benchmark)
    hub: str | None  # "module:function() -> list[Record]", None when the hub has no copy
    n_demos: int  # paper Table 7: CoT demonstrations taken out of the evaluation pool
    language: str
    title: str
    from_file: str | None = None  # "module:function(path) -> list[Record]": a user's own file (cases_file)
    kind: str = "qa"  # qa (Table 2) | clinical (Table 8)
    style: str = "medqa"  # question layout (medr2_hooks.apply.prompts)
    declaration: Declaration | None = None  # a user's YAML declaration (medr2 benchmark add)
    subjects: tuple[str, ...] = ()  # one task per subject and a group over them (MMLU-Med)
    # the benchmark group its tasks join per method: medr2_qa (Table 2), medr2_clinical (Table 8), mirage (MIRAGE's
    # five sets, zero-shot), or None
    group: str | None = None


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark("medqa_usmle", "medqa:load_usmle", "medqa:load_usmle_hub", 10, "en",
                  "MedQA-USMLE (5 options, dev+test)",
                  group="medr2_qa"),
        Benchmark("medqa_mcmle", "medqa:load_mcmle", None, 11, "zh", "MedQA-MCMLE (5 options, dev+test)",
                  group="medr2_qa"),
        Benchmark("medmcqa", "medmcqa:load", "medmcqa:load_hub", 13, "en", "MedMCQA (dev)", style="medmcqa",
                  group="medr2_qa"),
        Benchmark("pubmedqa", "pubmedqa:load", "pubmedqa:load_hub", 10, "en", "PubMedQA PQA-L (question only)",
                  style="pubmedqa", group="medr2_qa"),
        Benchmark("mmlu_med", "mmlu:load", "mmlu:load_hub", 9, "en", "MMLU-Med (6 subjects)", style="mmlu",
                  subjects=MMLU_SUBJECTS, group="medr2_qa"),
        Benchmark("medxpertqa", "medxpertqa:load", "medxpertqa:load_hub", 10, "en",
                  "MedXpertQA Text (10 options; the full test split)", kind="clinical", group="medr2_clinical"),
        Benchmark("medxpertqa_sampled", "medxpertqa:load_sampled", None, 10, "en",
                  "MedXpertQA Text, the official 244-item sample", kind="clinical"),
        Benchmark("nejmqa", "nejmqa:load", None, 5, "en",
                  "NEJMQA (default: AgentClinic-NEJM cases, not the paper's set)",
                  from_file="nejmqa:load_cases", kind="clinical", group="medr2_clinical"),
        Benchmark("rarearena_rds", "rarearena:load_rds", "rarearena:load_rds_hub", 2, "en",
                  "RareArena RDS (rare-disease screening, free text)", from_file="rarearena:load_rds_file",
                  kind="clinical",
                  style="diagnosis", group="medr2_clinical"),
        Benchmark("rarearena_rdc", "rarearena:load_rdc", "rarearena:load_rdc_hub", 2, "en",
                  "RareArena RDC (rare-disease confirmation, free text)", from_file="rarearena:load_rdc_file",
                  kind="clinical",
                  style="diagnosis", group="medr2_clinical"),
        # the tenth benchmark: MIRAGE's 618 BioASQ yes/no questions, with gold PubMed ids (evidence you can score)
        Benchmark("bioasq_yn", "bioasq:load_yesno", None, 10, "en", "BioASQ-Y/N (618 yes/no, gold PubMed ids)",
                  style="pubmedqa"),
        # MIRAGE (Xiong et al., 2024): its exact item sets, zero-shot (no demonstrations taken out)
        Benchmark("mirage_mmlu", "mirage:load_mmlu", None, 0, "en", "MIRAGE MMLU-Med (1,089)", style="mmlu",
                  group="mirage"),
        Benchmark("mirage_medqa", "mirage:load_medqa", None, 0, "en", "MIRAGE MedQA-US (4 options, test: 1,273)",
                  group="mirage"),
        Benchmark("mirage_medmcqa", "mirage:load_medmcqa", None, 0, "en", "MIRAGE MedMCQA (dev: 4,183)",
                  style="medmcqa", group="mirage"),
        # MIRAGE's yes/no sets as MIRAGE asks them: lettered options, the own article not excluded (data/mirage.py)
        Benchmark("mirage_pubmedqa", "mirage:load_pubmedqa", None, 0, "en",
                  "MIRAGE PubMedQA* (500 test, no contexts; A. yes B. no C. maybe; own article searchable, as MIRAGE)",
                  style="medqa", group="mirage"),
        Benchmark("mirage_bioasq", "mirage:load_bioasq", None, 0, "en", "MIRAGE BioASQ-Y/N (618; A. yes B. no)",
                  style="medqa", group="mirage"),
    )
}
SOURCES = ("local", "hub")


@dataclass(frozen=True)
class Pools:
    eval: list[Record]
    demos: list[Record]


def declared_benchmarks() -> dict[str, Benchmark]:
    """The user's registered benchmarks (``medr2 benchmark add``), read from ``$MEDR2_CONFIG_DIR`` on each call."""
    from .user import declarations

    return {n: Benchmark(n, None, None, d.n_demos, d.language, d.title, kind=d.kind, style=d.prompt, declaration=d)
            for n, d in declarations().items()}


def names() -> list[str]:
    """Every benchmark name: the built-ins, then the user's."""
    return [*BENCHMARKS, *declared_benchmarks()]


def benchmark(name: str) -> Benchmark:
    if name in BENCHMARKS:
        return BENCHMARKS[name]
    declared = declared_benchmarks()
    if name not in declared:
        raise UnknownNameError("benchmark", name, [*BENCHMARKS, *declared])
    return declared[name]


def call_loader(ref: str, *args) -> list[Record]:
    module, func = ref.split(":")
    return getattr(import_module(f"{__name__}.{module}"), func)(*args)


def _root(data_dir: str | Path | None) -> Path:
    root = Path(data_dir) if data_dir else settings.data_dir()
    if root is None:
        raise DataError(
            "no benchmark data folder: set MEDR2_DATA_DIR to a folder laid out as shared/data/README.md "
            "describes (default ../shared/data), or use source='hub' where there is network"
        )
    return root


def _declared_rows(decl: Declaration) -> tuple[tuple[Record, ...], tuple[Record, ...] | None]:
    from .declared import resolve

    stamp = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in (resolve(s) for s in (decl.source, decl.demos) if s is not None and s.path is not None))
    return _load_declared(json.dumps({**decl.to_json(), "origin": decl.origin}), settings.data_dir(), stamp)


@lru_cache(maxsize=32)
def _load_declared(declaration_json: str, root: Path | None,
                   _files: tuple) -> tuple[tuple[Record, ...], tuple[Record, ...] | None]:
    """A declared benchmark's rows and, when it names a demonstrations source, those (cached on the declaration,
    the data folder and its files' sizes and times, so an edited declaration or file is read again)."""
    from . import declared

    decl = declared.parse(json.loads(declaration_json), "registered declaration")
    loaded = declared.check(decl)
    if loaded.skipped:
        log.warning("%s: %d malformed rows skipped (lenient), first: %s", decl.name, len(loaded.skipped),
                    loaded.skipped[0])
    demos = tuple(declared.load(decl, decl.demos).records) if decl.demos else None
    return tuple(loaded.records), demos


def _load(name: str, source: str, root: Path | None, cases_file: str | None = None) -> tuple[Record, ...]:
    spec = benchmark(name)
    if spec.declaration is not None:
        if cases_file or source != "local":
            raise DataError(f"{name} is a declared benchmark: its source is its declaration "
                            f"({spec.declaration.source.describe()}), not source={source!r} or a cases_file")
        return _declared_rows(spec.declaration)[0]
    return _load_builtin(name, source, root, cases_file)


@lru_cache(maxsize=32)
def _load_builtin(name: str, source: str, root: Path | None, cases_file: str | None = None) -> tuple[Record, ...]:
    spec = benchmark(name)
    if cases_file:
        if spec.from_file is None:
            raise DataError(f"{name} reads no cases_file; benchmarks that do: "
                            f"{', '.join(b.name for b in BENCHMARKS.values() if b.from_file)}")
        records = call_loader(spec.from_file, Path(cases_file))
    elif source == "local":
        records = call_loader(spec.local, root)
    elif source == "hub":
        if spec.hub is None:
            raise DataError(f"{name} has no hub copy; point MEDR2_DATA_DIR at the MedQA release files")
        records = call_loader(spec.hub)
    else:
        raise UnknownNameError("source", source, list(SOURCES))
    seen: set[str] = set()
    for record in records:
        if record.id in seen:
            raise DataError(f"{name}: duplicate record id {record.id!r} ({record.meta.get('source', '')})")
        seen.add(record.id)
    return tuple(records)


def load(name: str, *, source: str = "local", data_dir: str | Path | None = None,
         cases_file: str | None = None) -> list[Record]:
    """Every item of a benchmark (evaluation pool and demonstrations together), in file order.
    ``cases_file``: a user's own file in the benchmark's schema (NEJMQA, RareArena) instead of the mirror/hub."""
    return list(_load(name, source, *_where(name, source, data_dir, cases_file)))


def _where(name: str, source: str, data_dir, cases_file) -> tuple[Path | None, str | None]:
    """The data folder a builtin benchmark's local files are read from (None otherwise), and the cases file."""
    root = _root(data_dir) if source == "local" and not cases_file and name in BENCHMARKS else None
    return root, str(cases_file) if cases_file else None


def _content(record: Record) -> tuple:
    """What makes two items the same question: the stem and the options, whitespace and case aside."""
    def norm(text: str) -> str:
        return " ".join(str(text).split()).casefold()
    return norm(record.question), tuple(norm(t) for t in record.options.values())


def demo_ids(records: list[Record], n: int, seed: int = DEMO_SEED) -> set[str]:
    """A deterministic, seeded choice of ``n`` record ids (independent of file order), among the items no other item
    repeats: a demonstration never shows the model an evaluated question with its answer (MMLU-Med's
    clinical_knowledge-0035 is college_medicine-0187)."""
    from collections import Counter

    counts = Counter(_content(r) for r in records)
    ids = sorted(r.id for r in records if counts[_content(r)] == 1)
    return set(random.Random(seed).sample(ids, n))


@lru_cache(maxsize=32)
def _builtin_demo_ids(name: str, source: str, root: Path | None, cases_file: str | None, n: int,
                      seed: int) -> frozenset[str]:
    """:func:`demo_ids` of a builtin benchmark's rows (as its loader caches them): a sweep's dry-run builds one
    pre-pass spec per run, each asking for the same choice."""
    return frozenset(demo_ids(list(_load_builtin(name, source, root, cases_file)), n, seed))


def pools(name: str, *, source: str = "local", data_dir: str | Path | None = None, seed: int = DEMO_SEED,
          cases_file: str | dict | None = None) -> Pools:
    """The evaluation pool and the CoT-demonstration pool (Table 7 sizes), disjoint, in file order.
    ``cases_file`` may be a mapping ``{benchmark: path}`` (lm-eval shares ``--metadata`` across a run's tasks)."""
    if isinstance(cases_file, dict):
        cases_file = cases_file.get(name)
    records = load(name, source=source, data_dir=data_dir, cases_file=cases_file)
    spec = benchmark(name)
    if spec.declaration is not None and spec.declaration.demos is not None:
        demo_rows = _declared_rows(spec.declaration)[1]
        chosen = demo_ids(list(demo_rows), spec.n_demos, seed)
        return Pools(eval=records, demos=[r for r in demo_rows if r.id in chosen])
    chosen = demo_ids(records, spec.n_demos, seed) if spec.declaration is not None else \
        _builtin_demo_ids(name, source, *_where(name, source, data_dir, cases_file), spec.n_demos, seed)
    return Pools(
        eval=[r for r in records if r.id not in chosen],
        demos=[r for r in records if r.id in chosen],
    )
