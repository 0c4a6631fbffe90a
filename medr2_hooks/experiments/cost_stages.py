"""The counting model of the cost estimate (:mod:`.cost`): the lines (requests, prompt tokens, generated tokens) a
run's pre-pass and evaluation send, per stage and role.

The counts follow the pipeline's structure: which stage asks which role how many times per question and iteration
(:mod:`medr2_hooks.pipeline`), and how many rows a closed-set menu costs on that role's backend (``hf`` scores a
menu in one pass; ``vllm`` and served endpoints read a menu of one-token labels from one request's next-token
distribution, and send one prompt-logprob row per label only for names of several tokens, which vLLM computes
without its prefix cache: such rows count whole in ``prompt_tokens_unique``). Tokens come from the stages' own prompt
functions rendered on the run's items (question-only stages) or with documents of the index's mean unit size,
counted under each role's tokenizer (:mod:`.cost_sizes`). What only the run itself decides is taken at its
ceiling and listed under ``assumptions``: Alg. 2 runs all T iterations, every judged document is new, every
generation uses its whole budget, the filters keep every document, every demonstration is shown; the retrievers'
overlap is measured on a built index. So the estimate is an upper bound for a cold cache; ``prompt_tokens_unique``
counts each distinct prompt once (what a server with prefix caching computes: vLLM's default).

Work two runs of a sweep share through the stage cache (the question-only stages of one benchmark, the first
iteration of equal retrieval settings; the evaluation never) carries a ``share`` key: the fields of the settings
that stage's cached results depend on.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from .. import data, methods
from ..apply import prompts as P
from ..classify import EBM_CATEGORIES, QUESTION_TYPES, ebm_prompt, qtype_prompt
from ..cot import FREE_ANSWER_TOKENS, cot_prompt, question_block
from ..pipeline import llm_amt
from ..pipeline.config import ROLES
from ..reformulate import reformulation_prompt
from ..rerank.coarse import relevance_prompt
from ..rerank.fine import DOC_TYPES, EVIDENCE_LEVELS, answer_prompt, conflict_prompt, doc_type_prompt, level_prompt
from .cost_sizes import SAMPLE_QUERIES, Tokens, tokens_for, union_size

SAMPLE_ITEMS = 200  # items whose prompts are rendered and counted (evenly spaced over the run's items)
LM_EVAL_MAX_GEN_TOKS = 256  # lm-eval's default max_gen_toks when a generative run sets none


@dataclass
class Line:
    phase: str  # prepass | eval
    stage: str
    role: str
    model: str
    items: float  # what the stage is asked: questions, (query, document) pairs, documents, document sets
    requests: float  # prompts sent (a menu of one-token labels: one; of longer names on a served role: one per label)
    prompt_tokens: float
    prompt_tokens_unique: float  # each distinct prompt once (prefix caching)
    generated_tokens: float
    share: str | None = None  # work another run with the same key does identically (the stage cache); None: own
    endpoint: str | None = None  # a served role's server (base_url without credentials); None: in process

    def to_json(self) -> dict:
        return {k: (round(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


class Role:
    """A role's model, backend and tokenizer, and the requests one closed-set menu costs on it."""

    def __init__(self, name: str, spec: dict, per_label_menus: bool = False):
        from ..redact import public_url

        self.name, self.model, self.backend = name, spec["model"], spec.get("backend", "hf")
        self.per_label_menus = per_label_menus  # how served menus were read before one request per menu
        self.endpoint = public_url(spec["base_url"]) if spec.get("base_url") else None
        self.tokens: Tokens = tokens_for(spec.get("tokenizer") or spec["model"])

    def rows(self, labels: int, one_token: bool = True) -> int:
        """Requests one closed-set menu costs: one — ``hf`` scores the prompt once and every label on its cached keys,
        vLLM and served endpoints read labels of one token (letters, yes/no) from one request's next-token
        distribution — else one per label (a name of several tokens is its own prompt-logprob sequence)."""
        return 1 if self.backend == "hf" or (one_token and not self.per_label_menus) else labels


class Counting:
    """One run's counting context: its items, settings, roles and sizes."""

    def __init__(self, cfg, benchmark: str, items: list, demos: list, share_base: dict, per_label_menus: bool = False):
        self.cfg, self.benchmark, self.share_base = cfg, benchmark, share_base
        self.per_label_menus = per_label_menus  # calibration against records made before one request per menu
        self.items, self.demos = items, demos
        self.unit = 0.0  # mean tokens of one evidence unit (set from the index for a retrieval run)
        self.union: float | None = None  # mean candidates a search returns (measured or its ceiling, on first use)
        self.lines: list[Line] = []
        self.assumptions: dict = {}

    def sample(self, questions: list) -> list:
        step = max(1, len(questions) / SAMPLE_ITEMS)
        return [questions[int(i * step)] for i in range(min(len(questions), SAMPLE_ITEMS))]

    def mean(self, role: Role, render) -> float:
        return role.tokens.mean([render(q) for q in self.sample(self.items + self.demos)])

    def role(self, name: str) -> Role:
        return Role(name, self.cfg.role(name), self.per_label_menus)

    def share(self, stage: str, *groups: str) -> str:
        fields = {g: getattr(self.cfg, g) for g in groups if hasattr(self.cfg, g)}
        fields.update({g: self.cfg.role(g)["model"] for g in groups if g in ROLES})
        return json.dumps({"stage": stage, **self.share_base, **fields}, sort_keys=True, default=str)

    def add(self, stage: str, role: Role | str, n: float, rows: float, tokens: float, unique: float | None = None,
            generated: float = 0.0, share: str | None = None, phase: str = "prepass", model: str | None = None,
            prompts: float = 1):
        """``n`` items of a stage, each sending ``prompts`` distinct prompts of ``tokens`` prompt tokens, each prompt
        as ``rows`` requests (a served menu: one per label) and generating ``generated`` tokens per item;
        ``unique``: the distinct prompt tokens per item when they are not ``prompts × tokens``."""
        name, model = (role.name, role.model) if isinstance(role, Role) else (role, model)
        endpoint = role.endpoint if isinstance(role, Role) else None
        share = None if share is None else f"{share}|{stage}"  # a CoT and the reading of its answer: two lines
        sent = n * prompts * rows * tokens
        computed = n * (prompts * tokens if unique is None else unique)
        if rows > 1 and isinstance(role, Role) and role.backend != "hf":
            computed = sent  # one prompt-logprob sequence per label: vLLM computes each without its prefix cache
        self.lines.append(Line(phase, stage, name, model, n, n * prompts * rows, sent, computed, n * generated,
                               share, endpoint))


_CLASSIFY = ("pipeline", "classifier", "decision_mode", "label_scoring")
_REFORM = _CLASSIFY + ("reformulate", "reformulator", "reformulate_max_new_tokens")
_SEARCH = _REFORM + ("index", "retrievers", "retrieve_k", "unit", "fusion", "query", "cot_in_first_query",
                     "augmenter", "augment_max_new_tokens")
_RERANK = _SEARCH + ("rerank", "coarse", "cross_encoder", "relevance", "coarse_k", "rerank_query", "max_doc_tokens",
                     "leveler", "doc_typer", "proxy", "conflict", "reference", "usefulness", "relevance_threshold")
_COT = _RERANK + ("cot", "cot_max_new_tokens", "window", "evidence_share", "target_tokenizer", "alpha", "demo_evidence")


def prepass(run: Counting) -> None:
    """The pre-pass's lines (Alg. 2 over questions and demonstrations, or LLM-AMT over the questions)."""
    cfg = run.cfg
    if cfg.pipeline == "llm_amt":
        return _llm_amt(run)
    n, t_max = len(run.items) + len(run.demos), cfg.iterations if cfg.cot else 1
    run.assumptions["iterations"] = f"{t_max} (ceiling: no early stop)" if cfg.cot else 1
    if cfg.classify:  # two menus a question: the EBM category and the question type
        role = run.role("classifier")
        menus = [(run.mean(role, lambda q, r=render: r(q.question, cfg.label_scoring)) + 1, labels)
                 for render, labels in ((ebm_prompt, len(EBM_CATEGORIES)), (qtype_prompt, len(QUESTION_TYPES)))]
        if cfg.decision_mode == "generate":
            run.add("classify", role, n, 2, sum(t for t, _ in menus) / 2, generated=24,
                    share=run.share("classify", *_CLASSIFY))
        else:
            rows = [role.rows(labels, cfg.label_scoring == "letters") for _, labels in menus]
            run.add("classify", role, n, sum(rows), sum(t * r for (t, _), r in zip(menus, rows)) / sum(rows),
                    unique=sum(t for t, _ in menus), share=run.share("classify", *_CLASSIFY))
    reform = 0.0
    if cfg.reformulate:
        role = run.role("reformulator")
        tokens = run.mean(role, lambda q: reformulation_prompt(role.tokens, q.question, "other"))
        reform = float(cfg.reformulate_max_new_tokens)
        run.add("reformulate", role, n, 1, tokens, generated=reform, share=run.share("reformulate", *_REFORM))
    if cfg.rerank or cfg.cot:
        role = run.role("reference")
        if _free_text(run):
            tokens = run.mean(role, lambda q: role.tokens.chat(question_block(q.question, {}, False)))
            run.add("reference", role, n, 1, tokens, generated=FREE_ANSWER_TOKENS,
                    share=run.share("reference", "reference"))
        else:
            tokens = run.mean(role, lambda q: question_block(q.question, q.options, _labelled(q)) + "\nAnswer:") + 1
            run.add("reference", role, n, role.rows(_n_options(run)), tokens, share=run.share("reference", "reference"))
    stem = _stem(run)
    cot_tokens = float(cfg.cot_max_new_tokens) if cfg.cot else 0.0
    if cfg.cot and cfg.cot_in_first_query:
        _cots(run, n, evidence=0.0, share=run.share("cot@0", *_SEARCH, "cot", "cot_max_new_tokens"), stage="cot")
    for t in range(1, t_max + 1):
        first = t == 1 and not cfg.cot_in_first_query
        base = (reform if cfg.reformulate else stem) if cfg.query == "paper" else stem + reform
        query = base + (0.0 if first else cot_tokens)
        key = (lambda stage, groups: run.share(stage, *groups)) if t == 1 else (lambda stage, groups: None)
        _rerank(run, n, query, _candidates(run), key)
        evidence = min(cfg.evidence_share * cfg.window, _evidence_docs(run) * run.unit)
        if cfg.cot:
            _cots(run, n, evidence, key("cot", _COT), stage="cot")
    if cfg.cot and run.demos:
        _cots(run, len(run.demos), cfg.demo_evidence * run.unit, None, stage="demo_cot", rationale=True)


def _rerank(run: Counting, n: int, query: float, candidates: float, key) -> None:
    cfg = run.cfg
    if not cfg.rerank:
        return
    judged = min(float(cfg.max_doc_tokens), run.unit)
    query_against = query if cfg.rerank_query == "query" else _stem(run)
    if cfg.coarse == "cross_encoder":
        run.add("coarse", "cross_encoder", n * candidates, 1, query_against + run.unit, share=key("coarse", _SEARCH),
                model=f"cross_encoder:{cfg.cross_encoder}")
        run.assumptions["cross_encoder_tokens"] = f"query + passage, counted with {cfg.target_tokenizer}"
    else:
        role = run.role("relevance")
        run.add("coarse", role, n * candidates, role.rows(2),
                _fixed(role, relevance_prompt("", "")) + query_against + judged + 1, share=key("coarse", _SEARCH))
    k = min(cfg.coarse_k, candidates)
    for stage, role_name, render, labels in (("evidence_level", "leveler", level_prompt, len(EVIDENCE_LEVELS)),
                                             ("doc_type", "doc_typer", doc_type_prompt, len(DOC_TYPES))):
        role = run.role(role_name)
        run.add(stage, role, n * k, role.rows(labels, cfg.label_scoring == "letters"),
                _fixed(role, render("", cfg.label_scoring)) + judged + 1,
                share=key(stage, _RERANK))
    role = run.role("proxy")
    answer = _answer_tokens(run, role)
    no_doc = run.mean(role, lambda q: answer_prompt(q.question, None)) + answer
    per_item_rows = k + 1
    tokens = (per_item_rows * no_doc + k * (judged + _fixed(role, answer_prompt("", "")))) / per_item_rows
    run.add("usefulness", role, n, 1, tokens, prompts=per_item_rows, share=key("usefulness", _RERANK))
    pairs = math.comb(int(min(cfg.conflict.top, k)), 2)  # judged pairs of one question's set
    role = run.role("conflict")
    run.add("conflict", role, n, role.rows(2), _fixed(role, conflict_prompt("", "")) + 2 * judged + 1, prompts=pairs,
            share=key("conflict", _RERANK))
    run.assumptions["judged_documents"] = "every coarse document new to the leveler and typer (ceiling)"


def _cots(run: Counting, n: int, evidence: float, share: str | None, stage: str, rationale: bool = False) -> None:
    cfg, role = run.cfg, run.role("cot")
    questions = run.demos if rationale else run.items + run.demos
    prompt = role.tokens.mean([cot_prompt(role.tokens, q.question, q.options, []) for q in run.sample(questions)])
    prompt += evidence
    run.add(stage, role, n, 1, prompt, generated=float(cfg.cot_max_new_tokens), share=share)
    if _free_text(run):
        run.add(f"{stage}_answer", role, n, 1, prompt + cfg.cot_max_new_tokens + 10, generated=FREE_ANSWER_TOKENS,
                share=share)
    else:
        run.add(f"{stage}_answer", role, n, role.rows(_n_options(run)), prompt + cfg.cot_max_new_tokens + 8,
                unique=prompt + cfg.cot_max_new_tokens + 8, share=share)
    run.assumptions["generations"] = "every generation uses its whole max_new_tokens (ceiling)"


def _llm_amt(run: Counting) -> None:
    cfg, n = run.cfg, len(run.items)
    role = run.role("augmenter")
    a = float(cfg.augment_max_new_tokens)
    augment = ("augmenter", "augment_max_new_tokens")
    run.add("amt_rewrite", role, n, 1, run.mean(role, lambda q: llm_amt.rewrite_prompt(role.tokens, q.question)),
            generated=a, share=run.share("amt_rewrite", *augment))
    run.add("amt_expand", role, n, 1, _fixed(role, llm_amt.expand_prompt(role.tokens, "", "")) + a,
            generated=a, share=run.share("amt_expand", *augment))
    query = _stem(run) + 2 * a
    candidates = _candidates(run)
    judged = min(float(cfg.max_doc_tokens), run.unit)
    role = run.role("relevance")
    relevance = _fixed(role, relevance_prompt("", "")) + query + judged + 1
    if cfg.rerank and cfg.coarse == "cross_encoder":
        run.add("coarse", "cross_encoder", n * candidates, 1, query + run.unit, share=run.share("coarse", *_SEARCH),
                model=f"cross_encoder:{cfg.cross_encoder}")
    elif cfg.rerank:  # the LLM judge reranks every candidate: the relevance filter then finds its pairs cached
        run.add("coarse", role, n * candidates, role.rows(2), relevance, share=run.share("coarse", *_SEARCH))
    k = min(cfg.coarse_k, candidates) if cfg.rerank else candidates
    cached = cfg.rerank and cfg.coarse == "llm"
    run.add("coarse", role, n * k, 0 if cached else role.rows(2), relevance, unique=0 if cached else None,
            share=run.share("relevance", *_RERANK))  # the LLM relevance filter: Med-R²'s LLM coarse cache stage
    role = run.role("usefulness")
    run.add("amt_useful", role, n * k, role.rows(2),
            _fixed(role, llm_amt.usefulness_prompt("", "")) + _stem(run) + judged + 1, share=run.share("amt", *_RERANK))
    run.assumptions["refiner"] = "every document passes the relevance filter (ceiling)"
    _cots(run, n, min(cfg.evidence_share * cfg.window, _evidence_docs(run) * run.unit), run.share("cot", *_COT),
          stage="cot")


def evaluation(run: Counting, target: Tokens, scoring: str, chat: bool, max_gen: int, prepass_evidence: bool,
               answer: str = "default") -> None:
    """The target's requests: one generation per item (generative) or one log-likelihood per option (letters).
    ``answer``: the method's answer format (``medrag``: MedRAG's JSON prompt around the documents)."""
    cfg = run.cfg
    if answer == "medrag":
        prompt = target.mean([P.medrag_prompt([], q) for q in run.sample(run.items)]) + \
            _fixed_tokens(target, P.MEDRAG_SYSTEM)
    else:
        prompt = target.mean([P.question_prompt(run.benchmark, q) for q in run.sample(run.items)])
    if (scoring == "generative" or _free_text(run)) and answer != "medrag":
        prompt += _fixed_tokens(target, P.COT_CUE)
    if chat:
        prompt += _fixed_tokens(target, target.chat(""))
    if prepass_evidence and cfg is not None:
        evidence = min(cfg.evidence_share * cfg.window, _evidence_docs(run) * run.unit)
        prompt += evidence + (cfg.cot_max_new_tokens if cfg.answer_with_cot else 0)
        room = cfg.window - 16 - cfg.answer_tokens
        if cfg.cot and cfg.pipeline == "medr2" and run.demos:
            demo = prompt - evidence + cfg.demo_evidence * run.unit + cfg.cot_max_new_tokens + 12
            prompt += demo * max(0, min(len(run.demos), int((room - prompt) // demo)))
        prompt = min(prompt, room)
    if scoring == "generative" or _free_text(run):
        run.add("answer", "target", len(run.items), 1, prompt, generated=float(max_gen), phase="eval",
                model=target.model)
    else:
        options = _n_options(run)
        run.add("answer", "target", len(run.items), options, prompt + 1, unique=prompt + options, phase="eval",
                model=target.model)


def _candidates(run: Counting) -> float:
    cfg = run.cfg
    if run.union is None:
        queries = tuple(q.question for q in run.items[:SAMPLE_QUERIES])
        run.union, run.assumptions["candidates"] = union_size(
            cfg.index, tuple(cfg.retrievers) if cfg.retrievers else None, cfg.retrieve_k, cfg.unit, cfg.fusion,
            queries)
    return run.union


def _evidence_docs(run: Counting) -> float:
    """Documents a question's evidence is selected from: S^f (at most coarse_k; LLM-AMT without its rerank: every
    candidate), all kept by the filters (ceiling)."""
    cfg = run.cfg
    return _candidates(run) if cfg.pipeline == "llm_amt" and not cfg.rerank else min(cfg.coarse_k, _candidates(run))


def _fixed(role: Role, text: str) -> float:
    return _fixed_tokens(role.tokens, text)


def _fixed_tokens(tokens: Tokens, text: str) -> float:
    return float(tokens.count([text])[0]) if text else 0.0


def _stem(run: Counting) -> float:
    return tokens_for(run.cfg.target_tokenizer).mean([q.question for q in run.sample(run.items + run.demos)])


def _answer_tokens(run: Counting, role: Role) -> float:
    texts = [t for q in run.sample(run.items) for t in (q.options or {}).values()]
    return role.tokens.mean([f" {t}" for t in texts]) if texts else float(FREE_ANSWER_TOKENS)


def _n_options(run: Counting) -> float:
    return sum(len(q.options) for q in run.items) / max(len(run.items), 1)


def _free_text(run: Counting) -> bool:
    return data.benchmark(run.benchmark).style in methods.FREE_TEXT_STYLES


def _labelled(q) -> bool:
    return list(q.options) != list(q.options.values())
