"""The stage toolbox every pipeline is written against (:class:`StageToolbox`): each stage the methods share,
batched over every question of a task and cached stage by stage, with the plumbing a pipeline needs (roles' models,
the searcher, the target's token counts, timing, counts and the run record).

The stages (declared with their shapes in :mod:`.stages`): classify, reformulate, the reference answer, retrieve
(optionally with a passage on the encoder's document side, HyDE's), the rank the excluded own article would have
had, relevance / coarse rerank, the fine rerank of Eq. 1 (:func:`medr2_hooks.rerank.fine.rerank`), CoTs and
demonstration rationales. A pipeline (:mod:`.medr2`: Alg. 2; :mod:`.llm_amt`; :mod:`.hyde`) composes them.

Gold answers of evaluation items never enter this module: it receives :class:`~medr2_hooks.data.Question`
objects; demonstration answers arrive separately and only reach the rendered demonstrations.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager

import numpy as np

from .. import classify as classify_stage
from .. import cot as cot_stage
from .. import reformulate as reformulate_stage
from ..cache import StageCache
from ..data.orphanet import normalise
from ..data.record import Question
from ..llm import BackendPool
from ..llm.closed_set import LABEL_SCORING_VERSION, label_distribution
from ..llm.openai_backend import EndpointError
from ..rerank import fine
from .config import MethodConfig
from .declare import all_roles, pipeline
from .identity import RoleIds

# Bump when post-processing of generated text changes, so cached generations are recomputed.
# 3: CoTs end at end of turn or a new question/evidence block (no longer at the first blank line) and record length.
GENERATION_VERSION = 3


class StageToolbox:
    def __init__(self, cfg: MethodConfig, cache: StageCache | None = None, pool: BackendPool | None = None,
                 searcher=None):
        self.cfg, self.cache, self.pool = cfg, cache or StageCache(), pool or BackendPool()
        self._searcher = searcher
        self.timings: Counter = Counter()
        self.counts: Counter = Counter()
        self.cot_lengths: list[int] = []
        # live: a served role's identity holds what its server reports (root, max_model_len), so a server restarted
        # with other settings (YaRN, another context) never reuses generations made under the old ones
        self.ids = RoleIds(cfg.role, all_roles())
        self.declared = pipeline(cfg.pipeline)  # the stages cfg's pipeline declares: only those may run

    # -- plumbing --------------------------------------------------------------------------------------------
    @contextmanager
    def stage(self, name: str):
        self.declared.check_runs(self.cfg, name)
        t = time.perf_counter()
        try:
            yield
        except EndpointError as exc:
            if "pre-pass stage" in str(exc):
                raise
            raise EndpointError(f"pre-pass stage {name!r}, {exc}") from None
        finally:
            self.timings[name] += time.perf_counter() - t

    def target_tokens(self, texts: list[str]) -> list[int]:
        """Token counts under the target model's tokenizer (window packing)."""
        if not texts:
            return []
        if not hasattr(self, "_target_tok"):
            from transformers import AutoTokenizer

            from ..llm.embedded import resolve

            self._target_tok = AutoTokenizer.from_pretrained(resolve(self.cfg.target_tokenizer))
            self._target_tok.model_max_length = 10**9
        return [len(ids) for ids in self._target_tok(texts, add_special_tokens=False)["input_ids"]]

    def chat_overhead(self, system: str | None = None) -> int:
        """Tokens the target's chat template adds around one user turn (with ``system`` as the system turn, or
        before the prompt when the tokenizer has no template): counted in every packed prompt, since a chat target
        is sent the template (lm-eval's ``--apply_chat_template``)."""
        self.target_tokens([""])
        tok = self._target_tok
        if not getattr(tok, "chat_template", None):
            return self.target_tokens([f"{system}\n\n"])[0] if system else 0
        from ..llm.local import chat_token_ids

        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": ""}]
        return len(chat_token_ids(tok, messages))

    @property
    def label_rule(self) -> str:
        """How closed-set menus were scored, in the cache config of every stage that uses one."""
        return f"{LABEL_SCORING_VERSION}:{self.cfg.label_scoring}"

    def llm(self, role: str):
        return self.pool.get(self.cfg.role(role))

    @property
    def searcher(self):
        if self._searcher is None:
            from ..retrieve.searcher import Searcher

            self._searcher = Searcher.open(self.cfg.index, retrievers=tuple(self.cfg.retrievers or ()) or None)
        return self._searcher

    def cached(self, stage: str, inputs: list, config: dict, compute, batch_size: int = 64) -> list:
        with self.stage(stage):
            return self.cache.cached(stage, inputs, config, compute, batch_size,
                                     shape=self.declared.shape(self.cfg, stage))

    def run_record(self, started: float, questions: int, demos: int) -> dict:
        """What a pre-pass did: settings, models, index, per-stage seconds, counts, cache hits, model usage."""
        return {"method": self.cfg.method, "pipeline": self.cfg.pipeline, "config": self.cfg.to_json(),
                "label_rule": self.label_rule,  # how closed-set menus were read (one request per menu since menu-v2)
                "models": self.ids.used(),
                "index": {k: self.searcher.manifest[k] for k in ("name", "recipe_hash", "corpus_hash")},
                "questions": questions, "demos": demos, "wall_seconds": round(time.perf_counter() - started, 2),
                "stage_seconds": {k: round(v, 2) for k, v in self.timings.items()}, "counts": dict(self.counts),
                "cot_tokens": _summary(self.cot_lengths, self.cfg.cot_max_new_tokens),
                "cache": dict(self.cache.stats), "usage": self.pool.usage()}

    # -- question-only stages ----------------------------------------------------------------------------------
    def classify(self, questions: list[Question]) -> list[dict]:
        if not self.cfg.classify:
            return [{"ebm": "other", "qtype": "factual", "ebm_probs": None, "qtype_probs": None,
                     "parsed": True}] * len(questions)
        out = self.cached("classify", [q.question for q in questions],
                          {"model": self.ids["classifier"], "mode": self.cfg.decision_mode, "labels": self.label_rule},
                          lambda qs: [x.to_json() for x in classify_stage.classify(self.llm("classifier"), qs,
                                                                                    self.cfg.decision_mode,
                                                                                    self.cfg.label_scoring)])
        self.counts["classify_parse_failures"] += sum(not x["parsed"] for x in out)
        return out

    def reformulate(self, questions: list[Question], labels: list[dict]) -> list[str | None]:
        if not self.cfg.reformulate:
            return [None] * len(questions)
        out = self.cached("reformulate", [[q.question, lab["ebm"]] for q, lab in zip(questions, labels)],
                          {"model": self.ids["reformulator"], "max_new_tokens": self.cfg.reformulate_max_new_tokens,
                           "version": GENERATION_VERSION},
                          lambda xs: reformulate_stage.reformulate(self.llm("reformulator"), [x[0] for x in xs],
                                                                   [x[1] for x in xs],
                                                                   self.cfg.reformulate_max_new_tokens))
        self.counts["reformulation_fallbacks"] += sum(x["fallback"] for x in out)
        self.counts["reformulation_echoes"] += sum(
            not x["fallback"] and reformulate_stage.echoes_prompt(q.question, lab["ebm"], x["query"])
            for q, lab, x in zip(questions, labels, out))
        return [x["query"] for x in out]

    def references(self, questions: list[Question]) -> list[dict]:
        """``M_F``'s answer to each question without evidence: closed-set over the options, or a short generated
        name for free-text questions. The reference for ``f_u`` and for Acc in Alg. 2 — never the gold label."""
        def compute(items):
            backend = self.llm("reference")
            groups: dict[tuple[str, ...], list[int]] = {}  # one batched call per label set
            for i, item in enumerate(items):
                groups.setdefault(tuple(item["o"]), []).append(i)
            out: list[dict] = [{} for _ in items]
            free = groups.pop((), [])
            if free:
                prompts = [backend.chat(f"{cot_stage.question_block(items[i]['q'], {}, False)}\n\nName the single most "
                                        "likely diagnosis.") + "Diagnosis:" for i in free]
                for i, text in zip(free, backend.generate(prompts, cot_stage.FREE_ANSWER_TOKENS, stop=["\n", "."],
                                                          role="reference")):
                    out[i] = {"label": normalise(text), "text": text.strip(), "probs": None}
            for labels, idx in groups.items():
                prompts = [cot_stage.question_block(items[i]["q"], items[i]["o"],
                                                    list(labels) != list(items[i]["o"].values())) + "\nAnswer:"
                           for i in idx]
                for i, p in zip(idx, label_distribution(backend, prompts, list(labels), role="reference")):
                    options = items[i]["o"]
                    label = labels[int(np.argmax(p))]
                    text = label if options[label] == label else f"{label}. {options[label]}"
                    out[i] = {"label": label, "text": text, "probs": dict(zip(labels, map(float, p)))}
            return out

        out = self.cached("reference", [{"q": q.question, "o": q.options} for q in questions],
                          {"model": self.ids["reference"], "version": GENERATION_VERSION}, compute)
        self.counts["empty_reference_answers"] += sum(not r["label"] for r in out)
        return out

    # -- chains of thought ------------------------------------------------------------------------------------
    def cots(self, items: list[list]) -> list[dict]:
        """The CoT stage over ``[question, options, evidence texts]`` items: ``{"cot", "answer", "tokens",
        "at_limit"}`` each (the answer read by closed-set scoring, or a short name for free text)."""
        config = {"model": self.ids["cot"], "max_new_tokens": self.cfg.cot_max_new_tokens,
                  "version": GENERATION_VERSION}
        out = self.cached("cot", items, config, lambda xs: self._generate_cots(xs))
        self.cot_lengths += [c["tokens"] for c in out]
        self.counts["cot_at_limit"] += sum(c["at_limit"] for c in out)
        return out

    def demo_rationales(self, items: list[list]) -> list[dict]:
        """Demonstration rationales over ``[question, options, evidence texts, gold answer]`` items: the CoT
        generator knows the gold answer (demonstrations are training-side); ``agrees`` says whether the answer read
        after the rationale is that gold answer (one that concludes another is not shown)."""
        config = {"model": self.ids["cot"], "max_new_tokens": self.cfg.cot_max_new_tokens,
                  "version": GENERATION_VERSION}

        def compute(xs):
            out = self._generate_cots([x[:3] for x in xs], [x[3] for x in xs])
            for o, x in zip(out, xs):
                answer = o["answer"] or {}
                best = max(answer, key=answer.get) if answer else None
                o["agrees"] = best is not None and (best == x[3] if x[1] else best == normalise(x[3]))
            return out

        return self.cached("demo_cot", items, config, compute)

    def _generate_cots(self, items: list, answers: list[str] | None = None) -> list[dict]:
        backend = self.llm("cot")
        prompts = [cot_stage.cot_prompt(backend, q, o, ev, answers[i] if answers else None)
                   for i, (q, o, ev) in enumerate(items)]
        texts = cot_stage.generate_cot(backend, prompts, self.cfg.cot_max_new_tokens)
        # the answer is read after the reasoning alone: a rationale's prompt names the gold answer, so it is read
        # from the plain CoT prompt (what would this reasoning conclude?), never from the prompt that gave it away
        plain = [cot_stage.cot_prompt(backend, q, o, ev) for q, o, ev in items] if answers else prompts
        read = cot_stage.cot_answers(backend, plain, texts, [list(o) for _, o, _ in items])
        lengths = backend.count_tokens(texts) if texts else []
        return [{"cot": c, "answer": a, "tokens": n, "at_limit": n >= self.cfg.cot_max_new_tokens - 1}
                for c, a, n in zip(texts, read, lengths)]

    # -- evidence ---------------------------------------------------------------------------------------------
    def retrieve(self, queries: list[str], pmids: list[str | None],
                 documents: list[str] | None = None) -> list[list[dict]]:
        """Each query's fused candidates (its own PubMed article excluded). ``documents``: a passage per query the
        dense retriever reads on the encoder's document side, averaged with the query's embedding (HyDE)."""
        cfg = self.cfg
        config = {**self._search_identity(), "k": cfg.retrieve_k, "unit": cfg.unit, "fusion": cfg.fusion}
        if documents is not None:
            config["document_side"] = "mean(E_query(query), E_document(document))"

        def compute(items):
            vectors = None if documents is None else \
                self.searcher.document_side_vectors([x[0] for x in items], [x[2] for x in items])
            hits = self.searcher.search([x[0] for x in items], k=cfg.retrieve_k, unit=cfg.unit, fusion=cfg.fusion,
                                        exclude_pmids=[x[1] for x in items], vectors=vectors)
            return [[h.to_json() for h in row] for row in hits]

        # Rule: an empty query (an empty question) retrieves nothing and is counted; the item is answered
        # without evidence like a direct-response item instead of failing the run.
        searchable = [i for i, q in enumerate(queries) if q.strip()]
        self.counts["empty_questions"] += len(queries) - len(searchable)
        for name, n in self.searcher.overlong_queries([queries[i] for i in searchable]).items():
            self.counts[f"queries_cut:{name}"] += n  # the retriever read only the start of these queries
        found = self.cached("retrieve", [[queries[i], pmids[i]] + ([documents[i]] if documents is not None else [])
                                         for i in searchable], config, compute, batch_size=256)
        out: list[list[dict]] = [[] for _ in queries]
        for i, hits in zip(searchable, found):
            out[i] = hits
        self.counts["no_documents_retrieved"] += sum(not hits for hits in out)
        return out

    def _search_identity(self) -> dict:
        """What a cached search result depends on besides its query: the index's content and the retrievers."""
        manifest = self.searcher.manifest
        return {"index": [manifest["recipe_hash"], manifest["corpus_hash"]],
                "retrievers": list(self.searcher.retrievers)}

    def own_article_ranks(self, questions: list[Question], depth: int = 100) -> dict[str, dict[str, int | None]]:
        """For questions whose own article is excluded from their evidence (PubMedQA): where it would have ranked
        for a search of the question stem, per retriever and fused (``Searcher.own_ranks``), by question id."""
        todo = [q for q in questions if q.exclude_pmid and q.question.strip()]
        if not todo:
            return {}
        config = {**self._search_identity(), "depth": depth}
        found = self.cached("own_rank", [[q.question, q.exclude_pmid] for q in todo], config,
                            lambda items: self.searcher.own_ranks([x[0] for x in items], [x[1] for x in items], depth),
                            batch_size=256)
        return {q.id: ranks for q, ranks in zip(todo, found)}

    def relevance(self, queries: list[str], candidates: list[list[dict]],
                  scorer: str | None = None) -> list[list[float]]:
        """A relevance score per (query, candidate): the cross-encoder's sigmoid score, or the LLM judge's
        probability of "yes" (``scorer``: ``llm`` | ``cross_encoder``, default the config's ``coarse``). One cache
        stage, shared by Med-R²'s coarse rerank and LLM-AMT's refiner (which always passes ``llm``: its paper's
        relevance filter is an LLM yes/no judge)."""
        if (scorer or self.cfg.coarse) == "cross_encoder":
            model_id = f"cross_encoder:{self.cfg.cross_encoder}"
            make = self.cross_encoder
        else:
            from ..rerank.coarse import LLMReranker

            model_id = f"llm:{self.ids['relevance']}"
            make = lambda: LLMReranker(self.llm("relevance"), self.cfg.max_doc_tokens)  # noqa: E731
        pairs = [[q, h["text"]] for q, hits in zip(queries, candidates) for h in hits]
        state = {}

        def compute(items):
            state.setdefault("scorer", make())
            if hasattr(state["scorer"], "overlong"):  # the cross-encoder reads at most its model's length
                self.counts["rerank_pairs_cut"] += state["scorer"].overlong([tuple(x) for x in items])
            return state["scorer"].score([tuple(x) for x in items])

        config = {"model": model_id, "max_doc_tokens": self.cfg.max_doc_tokens}
        if model_id.startswith("cross_encoder:"):
            config["max_length"] = "model"  # the model's own maximum (was 512 tokens)
        scores = iter(self.cached("coarse", pairs, config, compute, batch_size=128))
        return [[next(scores) for _ in hits] for hits in candidates]

    def cross_encoder(self):
        """The coarse cross-encoder (the cost estimate's counting run counts its pairs instead of loading it)."""
        from ..rerank.coarse import CrossEncoderReranker

        return CrossEncoderReranker(self.cfg.cross_encoder)

    def rerank_queries(self, questions: list[str], queries: list[str]) -> list[str]:
        """What relevance is judged against (``rerank_query``): the current retrieval query, or the question."""
        return queries if self.cfg.rerank_query == "query" else questions

    def coarse(self, queries: list[str], candidates: list[list[dict]]) -> list[list[dict]]:
        """Keep the top ``coarse_k`` of each candidate set by relevance to ``queries`` (see
        :meth:`rerank_queries`; input order when reranking is off)."""
        if not self.cfg.rerank:
            return [c[: self.cfg.coarse_k] for c in candidates]
        out = []
        for hits, scores in zip(candidates, self.relevance(queries, candidates)):
            scored = sorted(({**h, "coarse": s} for h, s in zip(hits, scores)), key=lambda h: -h["coarse"])
            out.append(scored[: self.cfg.coarse_k])
        return out

    def fine(self, questions: list[Question], labels: list[dict], refs: list[dict],
             coarse: list[list[dict]]) -> list[list[dict]]:
        """Eq. 1 for every coarse document, conflict filtering, sorted by F (:func:`medr2_hooks.rerank.fine.rerank`)."""
        return fine.rerank(self, questions, labels, refs, coarse)


def _summary(lengths: list[int], budget: int) -> dict:
    """CoT lengths in tokens: how many, mean, max, and how many reached the budget (cut short)."""
    if not lengths:
        return {"n": 0}
    return {"n": len(lengths), "mean": round(sum(lengths) / len(lengths), 1), "max": max(lengths), "budget": budget,
            "at_limit": sum(n >= budget - 1 for n in lengths)}
