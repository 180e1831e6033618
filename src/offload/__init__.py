"""offload: keep an LLM agent's context window lean without losing a byte."""

__version__ = "0.1.0"
