"""One request's rewrite: the client's messages in, a bounded, cache-friendly wire out (pipeline.py), with its steps: stubs, windowing, sessions, recall, loop guard."""
