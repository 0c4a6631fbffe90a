"""LLM backends and model resolution (embedded models shipped inside PyPI packages, hub ids, local paths)."""
