"""Evidence search: dense (FlagEmbedding + FAISS) and sparse (BM25 via bm25s, SPLADE) retrievers over a built
index, merged by union or reciprocal rank fusion. See :mod:`.searcher` for the batched search API and
:mod:`.build` for resumable index builds."""
