"""Algorithm 2 of the paper (evidence assessment and iterative retrieval loop), over every question of a task at
once, each stage batched across the questions still looping and cached by the toolbox. Its lines, where they are:

- lines 1–3: ``state`` holds, per question, the iterations run; ``for t in 1..T`` over the questions not stopped
  (``T = iterations``; a run without the CoT generator makes one pass: no CoT, no accuracy, no stop rule).
- line 4: the iteration's query (:func:`medr2_hooks.reformulate.iteration_query`: q_EBM, then the previous CoT from
  t = 2), retrieval, the coarse rerank (S^c) and the fine rerank of Eq. 1 with the conflict filter (S^f,
  :func:`medr2_hooks.rerank.fine.rerank`).
- line 6: SelectTopK — the best documents that fit the window's evidence share
  (:func:`medr2_hooks.pipeline.packing.select_evidence`).
- line 7: the CoT generator over the question, its options and the selected evidence.
- line 9: Acc_t, whether the CoT's answer is M_F's reference answer (the paper's "answer accuracy": the gold answer
  never enters the loop).
- line 10: μ_t, the L2 shift between the centroids of consecutive coarse sets' embeddings (:func:`.stability`).
- lines 12–14: stop when Acc_t / μ_t > δ (:func:`.should_stop`; the rules where the paper is silent are in
  :mod:`medr2_hooks.loop`); a question whose search found nothing stops too (another round would find nothing).
- line 17: without a stop, iteration T's evidence and CoT are kept.

Med-R²-CoT (``cot_in_first_query``) seeds iteration 1's query with a CoT from the question alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..data.record import Question
from ..pipeline.packing import evidence_record, select_evidence
from ..reformulate import iteration_query
from . import centroid, should_stop, stability

if TYPE_CHECKING:
    from ..evidence.stage_runs import StageRuns
    from ..pipeline.toolbox import StageToolbox


def iterate(m: "StageToolbox", questions: list[Question], runs: "StageRuns | None" = None) -> list[dict]:
    """Alg. 2 for every question together (the algorithm's line numbers in the comments); returns, per question, the
    kept iteration's evidence and CoT and the history. ``runs`` collects each stage's ranked documents per question
    and iteration."""
    cfg = m.cfg
    labels = m.classify(questions)
    reforms = m.reformulate(questions, labels)
    refs = m.references(questions) if (cfg.rerank or cfg.cot) else [None] * len(questions)
    state = [{"iterations": [], "cot": None, "prev_centroid": None, "done": False} for _ in questions]
    if cfg.cot and cfg.cot_in_first_query:  # Med-R²-CoT: a CoT from the question alone seeds iteration 1
        for s, c in zip(state, m.cots([[q.question, q.options, []] for q in questions])):
            s["cot"] = c["cot"]
    rounds = cfg.iterations if cfg.cot else 1
    for t in range(1, rounds + 1):  # lines 2-3: every query (together), t = 1..T
        active = [i for i, s in enumerate(state) if not s["done"]]
        if not active:
            break
        # line 4: reformulate (§3.1), search, appraise (§3.2): coarse rerank, then Eq. 1 and the conflict filter
        queries = [iteration_query(questions[i].question, reforms[i], state[i]["cot"], t, cfg.cot_in_first_query,
                                   questions[i].options, cfg.query) for i in active]
        candidates = m.retrieve(queries, [questions[i].exclude_pmid for i in active])
        coarse = m.coarse(m.rerank_queries([questions[i].question for i in active], queries), candidates)
        ranked = m.fine([questions[i] for i in active], [labels[i] for i in active], [refs[i] for i in active], coarse)
        selected = [select_evidence(m, hits) for hits in ranked]  # line 6: SelectTopK(S^f, k, w)
        if cfg.cot:  # line 7: q^CoT(t) = M_CoT(q, S^f_top)
            cots = m.cots([[questions[i].question, questions[i].options, [h["text"] for h in sel]]
                           for i, sel in zip(active, selected)])
        else:
            cots = [{"cot": None, "answer": None} for _ in active]
        for j, i in enumerate(active):
            st = state[i]
            cen = None
            if cfg.cot and "dense" in m.searcher.manifest:  # line 10: μ_t, the shift of S^c's centroid
                with m.stage("stability"):
                    emb = m.searcher.embeddings([h["passage"] for h in coarse[j]])
                cen = centroid(np.asarray(emb)) if len(emb) else None
            mu = stability(cen, st["prev_centroid"])
            acc = None  # line 9: Acc_t, the CoT's answer against M_F's reference answer (never the gold)
            if cfg.cot and cots[j]["answer"] and refs[i] is not None and refs[i]["label"]:
                acc = float(max(cots[j]["answer"], key=cots[j]["answer"].get) == refs[i]["label"])
            st["iterations"].append({
                "t": t, "query": queries[j], "doc_ids": [h["doc_id"] for h in candidates[j]],
                "coarse_ids": [h["doc_id"] for h in coarse[j]], "selected": [evidence_record(h) for h in selected[j]],
                "mu": mu, "acc": acc, "cot": cots[j]["cot"], "cot_answer": cots[j]["answer"],
            })
            if runs is not None:
                runs.add_iteration(questions[i].id, t, candidates[j], coarse[j], ranked[j] if cfg.rerank else None,
                                   selected[j])
            st["evidence"] = selected[j]  # line 17: without a stop, iteration T's evidence and CoT are kept
            st["cot"], st["prev_centroid"] = cots[j]["cot"], cen
            if acc is not None and should_stop(acc, mu, cfg.delta):  # lines 12-14: Acc_t / μ_t > δ: keep t, stop
                st["done"], st["stopped_at"] = True, t
            elif not candidates[j]:
                st["done"], st["stopped_at"] = True, t  # nothing retrieved: another round would find the same nothing
    for s, lab, ref, reform in zip(state, labels, refs, reforms):
        s.update(labels=lab, reference=ref, reformulation=reform)
        s.setdefault("stopped_at", None)
        s.pop("prev_centroid")
    return state
