"""GPU-hours' inputs: measured throughputs per role or model (``--throughput ROLE_OR_MODEL=TPS`` or an experiment's
``throughput:`` table), checked as configs are (finite positive rates, keys that name the sweep's roles or models).
Apart from the estimate (:mod:`.cost`) so an experiment's config can check its table without importing it."""

from __future__ import annotations

import math

from ..config import ConfigError

MIN_RATE = 1.0  # tokens/s: below any served model's rate (a rate of 1e-300 would mean 1e296 hours)


def parse_throughputs(values: list[str] | dict | None) -> dict[str, tuple[float, float | None]]:
    """``{key: (prefill or total tokens/s, decode tokens/s or None)}`` from ``KEY=TPS`` / ``KEY=PREFILL:DECODE``
    strings (the command line) or a ``{key: TPS | "PREFILL:DECODE"}`` mapping (an experiment's ``throughput``)."""
    items = values.items() if isinstance(values, dict) else [v.split("=", 1) if "=" in v else (v, None)
                                                              for v in values or []]
    out = {}
    for key, value in items:
        try:
            rates = [float(x) for x in str(value).split(":")]
        except ValueError:
            rates = []
        if value is None or isinstance(value, bool) or not str(key).strip() or len(rates) not in (1, 2) or \
                not all(math.isfinite(r) and r >= MIN_RATE for r in rates):
            raise ConfigError(f"throughput {key}={value}: give ROLE_OR_MODEL=TOKENS_PER_S or "
                              f"ROLE_OR_MODEL=PREFILL_TPS:DECODE_TPS (finite numbers of tokens/s, >= {MIN_RATE:g})")
        out[key] = (rates[0], rates[1] if len(rates) == 2 else None)
    return out


def check_throughput_keys(throughputs: dict, lines: list) -> None:
    """A ConfigError for a throughput that names no role and no model of the sweep (a typo, or another case, would
    otherwise be ignored and its role left without GPU-hours)."""
    roles, models = {line.role for line in lines}, {line.model for line in lines}
    unknown = sorted(k for k in throughputs if k not in roles and k not in models)
    if unknown:
        raise ConfigError(f"throughput {', '.join(unknown)}: names no role or model of this sweep (roles: "
                          f"{', '.join(sorted(roles))}; models: {', '.join(sorted(models))})")
