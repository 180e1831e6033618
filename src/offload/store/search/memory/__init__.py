"""The in-process copies a long-lived store searches: entries, the chunk map and a BM25 index of the chunks, kept fresh before each search."""
