"""Coding-agent runs whose tool calls carry whole files and long queries, derived from the
real SWE-agent trace.

Claude-style coding agents put the payload in the call: a ``write_file`` carries the whole
file, an ``edit`` the old and new text, a ``search`` a long query. The SWE-agent
demonstrations carry theirs in the observations instead, so the runs here are derived in
code, deterministically, from the real runs: every action becomes an assistant tool call
and its observation the tool result, and in every four calls one is as the trace had it,
one writes a whole real file the trace showed (its ``[File: …]`` views with the line
numbers taken off, up to ``FILE_CHARS`` characters, about 2,000 tokens), one edits it (old
and new text half a file each, the new one with real lines of another file) and one
searches with a real issue text as the query.

Run as a script to write the derived runs as a transcript for ``offload replay``::

    python tests/proxy/heavy_calls.py tests/data/traces/swe_agent_demos.jsonl OUT.jsonl
    offload replay OUT.jsonl --n-ctx 4096
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from offload.proxy.rewrite.replay import Run, load_runs

FILE_CHARS = 8000  # about 2,000 tokens of source code
MIN_FILE_CHARS = 2500
QUERY_CHARS = 1500
_LINE_NUMBER = re.compile(r"^ {0,8}\d{1,6}:", re.MULTILINE)
_COMMAND = re.compile(r"```[a-z]*\n(.*?)```", re.DOTALL)
_ISSUE = re.compile(r"ISSUE:\n(.*?)\n\nINSTRUCTIONS:", re.DOTALL)

Msg = dict[str, Any]


def file_bodies(runs: Sequence[Run]) -> list[tuple[str, str]]:
    """(path, contents) of the files the trace's observations show (``[File: path …]``
    views, line numbers removed), the largest views first, at most ``FILE_CHARS`` each."""
    seen: dict[str, str] = {}
    for run in runs:
        for msg in run.messages:
            text = msg.get("content")
            if not isinstance(text, str) or not text.startswith("[File: "):
                continue
            path = text[len("[File: ") :].split(" (", 1)[0].strip()
            body = _LINE_NUMBER.sub("", text.split("\n", 1)[-1].replace("\r\n", "\n"))
            body = body.split("\n(Open file:", 1)[0]
            if len(body) >= MIN_FILE_CHARS and len(body) > len(seen.get(path, "")):
                seen[path] = _clip(body, FILE_CHARS)
    return sorted(seen.items(), key=lambda item: (-len(item[1]), item[0]))


def issue_queries(runs: Sequence[Run]) -> list[str]:
    """The issue texts the runs were given (long queries), first seen first, deduplicated."""
    out: list[str] = []
    for run in runs:
        for msg in run.messages:
            found = _ISSUE.search(msg.get("content") or "") if msg["role"] == "user" else None
            if found:
                query = _clip(found.group(1).strip(), QUERY_CHARS)
                if query not in out:
                    out.append(query)
                break
    return out


def _clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a line end."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    return text[: cut if cut > 0 else limit]


class _Deriver:
    """Turns runs into coding-agent runs; the files and queries rotate across all runs."""

    def __init__(self, runs: Sequence[Run]) -> None:
        self.files = file_bodies(runs)
        self.queries = issue_queries(runs)
        self.calls = 0

    def _payload(self, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The call as it goes out, in a cycle of four: as the trace had it, a whole-file
        write, an edit whose old and new text are half a file each, a long search."""
        n = self.calls
        self.calls += 1
        path, body = self.files[(n // 4) % len(self.files)] if self.files else ("", "")
        if n % 4 == 1 and body:
            return "write_file", {"path": path, "content": body}
        if n % 4 == 2 and body:
            half = _clip(body, len(body) // 2)
            other = self.files[(n // 4 + 1) % len(self.files)][1]
            new = half + "\n" + _clip(other, len(other) // 4)  # real lines from another file
            return "edit", {"path": path, "old_str": half, "new_str": new}
        if n % 4 == 3 and self.queries:
            return "search", {"query": self.queries[(n // 4) % len(self.queries)], "limit": 10}
        return name, args

    def run(self, run: Run) -> Run:
        """One derived run: the head as it was, every action a tool call."""
        msgs = run.messages
        out: list[Msg] = []
        i = 0
        while i < len(msgs) and (msgs[i]["role"] == "system" or not out or i == 1):
            out.append(msgs[i])  # the system prompt and the task
            i += 1
            if out[-1]["role"] == "user":
                break
        while i < len(msgs):
            msg = msgs[i]
            answer = msgs[i + 1] if i + 1 < len(msgs) else None
            if msg["role"] == "assistant" and msg.get("tool_calls"):
                out.append(self._with_calls(msg))
            elif msg["role"] == "assistant" and answer is not None and answer["role"] == "user":
                call_id = f"call_{len(out)}_{self.calls}"
                out.append(self._as_call(msg, call_id))
                out.append({"role": "tool", "tool_call_id": call_id, "content": answer["content"]})
                i += 1
            else:
                out.append(msg)
            i += 1
        return Run(run.id + "#heavy-calls", out)

    def _with_calls(self, msg: Msg) -> Msg:
        calls = []
        for call in msg["tool_calls"]:
            fn = call["function"]
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {"raw": fn.get("arguments")}
            name, args = self._payload(fn["name"], args if isinstance(args, dict) else {})
            arguments = json.dumps(args, ensure_ascii=False)
            calls.append({**call, "function": {"name": name, "arguments": arguments}})
        return {**msg, "tool_calls": calls}

    def _as_call(self, msg: Msg, call_id: str) -> Msg:
        text = msg.get("content") or ""
        found = _COMMAND.search(text)
        command = found.group(1).strip() if found else text.strip()[-200:]
        prose = text[: found.start()].strip() if found else ""
        name, args = self._payload("bash", {"command": command})
        return {
            "role": "assistant",
            "content": prose or None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                }
            ],
        }


def heavy_call_runs(runs: Sequence[Run]) -> list[Run]:
    """Every run of ``runs`` as a coding-agent run with whole files and long queries in its
    tool calls (deterministic: the same runs give the same derived runs)."""
    deriver = _Deriver(runs)
    return [deriver.run(run) for run in runs]


def write_runs(runs: Sequence[Run], path: Path) -> Path:
    """``runs`` as a transcript file (one run per line), for ``offload replay``."""
    with path.open("w", encoding="utf-8") as fh:
        for run in runs:
            fh.write(json.dumps({"id": run.id, "messages": run.messages}, ensure_ascii=False))
            fh.write("\n")
    return path


def main(argv: Sequence[str]) -> int:
    """``heavy_calls.py TRACE OUT``: derive the runs of TRACE and write them to OUT."""
    if len(argv) != 2:
        print("usage: heavy_calls.py TRACE.jsonl OUT.jsonl", file=sys.stderr)
        return 2
    runs = heavy_call_runs(load_runs(argv[0]))
    write_runs(runs, Path(argv[1]))
    calls = sum(len(m.get("tool_calls") or ()) for run in runs for m in run.messages)
    print(f"{len(runs)} runs, {calls} tool calls -> {argv[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
