"""Methods as compositions of stages: Med-R² (and, by switching stages off, its ablations and vanilla RAG)."""
