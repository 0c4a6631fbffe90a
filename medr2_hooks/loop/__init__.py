"""Alg. 2 bookkeeping: semantic stability μ_t and the termination rule.

``μ_t = ‖mean E(S_c^t) − mean E(S_c^{t−1})‖`` — the shift of the coarse set's embedding centroid between
consecutive iterations. Stop at iteration t when ``Acc_t / μ_t > δ`` (δ: ``MethodConfig.delta``). Rules where the
paper is silent: at t = 1 there is no previous set, so μ_1 is undefined and iteration 1 never stops the loop;
μ_t = 0 (the same set again) stops the loop when Acc_t > 0 (the ratio is +∞) and not when Acc_t = 0
(0/0 is taken as 0); without a stop, the result of iteration T is kept.
"""

from __future__ import annotations

import math

import numpy as np

def centroid(embeddings: np.ndarray) -> np.ndarray | None:
    return None if len(embeddings) == 0 else np.asarray(embeddings, dtype=np.float64).mean(axis=0)


def stability(current: np.ndarray | None, previous: np.ndarray | None) -> float | None:
    """μ_t, or None at t = 1 (no previous centroid) or when a set is empty."""
    if current is None or previous is None:
        return None
    return float(np.linalg.norm(current - previous))


def ratio(acc: float, mu: float | None) -> float | None:
    if mu is None:
        return None
    if mu == 0.0:
        return math.inf if acc > 0 else 0.0
    return acc / mu


def should_stop(acc: float, mu: float | None, delta: float) -> bool:
    r = ratio(acc, mu)
    return r is not None and r > delta


def stop_under(iterations: list[dict], delta: float) -> int | None:
    """The iteration a recorded loop (its ``iterations``: ``t``, ``acc``, ``mu``, ``doc_ids``) stops at under
    ``delta``, or None when it does not stop within them. Exact for any δ up to the one the loop ran with; for a
    larger δ, None for a loop that stopped means it would have run on past what was recorded."""
    for it in iterations:
        if it["acc"] is not None and should_stop(it["acc"], it["mu"], delta):
            return it["t"]
        if not it["doc_ids"]:  # nothing retrieved: another round would find the same nothing
            return it["t"]
    return None


SENSITIVITY = (0.25, 0.5, 1.0, 2.0, 4.0)  # multiples of δ the pre-pass record recomputes the stops for


def delta_sensitivity(states: list[dict], delta: float) -> dict:
    """Per multiple ``f`` of δ: where each item's recorded loop stops under ``f·δ`` (``stopped_at`` counts per
    iteration; ``ran_all``: no stop within the rounds; ``beyond_record``, for f > 1 only: items the recorded loop
    stopped that would have gone on). Acc is 0 or 1, so a stop needs agreement and μ_t < 1/δ."""
    out = {}
    for f in SENSITIVITY:
        counts: dict[str, int] = {}
        for s in states:
            t = stop_under(s["iterations"], f * delta)
            key = str(t) if t is not None else ("beyond_record" if f > 1 and s["stopped_at"] else "ran_all")
            counts[key] = counts.get(key, 0) + 1
        out[f"{f:g}"] = {"delta": round(f * delta, 4), **dict(sorted(counts.items()))}
    return out
