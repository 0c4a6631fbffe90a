"""Dense encoder: FlagEmbedding's ``FlagModel`` (the BGE reference implementation) for any BERT-style
encoder — CLS pooling + BGE query instruction for ``BAAI/bge-large-en-v1.5``, mean pooling for the embedded
all-MiniLM-L6-v2. Embeddings are L2-normalised, so inner product is cosine similarity.

The fingerprint (model id, weights revision, pooling, instruction, length) is written to the index manifest;
a search whose query encoder has another fingerprint is refused.
"""

from __future__ import annotations

import numpy as np

from ..llm.embedded import resolve
from ..llm.local import default_device, weights_revision


def all_devices(workers_per_gpu: int = 1) -> str | list[str]:
    """Every local GPU, each named ``workers_per_gpu`` times (FlagEmbedding and sentence-transformers then encode
    with one worker process per name), else the CPU (one process: it already uses every core)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    return [f"cuda:{i}" for i in range(torch.cuda.device_count()) for _ in range(workers_per_gpu)]


class DenseEncoder:
    def __init__(self, name: str, pooling: str = "mean", query_instruction: str | None = None,
                 max_length: int = 256, batch_size: int = 32, device: str | list[str] | None = None):
        """``device``: one device (searching), or a list of GPUs that FlagEmbedding's multi-process pool encodes
        on together (building: :func:`all_devices`)."""
        from FlagEmbedding import FlagModel

        self.name, self.pooling, self.query_instruction = name, pooling, query_instruction
        self.max_length, self.batch_size = max_length, batch_size
        self.path = resolve(name)
        device = device or default_device()
        self.model = FlagModel(self.path, pooling_method=pooling, normalize_embeddings=True,
                               use_fp16=str(device if isinstance(device, str) else device[0]).startswith("cuda"),
                               devices=device,
                               query_instruction_for_retrieval=query_instruction, batch_size=batch_size,
                               query_max_length=max_length, passage_max_length=max_length)
        self.dim = int(self.model.model.config.hidden_size)

    @property
    def fingerprint(self) -> dict:
        revision = weights_revision(self.path)
        if revision == "hub":
            revision = getattr(self.model.model.config, "_commit_hash", None) or "hub"
        return {"id": self.name, "revision": revision, "pooling": self.pooling, "dim": self.dim,
                "query_instruction": self.query_instruction, "max_length": self.max_length}

    def encode_corpus(self, texts: list[str]) -> np.ndarray:
        return np.ascontiguousarray(self.model.encode_corpus(texts, batch_size=self.batch_size), dtype=np.float32)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return np.ascontiguousarray(self.model.encode_queries(texts, batch_size=self.batch_size), dtype=np.float32)
