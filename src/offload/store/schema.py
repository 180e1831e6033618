"""Facts of the stored format that both backends' statements share.

Below every package of the store (it imports nothing), so the SQLite statements
(search/lexical.py) and PostgreSQL's translation of them (postgres/pgsql.py) read the same
values.
"""

from __future__ import annotations

# bm25 weights of search_meta's columns (topic, summary, tags, labels, source); a body is 1.
META_WEIGHTS = (3.0, 2.0, 2.0, 3.0, 1.0)
