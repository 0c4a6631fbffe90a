"""Evidence you can score: test collections with relevance judgements, and each stage's documents scored against
them (``medr2 evidence``)."""
