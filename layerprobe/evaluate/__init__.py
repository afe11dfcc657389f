"""How a model variant is scored: lm-evaluation-harness tasks, and SQuAD v1.1 for extractive-QA models."""
