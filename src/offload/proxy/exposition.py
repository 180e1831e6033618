"""The proxy's counters as Prometheus text, by Prometheus conventions.

One family per meaning: ``offload_proxy_<what>_total`` counts since the store began (the
counters are persisted across restarts); this process's own start is the gauge
``offload_proxy_start_time_seconds``, so "since start" is ``x - x @ start`` and ``rate()``
works as usual. Per-session figures have names of their own (``offload_proxy_session_*``),
so summing a family never counts a request twice. Units are in the names (``_tokens``,
``_seconds``); a family that counts events names what it counts (``_requests``).

To add a counter: add its key to ``metrics.COUNTERS`` and ``metrics.HELP``; its family is
``offload_proxy_<key>_total`` unless :data:`NAMES` renames it (when the key alone does not
say its unit or what it counts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PREFIX = "offload_proxy_"
#: Family names (before ``_total``) for keys that alone do not say what they count.
NAMES = {
    "tokens_saved": "saved_tokens",
    "windowed": "windowed_requests",
    "emergency": "emergency_trimmed_requests",
    "prompt_tokens": "upstream_prompt_tokens",
    "cached_tokens": "upstream_cached_tokens",
    "cache_reports": "cache_reporting_responses",
    "recall_hits": "recalled_messages",
    "recall_read": "recalled_refs_read",
    "loop_breaks": "loop_broken_requests",
    "ceilings_learned": "client_compactions",
    "retrieval_rounds": "retrieval_rounds",
    "retrieval_reads": "retrieval_read_calls",
    "retrieval_searches": "retrieval_search_calls",
    "retrieval_bad_calls": "retrieval_bad_calls",
    "retrieval_answers": "retrieval_answered_requests",
    "retrieval_exhausted": "retrieval_exhausted_requests",
}
#: Counted by cause instead (``offload_proxy_prefix_breaks_total{cause}``): the unlabelled
#: total would be the sum of the same family.
BY_CAUSE = "prefix_breaks"
#: The per-session families: bounded by the proxy's ``max_sessions``.
SESSION_COUNTERS = ("requests", "client_tokens", "wire_tokens", "tokens_saved", "reused_tokens")
SINCE = "since the store began"


def family(key: str) -> str:
    """The counter family of a counter key, ``_total`` included."""
    return f"{PREFIX}{NAMES.get(key, key)}_total"


def session_family(key: str) -> str:
    """The per-session counter family of a counter key."""
    return f"{PREFIX}session_{NAMES.get(key, key)}_total"


def render(
    snap: Mapping[str, Any],
    help_: Mapping[str, str],
    extra_gauges: Mapping[str, tuple[str, float]] | None = None,
) -> str:
    """Prometheus text of a :meth:`offload.proxy.metrics.Metrics.snapshot`."""
    out: list[str] = []
    totals = snap["cumulative"]
    for key, value in totals["counters"].items():
        if key == BY_CAUSE:
            samples = [(f'{{cause="{_label(c)}"}}', n) for c, n in totals["breaks"].items()]
            _family(out, family(key), "counter", f"{help_[key]}, by cause, {SINCE}", samples)
        else:
            _family(out, family(key), "counter", f"{help_[key]}, {SINCE}", [("", value)])
    for key in SESSION_COUNTERS:
        samples = [
            (f'{{session="{_label(sid)}"}}', s["cumulative"]["counters"][key])
            for sid, s in snap["sessions"].items()
        ]
        help_text = f"{help_[key]}, per session (the most recent sessions only), {SINCE}"
        _family(out, session_family(key), "counter", help_text, samples)
    ratio = totals["cache_reuse_ratio"]
    _family(
        out,
        f"{PREFIX}cache_reuse_ratio",
        "gauge",
        f"upstream-cached prompt tokens / upstream prompt tokens, {SINCE}",
        [] if ratio is None else [("", f"{ratio:.6f}")],
    )
    kv = totals["kv_reuse_ratio"]
    _family(
        out,
        f"{PREFIX}kv_reuse_ratio",
        "gauge",
        "wire tokens shared as a prefix with the session's previous request / wire tokens,"
        f" {SINCE}",
        [] if kv is None else [("", f"{kv:.6f}")],
    )
    gauges = {
        "start_time_seconds": ("unix time this proxy process started", snap["started_at"]),
        **(extra_gauges or {}),
    }
    for name, (text, value) in gauges.items():
        _family(out, PREFIX + name, "gauge", text, [("", _number(value))])
    return "\n".join(out) + "\n"


def _family(
    out: list[str], name: str, kind: str, help_: str, samples: Iterable[tuple[str, Any]]
) -> None:
    out.append(f"# HELP {name} {_help(help_)}")
    out.append(f"# TYPE {name} {kind}")
    out.extend(f"{name}{labels} {value}" for labels, value in samples)


def _number(value: float) -> str:
    """Exact: whole numbers as integers, others at full precision (``:g`` rounds a unix
    time to the nearest 10,000 s)."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
