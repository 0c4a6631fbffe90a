"""The evidence budget of a run and the size of its coarse candidate set S^c, in tokens.

The paper's fine reranker chooses within the window from "k documents [whose] total length significantly exceeds
the context limit". A run's budget is ``evidence_share × window`` tokens; its S^c holds ``coarse_k`` evidence units
of ``unit_tokens`` each, measured from the index (its manifest's counts and segmentation) or, for an index not
built here, the recipe's declared planning figures. :func:`size_candidates` gives the smallest ``coarse_k`` whose
S^c reaches ``ratio ×`` the budget (retrieving at least as many per retriever), so every window of Table 9 and every
cell of Table 2 has candidates to choose from; :func:`candidates` reports what a setting gives.
"""

from __future__ import annotations

import math

from .. import settings
from ..config import ConfigError
from ..errors import DataError
from ..fs import read_json


class IndexNotBuilt(DataError):
    """An index whose sizes are known only once it is built: its runs are planned without a cost estimate (as a
    benchmark whose files are not here), not refused."""


def unit_tokens(index: str, unit: str) -> tuple[float, str]:
    """Mean tokens of one evidence unit (``passage`` or ``document``) of ``index``, and where the figure comes from."""
    from ..corpus.recipe import find_recipe, load_recipe

    manifest = settings.cache_dir() / "indexes" / index / "manifest.json"
    recipe, counts, source = None, None, None
    if manifest.is_file():
        built = read_json(manifest)
        seg, counts, source = built["recipe"]["segmentation"], built["counts"], f"index {index} manifest"
    else:
        try:
            recipe = load_recipe(str(find_recipe(index)))
        except ConfigError:
            raise ConfigError(f"index {index!r} is neither built here nor a recipe in index/: its evidence size is "
                              "unknown") from None
        if recipe.planning and unit in recipe.planning:
            source = recipe.planning.get("source", "declared")
            return float(recipe.planning[unit]), f"recipe {index} planning ({source})"
        seg = {"passage_tokens": recipe.segmentation.passage_tokens,
               "passage_overlap": recipe.segmentation.passage_overlap}
        source = f"recipe {index} segmentation"
    new = seg["passage_tokens"] - seg["passage_overlap"]  # tokens a full passage adds to what its neighbour holds
    if unit == "passage":
        return float(seg["passage_tokens"]), source
    if counts is None or not counts.get("documents"):
        raise IndexNotBuilt(f"index {index!r}: document sizes are unknown until it is built (medr2 index build "
                            f"{index}; make demo builds textbooks_demo), or its recipe declares planning: "
                            "{document: N}")
    return counts["passages"] / counts["documents"] * new + seg["passage_overlap"], source


def candidates(index: str, unit: str, coarse_k: int, window: int, evidence_share: float) -> dict:
    """What a setting gives: the expected tokens of S^c against the evidence budget."""
    size, source = unit_tokens(index, unit)
    budget = evidence_share * window
    tokens = coarse_k * size
    return {"unit": unit, "unit_tokens": round(size, 1), "unit_tokens_from": source, "coarse_k": coarse_k,
            "tokens": round(tokens), "budget": round(budget), "ratio": round(tokens / budget, 2)}


def size_candidates(index: str, unit: str, window: int, evidence_share: float, ratio: float) -> int:
    """The smallest coarse_k whose S^c holds ``ratio`` times the evidence budget."""
    size, _ = unit_tokens(index, unit)
    return max(1, math.ceil(ratio * evidence_share * window / size))
