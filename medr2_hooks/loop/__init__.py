"""Alg. 2 bookkeeping: semantic stability μ_t and the termination rule.

``μ_t = ‖mean E(S_c^t) − mean E(S_c^{t−1})‖`` — the shift of the coarse set's embedding centroid between
consecutive iterations. Stop at iteration t when ``Acc_t / μ_t > δ`` (δ: ``MethodConfig.delta``). Rules where the paper is
silent: at t = 1 there is no previous set, so μ_1 is undefined and iteration 1 never stops the loop;
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
