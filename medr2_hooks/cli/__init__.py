"""The ``medr2`` console script: sub-commands ``data``, ``eval``, ``index``, ``models``, ``tasks``."""
