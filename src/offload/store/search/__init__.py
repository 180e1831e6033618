"""A search, step by step: the pipeline (pipeline.py), its candidates, scores, context and page."""
