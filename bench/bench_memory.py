"""Paged-out memory, read back: needles found by one search and read by one small read, and
how many calls restore a paged range as a transcript.

The chained SWE-agent replay (every run of the file as one session) goes through the proxy
pipeline at n_ctx 8192 into a store scope standing for the project's default scope (what
the MCP server and the CLI search when started in the project). Then:

- needles: 50 distinctive strings from messages paged off the wire (evenly spaced over the
  paged run: in each message, its longest word of 8+ characters found in no other paged
  message). Found: one ``Store.search`` in that scope (the MCP ``search`` tool's call, top
  5) has a hit whose chunk holds it. Read: the read MCP ``search`` suggests for a hit
  (``read(ref, offset=<5 lines before the matching line>, max_tokens=2000)``, through the
  same ``core.text.lines.read_lines_within``) holds it; it never costs more than 2,000 tokens.
  Also counted: the top 5's hits over all needles, and how many distinct chunk texts they
  show (copies of one chunk in several entries crowd the others out).
- restore: the calls that read the final range stub's messages back as transcripts (one
  ``offload cat`` / MCP ``checkout`` per part along its ``earlier`` chain).

Usage: ``python bench/bench_memory.py TRACES_DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from offload.config import ProxySettings
from offload.core.text.lines import read_lines_within
from offload.core.tokens import default_counter
from offload.proxy.rewrite.messages import content_text
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.replay import chain_runs, load_runs, replay
from offload.store.models import Filters
from offload.store.store import Store

SCOPE = "/bench/project"
_WORD = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{7,40}\b")


def needles(paged: list[dict[str, Any]], n: int) -> list[str]:
    """One distinctive word from each of ``n`` evenly spaced paged messages."""
    counts: dict[str, int] = {}
    words = []
    for msg in paged:
        found = set(_WORD.findall(content_text(msg)))
        words.append(found)
        for w in found:
            counts[w] = counts.get(w, 0) + 1
    out: list[str] = []
    step = max(1, len(paged) // n)
    order = list(range(0, len(paged), step)) + [i for i in range(len(paged)) if i % step]
    for i in order:
        unique = sorted(
            (w for w in words[i] if counts[w] == 1),
            key=lambda w: (not any(c.isdigit() or c == "_" for c in w), -len(w), w),
        )
        if unique and unique[0] not in out:
            out.append(unique[0])
        if len(out) == n:
            break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", type=Path)
    args = parser.parse_args()
    counter = default_counter()
    run = chain_runs(load_runs(args.traces / "swe_agent_demos.jsonl"))
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db", counter=counter) as st:
        pipe = Pipeline(st, ProxySettings(scope=SCOPE), counter, scope=SCOPE)
        replay([run], pipe, 8192, chained=True, verify=False)
        live = next(iter(pipe._live._items.values()))  # the one session
        state = live.state
        paged = run.messages[state.layout.head : state.layout.paged]
        picked = needles(paged, 50)
        found = read_ok = 0
        worst = 0
        shown = distinct = 0  # the top 5's hits, and how many distinct chunk texts they show
        for needle in picked:
            hits = st.search(needle, Filters(scope=SCOPE), limit=5)
            shown += len(hits)
            distinct += len({h.text for h in hits})
            hit = next((h for h in hits if needle in h.text), None)
            if hit is None:
                continue
            found += 1
            body = st.body(hit.entry)
            # the read MCP search suggests for its first hit (tools_read.search's jump)
            at = max(1, hit.match_line - 5)
            window = read_lines_within(body, at, max_tokens=2000, count=counter.count)
            tokens = counter.count(window.text)
            worst = max(worst, tokens)
            read_ok += needle in window.text and tokens <= 2000
        calls = 0
        cursor = state.range.ref if state.range is not None else None
        while cursor is not None:
            entry = st.resolve(cursor, SCOPE)
            st.body(entry)  # one call reads a whole part as a transcript
            calls += 1
            cursor = json.loads(st.body(entry, original=True))["earlier"]
        print(
            json.dumps(
                {
                    "needles": len(picked),
                    "found_by_one_search": found,
                    "read_at_hit_within_2k": read_ok,
                    "largest_read_tokens": worst,
                    "top5_hits_shown": shown,
                    "top5_distinct_texts": distinct,
                    "paged_messages": len(paged),
                    "range_restore_calls": calls,
                    "load_1m": round(os.getloadavg()[0], 2),
                }
            )
        )


if __name__ == "__main__":
    main()
