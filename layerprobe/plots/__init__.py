"""Figures drawn from result objects only (matplotlib, Agg): never torch, transformers or lm_eval."""
