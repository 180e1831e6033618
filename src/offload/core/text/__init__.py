"""Text analysis shared by the store and the proxy: terms, chunks, gists, lines, time expressions, near-duplicates (pure, no I/O)."""
