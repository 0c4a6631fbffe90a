"""Ratios that hold still: the sides of a ratio take turns, round after round, until each has run for at least
``min_seconds`` in all (and ``min_rounds`` rounds); each round gives one ratio, and a bench prints their median with
the least and the most. A busy moment of the machine then falls on both sides of a round, and a regression can be
told from noise by a range that no longer holds the old median."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved(fns: dict[str, Callable[[], object]], min_seconds: float = 1.0, min_rounds: int = 5,
                max_rounds: int = 10_000) -> dict[str, list[float]]:
    """Each function's seconds per round, the functions called in turn within every round."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    rounds = 0
    while rounds < max_rounds and (rounds < min_rounds or min(sum(t) for t in times.values()) < min_seconds):
        for name, fn in fns.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
        rounds += 1
    return times


def ratio(times: dict[str, list[float]], numerator: str, denominator: str) -> dict:
    """Per-round ``numerator / denominator`` seconds: median, min, max and rounds (above 1: the denominator side is
    faster)."""
    per_round = [a / b for a, b in zip(times[numerator], times[denominator])]
    return {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round),
            "rounds": len(per_round)}


def median_seconds(times: dict[str, list[float]], name: str) -> float:
    return statistics.median(times[name])


def shown(r: dict) -> str:
    """``0.93x (0.88-0.97, 12 rounds)``."""
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f}, {r['rounds']} rounds)"
