"""Replay recorded transcripts through the proxy's pipeline, without an upstream.

A transcript file holds one run per line (``{"id", "messages": [...]}``, OpenAI chat
format). Each point where the client would send a request — before each assistant
message — is one turn: the messages so far go through :meth:`Pipeline.rewrite` exactly as
the proxy would send them, and the turn's figures are recorded. With ``chain`` the runs
of a file become one continuous session: the system prompt once, each later run's
messages (its first user message is the next task) appended in order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from offload.errors import InvalidInput, NotAFile
from offload.proxy.rewrite.bound import prefix_bound
from offload.proxy.rewrite.messages import Message, head_end, protect_start, validate
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.stubs.expand import expand, is_proxy_note, is_range_stub
from offload.proxy.rewrite.stubs.message_stubs import least_stub_tokens
from offload.proxy.rewrite.window import Budget, large


@dataclass(frozen=True)
class Run:
    """One recorded conversation."""

    id: str
    messages: list[Message]


@dataclass(frozen=True)
class Turn:
    """The figures of one replayed request."""

    run: str
    turn: int  # index of the assistant message the request precedes
    messages: int
    client_tokens: int
    wire_tokens: int
    stubs_made: int
    stubbed_messages: int
    windowed: bool
    emergency: bool
    prefix_kept: bool
    break_cause: str | None
    ms: float
    problems: tuple[str, ...] = ()
    recall_tokens: int = 0
    recall_hits: int = 0
    recall_read: int = 0
    loop_broken: bool = False
    ceiling_learned: int = 0
    reused_tokens: int = 0  # shared as a prefix with the previous request as sent
    # the CPU time of the store writes the turn handed to the writer (run beside the
    # upstream's prefill, not part of ``ms``; replay waits for them before the next turn)
    write_ms: float = 0.0


@dataclass
class Report:
    """Every turn and the totals."""

    n_ctx: int
    chained: bool
    turns: list[Turn] = field(default_factory=list)
    sessions: int = 0
    bound_kept: int = 0  # the most prefix-kept pairs any policy could reach (proxy.bound)

    def totals(self) -> dict[str, Any]:
        """Sums, peaks and ratios over all turns."""
        client = sum(t.client_tokens for t in self.turns)
        wire = sum(t.wire_tokens for t in self.turns)
        pairs = len(self.turns) - self.sessions
        kept = sum(1 for t in self.turns if t.prefix_kept)
        times = sorted(t.ms for t in self.turns)
        writes = sorted(t.write_ms for t in self.turns if t.write_ms)
        breaks: dict[str, int] = {}
        for t in self.turns:
            if not t.prefix_kept and t.break_cause is not None:
                breaks[t.break_cause] = breaks.get(t.break_cause, 0) + 1
        reused = sum(t.reused_tokens for t in self.turns)
        return {
            "n_ctx": self.n_ctx,
            "chained": self.chained,
            "sessions": self.sessions,
            "turns": len(self.turns),
            "client_tokens": client,
            "wire_tokens": wire,
            "wire_ratio": round(wire / client, 4) if client else 1.0,
            "peak_client_tokens": max((t.client_tokens for t in self.turns), default=0),
            "peak_wire_tokens": max((t.wire_tokens for t in self.turns), default=0),
            "prefix_kept": kept,
            "prefix_pairs": pairs,
            "prefix_stable_ratio": round(kept / pairs, 4) if pairs > 0 else 1.0,
            "prefix_bound_ratio": round(self.bound_kept / pairs, 4) if pairs > 0 else 1.0,
            "prefix_breaks": dict(sorted(breaks.items())),
            "reused_tokens": reused,
            "kv_reuse_ratio": round(reused / wire, 4) if wire else 1.0,
            "windowing_turns": sum(1 for t in self.turns if t.windowed),
            "emergency_turns": sum(1 for t in self.turns if t.emergency),
            "stubs_made": sum(t.stubs_made for t in self.turns),
            "problems": sum(len(t.problems) for t in self.turns),
            "rewrite_ms_median": round(times[len(times) // 2], 3) if times else 0.0,
            "rewrite_ms_max": round(times[-1], 3) if times else 0.0,
            "write_turns": len(writes),
            "write_ms_median": round(writes[len(writes) // 2], 3) if writes else 0.0,
            "write_ms_max": round(writes[-1], 3) if writes else 0.0,
        }

    def to_json(self) -> dict[str, Any]:
        """``{"turns": [...], "totals": {...}}``."""
        return {"turns": [asdict(t) for t in self.turns], "totals": self.totals()}


def load_runs(path: str | Path) -> list[Run]:
    """The runs of a JSONL transcript file; InvalidInput names the first bad line."""
    runs: list[Run] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:  # missing, a directory, unreadable: a path (exit 4), as add's
        raise NotAFile(f"cannot read {str(path)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not UTF-8 text, so not a JSONL transcript") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}:{number}: not JSON: {exc.msg}") from exc
        if not isinstance(data, dict) or "messages" not in data:
            raise InvalidInput(f"{path}:{number}: expected an object with messages")
        try:
            messages = validate(data["messages"])
        except InvalidInput as exc:
            raise InvalidInput(f"{path}:{number}: {exc}") from exc
        runs.append(Run(str(data.get("id", number)), messages))
    if not runs:
        raise InvalidInput(f"{path}: no runs")
    return runs


def chain_runs(runs: Sequence[Run]) -> Run:
    """One continuous session: the first run whole, then every later run's messages
    without its system prompt."""
    messages: list[Message] = list(runs[0].messages)
    for run in runs[1:]:
        messages.extend(m for m in run.messages if m["role"] not in ("system", "developer"))
    return Run(
        "+".join([runs[0].id, f"{len(runs) - 1} more"]) if len(runs) > 1 else runs[0].id, messages
    )


def turn_points(messages: Sequence[Message]) -> list[int]:
    """Indices of the assistant messages a client would have requested."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]


def replay(
    runs: Iterable[Run],
    pipeline: Pipeline,
    n_ctx: int,
    *,
    chained: bool = False,
    verify: bool = True,
    on_turn: Callable[[Turn], None] | None = None,
    alternate: bool = False,
) -> Report:
    """Replay ``runs`` (each its own session) turn by turn through ``pipeline``.

    ``alternate`` is passed to :meth:`Pipeline.rewrite` (chats paged only up to a user
    message). With ``verify`` each turn is also checked: the wire fits under the emergency ceiling,
    the protected tail arrives verbatim (unless it alone breaks the ceiling), and the
    wire expands through the store back to exactly the client's messages.
    """
    report = Report(n_ctx=n_ctx, chained=chained)
    budget = Budget.of(pipeline.settings, n_ctx)
    memo: dict[str, Any] = {}  # parsed store bodies, shared by the checks
    floors = least_stub_tokens(pipeline.counter, pipeline.stubs.proxy_tools)
    for run in runs:
        points = turn_points(run.messages)
        if not points:
            continue
        report.sessions += 1
        for k in points:
            request = run.messages[:k]
            started = time.perf_counter()
            result = pipeline.rewrite(request, n_ctx, alternate=alternate, wait_writes=False)
            ms = (time.perf_counter() - started) * 1000
            write_ms = _written(pipeline, result)
            problems = _check(pipeline, request, result, budget, memo) if verify else ()
            turn = Turn(
                run=run.id,
                turn=k,
                messages=len(request),
                **result.figures(),
                ms=round(ms, 3),
                problems=problems,
                write_ms=round(write_ms, 3),
            )
            report.turns.append(turn)
            if on_turn is not None:
                on_turn(turn)
        tokens = [pipeline.stubs.tokens(m) for m in run.messages[: points[-1]]]
        bound = prefix_bound(
            run.messages,
            tokens,
            points,
            budget.ceiling,
            pipeline.settings.tail_messages,
            stub_floor=floors[0],
            range_floor=floors[1],
        )
        report.bound_kept += bound.kept
    return report


def _written(pipeline: Pipeline, result: RewriteResult) -> float:
    """Wait for the store writes ``result`` holds (as the proxy does before the answer
    completes; the next turn and the checks read them); their CPU milliseconds."""
    before = pipeline.write_figures().cpu_s
    result.held.wait()
    return (pipeline.write_figures().cpu_s - before) * 1000


def _check(
    pipeline: Pipeline,
    request: Sequence[Message],
    result: RewriteResult,
    budget: Budget,
    memo: dict[str, Any],
) -> tuple[str, ...]:
    wire, wire_tokens = result.messages, result.wire_tokens
    problems: list[str] = []
    if wire_tokens > budget.ceiling:
        problems.append(f"wire {wire_tokens} tokens is over the ceiling {budget.ceiling}")
    wire = [m for m in wire if not is_proxy_note(m)]  # the proxy's own, not the client's
    if expand(pipeline.store, wire, cache=memo) != list(request):
        problems.append("wire does not expand to the client's messages")
    pinned = head_end(request)
    start = protect_start(request, pinned, pipeline.settings.tail_messages)
    tail = len(request) - start
    changed = [
        j
        for j, (sent, asked) in enumerate(zip(wire[-tail:], request[start:], strict=False))
        if sent != asked and not large(pipeline.stubs.tokens(asked), budget.threshold)
    ]
    if tail and changed:
        # Allowed only when the pinned head, the least the middle can cost (as laid out,
        # or one range stub for all of it) and the tail would break the ceiling (the
        # pipeline then stubs the tail's biggest messages); a large message arrives as its
        # first and last lines whatever the room (window.large).
        alone = sum(pipeline.stubs.tokens(m) for m in request[:pinned])
        alone += sum(pipeline.stubs.tokens(m) for m in request[start:])
        middle = wire[pinned : len(wire) - tail]
        ranged = [pipeline.stubs.tokens(m) for m in middle if is_range_stub(m)]
        if not ranged and start > pinned:  # what one range stub for the middle would cost
            paged = sum(pipeline.stubs.tokens(m) for m in request[pinned:start])
            stub, _ = pipeline.stubs.render_range(
                result.session_id, request, pinned, pinned, start, None, paged
            )
            ranged = [stub.tokens]
        alone += min(sum(pipeline.stubs.tokens(m) for m in middle), max(ranged, default=0))
        if alone <= budget.ceiling:
            problems.append("the recent tail was changed")
    return tuple(problems)


def render_turn(turn: Turn) -> str:
    """One line per turn for people."""
    flags = "".join(
        (
            "W" if turn.windowed else "-",
            "E" if turn.emergency else "-",
            "=" if turn.prefix_kept else "!",
        )
    )
    cause = f" {turn.break_cause}" if turn.break_cause and not turn.prefix_kept else ""
    issues = f"  PROBLEM: {'; '.join(turn.problems)}" if turn.problems else ""
    return (
        f"{turn.run[:24]:<24} #{turn.turn:<5} msgs {turn.messages:>5}  client {turn.client_tokens:>8,}"
        f"  wire {turn.wire_tokens:>6,}  stubs +{turn.stubs_made:<3} {flags}{cause}{issues}"
    )


def render_totals(totals: dict[str, Any]) -> str:
    """The totals block for people."""
    return "\n".join(
        [
            f"turns {totals['turns']} in {totals['sessions']} session(s) at n_ctx {totals['n_ctx']}",
            f"client tokens {totals['client_tokens']:,}  wire tokens {totals['wire_tokens']:,}"
            f"  ratio {totals['wire_ratio']:.3f}",
            f"peak wire {totals['peak_wire_tokens']:,} (peak client {totals['peak_client_tokens']:,})",
            f"KV reuse {totals['kv_reuse_ratio']:.1%} of the wire tokens (the prefix each request"
            " shares with the previous one as sent); prefix breaks "
            + (", ".join(f"{k} {n}" for k, n in totals["prefix_breaks"].items()) or "none"),
            f"prefix kept {totals['prefix_kept']}/{totals['prefix_pairs']}"
            f" ({totals['prefix_stable_ratio']:.1%}; the best any policy could keep:"
            f" {totals['prefix_bound_ratio']:.1%}); windowing turns {totals['windowing_turns']},"
            f" emergency {totals['emergency_turns']}; stubs made {totals['stubs_made']}",
            f"rewrite median {totals['rewrite_ms_median']} ms, max {totals['rewrite_ms_max']} ms;"
            f" store writes beside it ({totals['write_turns']} turns) median"
            f" {totals['write_ms_median']} ms, max {totals['write_ms_max']} ms CPU;"
            f" problems {totals['problems']}",
        ]
    )
