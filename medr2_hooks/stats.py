"""Paired statistics for two methods scored on the same items (per-item 0/1 correctness, same order).

- :func:`paired_bootstrap`: the 95% interval of ``mean(b) − mean(a)`` from resampling items with replacement
  (seeded, ``n`` resamples; percentile interval).
- :func:`mcnemar`: the exact two-sided McNemar test on the discordant pairs (binomial, p = 1/2): ``b01`` items
  only ``b`` gets right, ``b10`` only ``a``.
"""

from __future__ import annotations

from math import comb

import numpy as np


def _pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"paired scores need two equal, non-empty 1-D sequences; found {a.shape} and {b.shape}")
    return a, b


def paired_bootstrap(a, b, n: int = 10_000, seed: int = 0, level: float = 0.95) -> dict:
    a, b = _pair(a, b)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n, len(a)))
    diffs = (b[idx] - a[idx]).mean(axis=1)
    lo, hi = np.quantile(diffs, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"diff": float(b.mean() - a.mean()), "low": float(lo), "high": float(hi), "n": int(len(a)), "resamples": n}


def mcnemar(a, b) -> dict:
    a, b = _pair(a, b)
    b01 = int(((a == 0) & (b == 1)).sum())
    b10 = int(((a == 1) & (b == 0)).sum())
    k, m = min(b01, b10), b01 + b10
    p = 1.0 if m == 0 else min(1.0, 2 * sum(comb(m, i) for i in range(k + 1)) / 2**m)
    return {"b01": b01, "b10": b10, "p": p}
