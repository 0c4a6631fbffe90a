"""Apply stage: turn a question (and, for RAG methods, its evidence) into the target model's prompt."""
