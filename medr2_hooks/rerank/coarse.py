"""Coarse rerank: a relevance score per (question, document) pair; the top ``k`` go on to fine reranking.

- ``llm``: pointwise LLM judgement, the probability of "yes" against "no" for "is this document relevant
  to the question?" (closed-set scoring) — the embedded default.
- ``cross_encoder``: FlagEmbedding ``FlagReranker`` (``BAAI/bge-reranker-v2-m3`` by hub id),
  ``compute_score(pairs, normalize=True)`` (sigmoid scores).
"""

from __future__ import annotations

from ..llm.closed_set import label_distribution


def relevance_prompt(question: str, document: str) -> str:
    return (f"Document: {document}\n\nQuestion: {question}\n"
            "Is the document relevant to the question (yes or no)? Answer:")


class LLMReranker:
    def __init__(self, backend, max_doc_tokens: int = 384):
        self.backend, self.max_doc_tokens = backend, max_doc_tokens
        self.model_id = f"llm:{backend.model_id}"

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        prompts = [relevance_prompt(q, self.backend.truncate(d, self.max_doc_tokens)) for q, d in pairs]
        return [float(p[0]) for p in label_distribution(self.backend, prompts, ["yes", "no"], role="relevance")]


class CrossEncoderReranker:
    """``max_length``: query + document tokens read per pair; default the model's own maximum (bge-reranker-v2-m3:
    8192), so a long query (question, reformulation and CoT) is not cut at 512 tokens. ``overlong(pairs)`` counts
    the pairs that still exceed it."""

    def __init__(self, model: str = "BAAI/bge-reranker-v2-m3", max_length: int | None = None, batch_size: int = 32,
                 device: str | None = None):
        from FlagEmbedding import FlagReranker
        from transformers import AutoTokenizer

        from ..llm.embedded import resolve
        from ..llm.local import default_device, weights_revision

        path = resolve(model)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        max_length = max_length or min(int(self.tokenizer.model_max_length), 8192)
        self.max_length = max_length
        device = device or default_device()
        self.reranker = FlagReranker(path, use_fp16=device.startswith("cuda"), devices=device, max_length=max_length,
                                     batch_size=batch_size)
        self.model_id = f"cross_encoder:{model}@{weights_revision(path)}"

    def overlong(self, pairs: list[tuple[str, str]]) -> int:
        encoded = self.tokenizer([q for q, _ in pairs], [d for _, d in pairs])["input_ids"]
        return sum(len(ids) > self.max_length for ids in encoded)

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        scores = self.reranker.compute_score([list(p) for p in pairs], normalize=True)
        return [float(s) for s in (scores if isinstance(scores, list) else [scores])]
