"""The one registry of named methods and scorings: everything that names a method reads it from here.

A :class:`Method` is a name, the settings it changes over :class:`~medr2_hooks.pipeline.config.MethodConfig`'s
defaults (``None``: no pre-pass, the question alone) and where it comes from in the paper. The lm-eval task YAMLs
under ``tasks/`` are generated from methods × benchmarks × scorings (:mod:`medr2_hooks.lmeval.taskgen`); the
experiment configs, ``medr2 benchmark add``, ``medr2 wrap`` and the run record read the same entries. Adding a
method is one entry in :data:`METHODS`, then ``make tasks``.

A :class:`Scoring` is how the target's answer is scored: ``letters`` (the log-likelihood of each option label
after ``Answer:``, as lm-eval's built-in ``medqa_4options``, ``medmcqa`` and ``mmlu_*`` score) or ``generative``
(the target writes its reasoning, then its answer; strict extraction, an unparsable answer is ``[invalid]`` and
wrong, the invalid rate is reported). Free-text benchmarks (RareArena's diagnosis lists) have only the generative
scoring, under the plain task name.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from types import MappingProxyType


@dataclass(frozen=True)
class Method:
    name: str
    title: str  # the row label in reports
    settings: MappingProxyType | None  # MethodConfig fields over its defaults; None: no pre-pass (direct response)
    paper: str  # where the method is defined
    task_method: str | None = None  # whose tasks it evaluates when it has none of its own (finetune: direct's)
    answer: str = "default"  # how the target answers: default (the benchmark's prompt) | medrag (MedRAG's JSON CoT)

    @property
    def retrieval(self) -> bool:
        return self.settings is not None

    @property
    def has_tasks(self) -> bool:
        return self.task_method is None

    def variant(self) -> dict:
        """The MethodConfig settings this method sets (a fresh dict)."""
        return {"method": self.name, **dict(self.settings or {})}

    def stages(self) -> tuple[str, ...]:
        """The EBM steps the method runs, in pipeline order: read off its pipeline's declaration
        (:mod:`medr2_hooks.pipeline.declare`) under the method's settings."""
        if not self.retrieval:
            return ()
        from .pipeline.declare import pipeline

        cfg = resolve(self.name)
        return pipeline(cfg.pipeline).steps(cfg)


def _m(name: str, title: str, settings: dict | None, paper: str, task_method: str | None = None,
       answer: str = "default") -> Method:
    return Method(name, title, None if settings is None else MappingProxyType(settings), paper, task_method, answer)


_SWITCHES = {"q": "reformulate", "r": "rerank", "c": "cot"}
_PARTS = {"q": "Query Reformulator", "r": "Evidence Reranker", "c": "CoT Generator"}


def _ablation(flags: str) -> Method:
    return _m(f"ablation_{flags}", "+ " + ", ".join(_PARTS[f] for f in flags),
              {switch: flag in flags for flag, switch in _SWITCHES.items()},
              "Table 10 (q: query reformulator, r: evidence reranker, c: CoT generator)")


METHODS: dict[str, Method] = {m.name: m for m in (
    _m("direct", "Direct Response", None, "§4.2: the question alone"),
    _m("vanilla_rag", "Vanilla RAG",
       {"retrievers": ["dense"], "classify": False, "reformulate": False, "rerank": False, "cot": False},
       "§4.2: the raw question, dense retrieval, the top evidence in the window"),
    # an addition beside vanilla RAG, not a method of the paper (its title says so in every report)
    _m("hyde", "HyDE (not in the paper)", {"pipeline": "hyde", "retrievers": ["dense"], "classify": False,
                                           "reformulate": False, "rerank": False, "cot": False},
       "Gao et al. (2022): a hypothetical answer passage on the dense encoder's document side, then vanilla RAG's "
       "packing; not in the Med-R² paper"),
    _m("llm_amt", "LLM-AMT", {"pipeline": "llm_amt"},
       "§4.2, C.2: query augmenter, hybrid retrieval, self-refiner filters, reader CoT"),
    _m("medr2", "Med-R²", {}, "§3, Alg. 2"),
    _m("medr2_cot", "Med-R²-CoT", {"cot_in_first_query": True}, "§5, Figure 4: the CoT in the query from t = 1"),
    *(_ablation("".join(c)) for n in (1, 2, 3) for c in combinations("qrc", n)),
    _m("finetune", "Fine-tuning", None, "§4.2: full-parameter SFT, then the direct task", task_method="direct"),
    # evidence_share 1: MedRAG puts its 32 snippets in the prompt, bounded by the window alone
    _m("medrag", "MedRAG", {"retrievers": None, "fusion": "rrf", "retrieve_k": 32, "coarse_k": 32, "classify": False,
                            "reformulate": False, "rerank": False, "cot": False, "evidence_share": 1.0},
       "MIRAGE (Xiong et al., 2024): reciprocal rank fusion of the index's retrievers, 32 snippets, a JSON "
       "chain-of-thought answer", answer="medrag"),
    _m("medrag_cot", "CoT (MedRAG's prompt)", None,
       "MIRAGE's CoT row: MedRAG's instruction and JSON answer, no documents", answer="medrag"),
)}
ABLATIONS = tuple(name for name in METHODS if name.startswith("ablation_"))


@dataclass(frozen=True)
class Scoring:
    name: str
    suffix: str  # appended to the task name
    title: str


SCORINGS: dict[str, Scoring] = {s.name: s for s in (
    Scoring("letters", "", "log-likelihood of the option label (lm-eval's built-in multiple-choice scoring)"),
    Scoring("generative", "_gen", "the target reasons, then answers; strict extraction, [invalid] counted wrong"),
)}
FREE_TEXT_STYLES = ("diagnosis",)  # benchmarks without options: generative only, under the plain task name


def method(name: str) -> Method:
    from .errors import UnknownNameError

    if name not in METHODS:
        raise UnknownNameError("method", name, list(METHODS))
    return METHODS[name]


def resolve(name: str, override: dict | None = None, where: str | None = None):
    """The :class:`~medr2_hooks.pipeline.config.MethodConfig` a retrieval method runs with: its registry entry over
    the defaults, then ``override`` merged key by key (:func:`medr2_hooks.config.merge`). The one resolution the
    pre-pass, the experiment expansion and the cost estimate share."""
    from .config import merge
    from .pipeline.config import MethodConfig

    named = method(name)
    if not named.retrieval:
        from .config import ConfigError

        raise ConfigError(f"method {name!r} has no retrieval settings (retrieval methods: "
                          f"{', '.join(retrieval_methods())})")
    return MethodConfig.from_dict(merge(named.variant(), override or {}), where or f"method {name}")


def task_methods() -> list[str]:
    """The methods that have lm-eval tasks of their own."""
    return [m.name for m in METHODS.values() if m.has_tasks]


def retrieval_methods() -> list[str]:
    return [m.name for m in METHODS.values() if m.retrieval]


def scorings_for(style: str, method_name: str | None = None) -> tuple[str, ...]:
    """The scorings a benchmark of this prompt style has with a method (none: the method does not apply; a
    method with its own answer format, MedRAG's JSON, is generative only and needs options)."""
    fixed = method_name is not None and METHODS[method_name].answer != "default"
    if style in FREE_TEXT_STYLES:
        return () if fixed else ("generative",)
    return ("generative",) if fixed else tuple(SCORINGS)


def suffix(style: str, scoring: str, method_name: str | None = None) -> str:
    """The task-name suffix of ``scoring`` for a benchmark of ``style`` (free text, or a method with its own answer
    format: the plain name)."""
    if scoring not in SCORINGS:
        from .errors import UnknownNameError

        raise UnknownNameError("scoring", scoring, list(SCORINGS))
    fixed = method_name is not None and METHODS[method_name].answer != "default"
    return "" if style in FREE_TEXT_STYLES or fixed else SCORINGS[scoring].suffix


def task_name(benchmark: str, method_name: str, scoring: str = "letters", style: str = "medqa",
              subject: str | None = None) -> str:
    """``<benchmark>_<method><scoring suffix>[_<subject>]``, e.g. ``mmlu_med_medr2_gen_anatomy``; a method without
    tasks of its own names the tasks it uses (finetune: direct's)."""
    m = method(method_name)
    own = m.task_method or m.name
    base = f"{benchmark}_{own}{suffix(style, scoring, own)}"
    return f"{base}_{subject}" if subject else base
