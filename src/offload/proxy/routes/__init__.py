"""The HTTP exchanges: chat completions, Anthropic Messages, models, stats and passthrough."""
