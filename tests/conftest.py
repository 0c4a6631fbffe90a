from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the user's own declared benchmarks and wrapped tasks ($MEDR2_CONFIG_DIR) stay out of the tests
os.environ["MEDR2_CONFIG_DIR"] = tempfile.mkdtemp(prefix="medr2_test_config_")


@pytest.fixture(scope="session")
def data_root() -> Path:
    from medr2_hooks import settings

    root = settings.data_dir()
    assert root is not None and root.is_dir(), "tests read the shared benchmark files: set MEDR2_DATA_DIR"
    return root


@pytest.fixture(scope="session")
def gemma_path() -> str:
    from medr2_hooks.llm.embedded import resolve

    return resolve("embedded:gemma-270m")
