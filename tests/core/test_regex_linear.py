"""Every regular expression in ``offload`` runs in linear time on hostile text.

Stored bodies and upstream responses are attacker-controlled, and Python's ``re`` backtracks:
one ambiguous quantifier (``(?:[A-Z][A-Za-z0-9]*)+``) took 53 s on a 56-character token and
stalled ``offload serve``. This module finds every compiled pattern of every ``offload``
module by importing them (module globals, class attributes, and containers of patterns), plus
every inline ``re.search("literal", …)`` call, so a new pattern is guarded without anyone
registering it. Each pattern is timed on an adversarial corpus (runs of one character, runs of
alternating characters, the pattern's own literals followed by a long run without the
expected terminator, long whitespace) at two sizes, four times apart: the time may grow about
linearly (a ratio near 4), never quadratically (16) or worse. Patterns only ever used
anchored (``.match(text)`` / ``.fullmatch(text)`` with no position) are timed anchored;
every other pattern is also timed scanning (``finditer`` over the whole text).

The timings run in a child process with a watchdog, so an exponential pattern fails the test
with its name instead of hanging it. Timing is robust under load: an input processed in under
a few milliseconds at the large size passes outright (quadratic work over 16 k characters
takes far longer), and otherwise the minimum of several runs at each size is compared.
"""

from __future__ import annotations

import ast
import faulthandler
import importlib
import json
import pkgutil
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import offload

# seconds of CPU: every pattern of offload, timed on hostile inputs; the whole suite runs it
pytestmark = pytest.mark.slow

SRC = Path(offload.__file__).parent
SMALL = 1024  # characters; the large size is four times this
FAST_S = 0.002  # CPU seconds: a large input handled this fast cannot hide quadratic work
MAX_RATIO = 9.0  # linear growth gives ~4, quadratic 16
REPEATS = 5
ITEM_TIMEOUT_S = 20  # one pattern on one input; an exponential pattern never finishes
ANCHORED_METHODS = {"match", "fullmatch"}
SCAN_METHODS = {"search", "finditer", "findall", "sub", "subn", "split"}
BASE = "aB1_ .-/\"\\\t\n#=<>:'"  # runs of each, and of each character the pattern names
PAIRS = 'aB1_ .-/"\\\n:'  # alternations of two classes: where ambiguous quantifiers blow up


@dataclass(frozen=True)
class Found:
    """One pattern, where it lives, and whether it is ever used to scan."""

    where: str
    pattern: re.Pattern[str]
    scan: bool


# --- collecting every pattern -------------------------------------------------------------


def _modules() -> Iterator[Any]:
    yield offload
    for info in pkgutil.walk_packages([str(SRC)], prefix="offload."):
        yield importlib.import_module(info.name)


def _patterns_in(value: Any, depth: int = 0) -> Iterator[re.Pattern[str]]:
    if isinstance(value, re.Pattern):
        if isinstance(value.pattern, str):
            yield value
    elif depth < 3 and isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _patterns_in(item, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for item in [*value.keys(), *value.values()]:
            yield from _patterns_in(item, depth + 1)


def _usage() -> tuple[dict[str, set[str]], list[tuple[str, re.Pattern[str], str]]]:
    """How each named pattern is called anywhere in the source (``name -> methods``, with
    ``match@pos`` for a match given a position), and every inline ``re.<op>("literal")``."""
    used: dict[str, set[str]] = {}
    inline: list[tuple[str, re.Pattern[str], str]] = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method, recv = node.func.attr, node.func.value
            name = recv.id if isinstance(recv, ast.Name) else getattr(recv, "attr", None)
            if name == "re" and node.args and isinstance(node.args[0], ast.Constant):
                source = node.args[0].value
                if isinstance(source, str) and method in ANCHORED_METHODS | SCAN_METHODS:
                    where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
                    inline.append((where, re.compile(source, _flags(node)), method))
            elif isinstance(name, str) and method in ANCHORED_METHODS | SCAN_METHODS:
                positioned = method in ANCHORED_METHODS and (len(node.args) > 1 or node.keywords)
                used.setdefault(name, set()).add(f"{method}@pos" if positioned else method)
    return used, inline


def _flags(call: ast.Call) -> int:
    flags = 0
    for arg in [*call.args[2:], *(k.value for k in call.keywords if k.arg == "flags")]:
        for node in ast.walk(arg):
            if isinstance(node, ast.Attribute) and isinstance(getattr(re, node.attr, None), int):
                flags |= int(getattr(re, node.attr))
    return flags


def collect() -> list[Found]:
    """Every pattern of ``offload``, deduplicated, with how it is used."""
    used, inline = _usage()
    seen: dict[tuple[str, int], Found] = {}
    for module in _modules():
        owners: list[tuple[str, Mapping[str, Any]]] = [(module.__name__, vars(module))]
        for attr in vars(module).values():
            if isinstance(attr, type) and attr.__module__ == module.__name__:
                owners.append((f"{module.__name__}.{attr.__name__}", vars(attr)))
        for owner, namespace in owners:
            for name, value in namespace.items():
                for pat in _patterns_in(value):
                    methods = used.get(name, set()) if isinstance(value, re.Pattern) else set()
                    scan = not methods or not methods <= ANCHORED_METHODS
                    key = (pat.pattern, pat.flags)
                    if key not in seen or (scan and not seen[key].scan):
                        seen[key] = Found(f"{owner}.{name}", pat, scan)
    for where, pat, method in inline:
        key = (pat.pattern, pat.flags)
        if key not in seen:
            seen[key] = Found(where, pat, method not in ANCHORED_METHODS)
    return sorted(seen.values(), key=lambda f: f.where)


# --- the adversarial corpus ---------------------------------------------------------------


def _literals(source: str) -> list[str]:
    """Runs of literal characters in a pattern's source (outside character classes)."""
    runs: list[str] = []
    cur: list[str] = []
    i, depth = 0, 0
    while i < len(source):
        ch = source[i]
        if ch == "\\" and i + 1 < len(source):
            nxt = source[i + 1]
            if depth == 0 and not nxt.isalnum():
                cur.append(nxt)
            elif cur:
                runs.append("".join(cur))
                cur = []
            i += 2
            continue
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
        elif depth == 0 and ch not in "()|*+?{}^$.":
            cur.append(ch)
            i += 1
            continue
        if cur:
            runs.append("".join(cur))
            cur = []
        i += 1
    if cur:
        runs.append("".join(cur))
    return sorted({r for r in runs if r.strip()})


def corpus(pattern: re.Pattern[str]) -> Iterator[tuple[str, str, str]]:
    """(label, repeated unit, tail): the text is ``prefix + unit * n + tail``, ``label``
    naming it. The tail is a character that matches almost nothing, so matches fail late."""
    chars = sorted(set(BASE) | {c for c in pattern.pattern if c.isprintable()})
    for c in chars:
        yield f"run {c!r}", c, "\x00"
    for a in PAIRS:
        for b in PAIRS:
            if a != b:
                yield f"alternating {a + b!r}", a + b, "\x00"
    yield "camel blow-up", "aB", "+x"
    yield "words and spaces", "ab ", "\x00"
    yield "crlf lines", "a\r\n", "\x00"
    for lit in _literals(pattern.pattern):
        for filler in ("a", " ", '"', lit[-1]):
            yield f"{lit!r} then {filler!r}", "\x01" + lit + "\x01" + filler, "\x00"
        yield f"{lit!r} repeated", lit, "\x00"
        yield f"{lit!r} spaced", lit + " ", "\x00"


def _text(unit: str, tail: str, chars: int) -> str:
    if unit.startswith("\x01"):  # a literal prefix, then a long run of the filler
        _, prefix, filler = unit.split("\x01")
        return prefix + filler * max(1, chars // len(filler)) + tail
    return unit * max(1, chars // len(unit)) + tail


def _run(pattern: re.Pattern[str], text: str, scan: bool) -> float:
    start = time.thread_time()  # CPU time of this thread: other processes' load does not count
    if scan:
        for _ in pattern.finditer(text):
            pass
    else:
        pattern.match(text)
        pattern.fullmatch(text)
    return time.thread_time() - start


def _best(pattern: re.Pattern[str], text: str, scan: bool) -> float:
    return min(_run(pattern, text, scan) for _ in range(REPEATS))


def check(found: Found, timeout_s: float) -> list[str]:
    """Problems of one pattern: inputs on which its time grows faster than linearly.
    The process dies (naming the pattern on stdout first) if one input takes ``timeout_s``."""
    problems: list[str] = []
    modes = (False, True) if found.scan else (False,)
    for label, unit, tail in corpus(found.pattern):
        for scan in modes:
            faulthandler.dump_traceback_later(timeout_s, exit=True)
            big = _text(unit, tail, 4 * SMALL)
            t_big = _run(found.pattern, big, scan)
            if t_big < FAST_S:
                continue
            t_big = _best(found.pattern, big, scan)
            if t_big < FAST_S:
                continue
            t_small = _best(found.pattern, _text(unit, tail, SMALL), scan)
            ratio = t_big / max(t_small, 1e-6)
            if ratio > MAX_RATIO:
                mode = "scanning" if scan else "anchored"
                problems.append(
                    f"{label} ({mode}): {t_small * 1e3:.1f} ms at {SMALL} chars, "
                    f"{t_big * 1e3:.1f} ms at {4 * SMALL} (x{ratio:.0f})"
                )
    faulthandler.cancel_dump_traceback_later()
    return problems


# --- the child process and the tests ------------------------------------------------------


def _child(argv: list[str]) -> None:
    """``--child TIMEOUT [PATTERN ...]``: check the given patterns (all of offload's if none)."""
    timeout_s, extra = float(argv[0]), argv[1:]
    found = [Found(f"extra[{i}]", re.compile(p), True) for i, p in enumerate(extra)]
    for f in found or collect():
        print(json.dumps({"start": f.where}), flush=True)
        problems = check(f, timeout_s)
        print(json.dumps({"done": f.where, "problems": problems}), flush=True)
    print(json.dumps({"finished": True}), flush=True)


def run_checks(
    extra: tuple[str, ...] = (), timeout_s: float = ITEM_TIMEOUT_S
) -> dict[str, list[str]]:
    """``where -> problems`` for every pattern of offload (or only ``extra``), measured in a
    child process; a pattern that does not finish is reported as such."""
    cmd = [sys.executable, __file__, "--child", str(timeout_s), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    results: dict[str, list[str]] = {}
    started = ""
    finished = False
    for line in proc.stdout.splitlines():
        msg = json.loads(line)
        if "start" in msg:
            started = msg["start"]
        elif "done" in msg:
            results[msg["done"]] = msg["problems"]
        finished = finished or "finished" in msg
    if not finished:
        results[started or "(before any pattern)"] = [
            f"did not finish (exponential backtracking?); stderr: {proc.stderr[-2000:]}"
        ]
    return results


def test_the_collector_finds_module_class_container_and_inline_patterns() -> None:
    found = {f.where: f for f in collect()}
    assert "offload.core.text.gist._CAMEL" in found
    assert not found["offload.core.text.gist._CAMEL"].scan  # only ever fullmatched
    assert found["offload.core.text.gist._URL"].scan  # .sub scans
    assert any(w.startswith("offload.gateway.toolsearch.") for w in found)
    assert any(w.startswith("offload/gateway/config.py:") for w in found)  # inline call
    assert len(found) >= 50


def test_the_checker_flags_exponential_and_quadratic_patterns() -> None:
    exponential = r"(?:[A-Z][a-z0-9]+|[a-z][a-z0-9]*)(?:[A-Z][A-Za-z0-9]*)+$"
    quadratic = r"[a-z]+:"
    # 1 s: this pattern takes ~53 s on 56 characters, and the check feeds it thousands
    assert "did not finish" in run_checks((exponential,), timeout_s=1)["extra[0]"][0]
    problems = run_checks((quadratic,))["extra[0]"]
    assert any("(scanning)" in p for p in problems), "a scan rereading every suffix is reported"


def test_every_regex_in_offload_runs_in_linear_time_on_hostile_text() -> None:
    results = run_checks()
    bad = {where: problems for where, problems in results.items() if problems}
    assert not bad, "\n".join(f"{w}: {'; '.join(p[:3])}" for w, p in bad.items())
    assert len(results) >= 50  # every pattern was measured


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    _child(sys.argv[2:])
