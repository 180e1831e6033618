"""Evidence on the wire: does the proxy bring back what a question needs?

Each LoCoMo conversation is played through the proxy pipeline as one chat (speaker A's
turns as user messages, speaker B's as assistant messages, each ``Speaker: text``, the
first turn of each session prefixed with its date), one request per assistant turn as a
client would send them; then each of its questions is sent as the next user message. A
question's evidence turns *reach the wire* when each one's text is on the wire verbatim:
as a message the window kept, or inside the recall block. The last column adds one
transparent-retrieval round of a scripted model that searches this session's memory with
the question (the proxy's own memory-search tool: :func:`offload.proxy.retrieval.retrieval.search_result`)
sized to the room left under the ceiling; when that room would cut the results, the request
is compacted first with their size reserved, as the proxy's loop does (``rounds_cut``,
``round_wanted_tokens`` and ``round_got_tokens`` say how the room as the wire stood cut them;
``with_one_retrieval_as_wire_stood`` is the evidence with that cut round).

Also reported: requests over the ceiling (must be 0), recall blocks and their tokens, and
the rewrite time per question with and without recall: two pipelines played side by side,
each question timed through both in turn; ``recall_added_ms_median`` is the median of the
per-question differences in CPU time (what recall adds to a turn, search included).

Usage: ``python bench/bench_recall.py LOCOMO.json [--n-ctx 8192 4096] [--limit N]
[--min-new 0 0.3]`` (``proxy.recall_min_new`` values, each played beside recall off).
LoCoMo is CC BY-NC: pass its path, never copy it into the repository.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from offload.config import ProxySettings
from offload.core.text.timeexpr import parse_time
from offload.core.tokens import MESSAGE_OVERHEAD, default_counter
from offload.proxy.retrieval.retrieval import search_result
from offload.proxy.rewrite.messages import head_end, session_key
from offload.proxy.rewrite.phases import RewriteResult
from offload.proxy.rewrite.pipeline import Pipeline
from offload.proxy.rewrite.window import Budget
from offload.store.store import Store

SCOPE = "/bench/project"


def chat_of(sample: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The conversation as chat messages, and each dialogue id's message text."""
    conv = sample["conversation"]
    a = conv["speaker_a"]
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are {conv['speaker_b']}, chatting with {a}."}
    ]
    by_id: dict[str, str] = {}
    n = 1
    while f"session_{n}" in conv:
        date = conv.get(f"session_{n}_date_time", "")
        for j, turn in enumerate(conv[f"session_{n}"]):
            text = f"{turn['speaker']}: {turn['text']}"
            if j == 0 and date:
                text = f"[{date}] {text}"
            role = "user" if turn["speaker"] == a else "assistant"
            msgs.append({"role": role, "content": text})
            by_id[turn["dia_id"]] = f"{turn['speaker']}: {turn['text']}"
        n += 1
    if msgs[1]["role"] != "user":
        msgs.insert(1, {"role": "user", "content": f"{a}: (the conversation begins)"})
    return msgs, by_id


def reached(texts: list[str], wire_text: str) -> bool:
    return bool(texts) and all(t in wire_text for t in texts)


def _figures(n_ctx: int, recall_ratio: float) -> dict[str, Any]:
    return {
        "n_ctx": n_ctx,
        "recall_ratio": recall_ratio,
        "questions": 0,
        "on_wire": 0,
        "on_wire_any": 0,
        "with_one_retrieval": 0,
        "with_one_retrieval_as_wire_stood": 0,
        "rounds": 0,
        "rounds_cut": 0,
        "round_wanted_tokens": 0,
        "round_got_tokens": 0,
        "round_compactions": 0,
        "round_got_tokens_compacted": 0,
        "round_peak_share": 0.0,
        "over_ceiling": 0,
        "recall_blocks": 0,
        "recall_tokens": 0,
        "question_ms": [],
        "question_cpu_ms": [],
    }


def _ask(
    pipe: Pipeline, st: Store, out: dict[str, Any], request: list[dict[str, Any]], texts: list[str]
) -> float:
    """One question through ``pipe``: its figures added to ``out``; the rewrite's CPU ms
    (this thread's CPU time: on a loaded machine wall time mostly measures waiting for a
    core; both are reported)."""
    budget = Budget.of(pipe.settings, out["n_ctx"])
    started, cpu = time.perf_counter(), time.thread_time()
    result = pipe.rewrite(request, out["n_ctx"])
    ms = (time.thread_time() - cpu) * 1000
    out["question_ms"].append((time.perf_counter() - started) * 1000)
    out["question_cpu_ms"].append(ms)
    out["questions"] += 1
    out["over_ceiling"] += result.wire_tokens > budget.ceiling
    out["recall_blocks"] += result.recall_tokens > 0
    out["recall_tokens"] += result.recall_tokens
    contents = [m["content"] for m in result.messages if isinstance(m.get("content"), str)]
    wire_text = "\n".join(contents)
    hit = reached(texts, wire_text)
    out["on_wire"] += hit
    out["on_wire_any"] += any(t in wire_text for t in texts)
    if not hit:
        hit = _one_round(pipe, st, out, request, texts, result)
    out["with_one_retrieval"] += hit
    return ms


def _one_round(
    pipe: Pipeline,
    st: Store,
    out: dict[str, Any],
    request: list[dict[str, Any]],
    texts: list[str],
    result: RewriteResult,
) -> bool:
    """One retrieval round of a model that searches with the question, as the proxy's
    loop answers it: within the room the wire leaves under the ceiling, unless the
    results would be cut there; then the request is compacted with their size reserved
    (``Pipeline.rewrite(reserve=...)``) and the answer with room to spare is used when it
    fits the room that leaves (else it is answered again in that room, cut).
    Figures: what the round wanted and got as the wire stood, and the peak of wire plus
    results."""
    counter, n_ctx = pipe.counter, out["n_ctx"]
    ceiling = Budget.of(pipe.settings, n_ctx).ceiling
    question = str(request[-1]["content"])

    def answer(res: RewriteResult, room: int) -> tuple[str, str, int]:
        contents = [m["content"] for m in res.messages if isinstance(m.get("content"), str)]
        found = search_result(st, counter, question, SCOPE, res.session_id, room, on_wire=contents)
        return "\n".join(contents), found, counter.count(found) + 2 * MESSAGE_OVERHEAD

    wire_text, found, got = answer(result, ceiling - result.wire_tokens)
    _, found_all, want = answer(result, 1 << 40)
    out["rounds"] += 1
    out["round_wanted_tokens"] += want
    out["round_got_tokens"] += got
    out["rounds_cut"] += want > got
    out["with_one_retrieval_as_wire_stood"] += reached(texts, wire_text + "\n" + found)
    wire_tokens = result.wire_tokens
    if want + counter.count(question) > ceiling - result.wire_tokens:
        fresh = pipe.rewrite(request, n_ctx, reserve=want + counter.count(question))
        if fresh.wire_tokens < result.wire_tokens:
            out["round_compactions"] += 1
            result, wire_tokens = fresh, fresh.wire_tokens
            wire_text, found, got = answer(result, ceiling - fresh.wire_tokens)
            if want <= ceiling - fresh.wire_tokens:
                # the proxy's loop answers once, with room to spare, before compacting
                found, got = found_all, want
            out["round_got_tokens_compacted"] += got
    peak = (wire_tokens + got) / n_ctx
    out["round_peak_share"] = max(out["round_peak_share"], round(peak, 4))
    return reached(texts, wire_text + "\n" + found)


def _finish(out: dict[str, Any]) -> dict[str, Any]:
    q = max(1, out["questions"])
    times = out.pop("question_ms")
    out["on_wire_share"] = round(out["on_wire"] / q, 4)
    out["on_wire_any_share"] = round(out["on_wire_any"] / q, 4)
    out["with_one_retrieval_share"] = round(out["with_one_retrieval"] / q, 4)
    stood = out["on_wire"] + out["with_one_retrieval_as_wire_stood"]
    out["with_one_retrieval_as_wire_stood_share"] = round(stood / q, 4)
    out["question_ms_median"] = round(statistics.median(times), 3) if times else 0.0
    cpu = out.pop("question_cpu_ms")
    out["question_cpu_ms_median"] = round(statistics.median(cpu), 3) if cpu else 0.0
    return out


def run(
    path: Path, n_ctx: int, limit: int, recall_ratio: float, min_new: float | None = None
) -> list[dict[str, Any]]:
    """The figures with recall at ``recall_ratio`` and with recall off, played side by side
    (two pipelines and stores, each question timed through both in turn): the recall
    row also carries the median of the per-question differences (the time recall adds)."""
    data = json.loads(path.read_text())[:limit]
    counter = default_counter()
    on, off = _figures(n_ctx, recall_ratio), _figures(n_ctx, 0.0)
    added: list[float] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        Store(Path(tmp) / "on.db", counter=counter) as st_on,
        Store(Path(tmp) / "off.db", counter=counter) as st_off,
    ):
        on_settings = ProxySettings(scope=SCOPE, recall_ratio=recall_ratio)
        if min_new is not None:
            on_settings = dataclasses.replace(on_settings, recall_min_new=min_new)
        pipe_on = Pipeline(st_on, on_settings, counter, scope=SCOPE)
        on["recall_min_new"] = on_settings.recall_min_new
        pipe_off = Pipeline(
            st_off, ProxySettings(scope=SCOPE, recall_ratio=0.0), counter, scope=SCOPE
        )
        for sample in data:
            msgs, by_id = chat_of(sample)
            for k in range(2, len(msgs)):
                if msgs[k]["role"] == "assistant":
                    pipe_on.rewrite(msgs[:k], n_ctx)
                    pipe_off.rewrite(msgs[:k], n_ctx)
            for j, qa in enumerate(sample["qa"]):
                texts = [by_id[e] for e in qa.get("evidence", []) if e in by_id]
                if not texts:
                    continue
                request = [*msgs, {"role": "user", "content": str(qa["question"])}]
                if j % 2:  # alternate which goes first: neither always runs on a warm cache
                    ms_off = _ask(pipe_off, st_off, off, request, texts)
                    ms_on = _ask(pipe_on, st_on, on, request, texts)
                else:
                    ms_on = _ask(pipe_on, st_on, on, request, texts)
                    ms_off = _ask(pipe_off, st_off, off, request, texts)
                added.append(ms_on - ms_off)
    rows = [_finish(on), _finish(off)]
    rows[0]["recall_added_cpu_ms_median"] = round(statistics.median(added), 3) if added else 0.0
    return rows


def stored_per_turn(path: Path, n_ctx: int, limit: int) -> dict[str, Any]:
    """The proxy's own search answer over what it stored, beside the same answer over the
    library's path: each conversation is played through a pipeline (recall off), then each
    question whose evidence turns are all off the wire is searched with
    :func:`search_result` (its whole budget) in that store and in a store of the same
    turns through ``put_many``, one entry a turn, each session's date as the entries' event
    time. Figures: the questions asked, and in how many each answer holds all the
    evidence."""
    counter = default_counter()
    out: dict[str, Any] = {"n_ctx": n_ctx, "questions": 0, "proxy_stored": 0, "put_many": 0}
    with (
        tempfile.TemporaryDirectory() as tmp,
        Store(Path(tmp) / "proxy.db", counter=counter) as st_proxy,
        Store(Path(tmp) / "turns.db", counter=counter) as st_turns,
    ):
        pipe = Pipeline(
            st_proxy, ProxySettings(scope=SCOPE, recall_ratio=0.0), counter, scope=SCOPE
        )
        for sample in json.loads(path.read_text())[:limit]:
            msgs, by_id = chat_of(sample)
            for k in range(2, len(msgs)):
                if msgs[k]["role"] == "assistant":
                    pipe.rewrite(msgs[:k], n_ctx)
            session = session_key(msgs[: head_end(msgs)])
            _put_turns(st_turns, sample, f"proxy:{session}")
            for qa in sample["qa"]:
                texts = [by_id[e] for e in qa.get("evidence", []) if e in by_id]
                question = str(qa["question"])
                wire = pipe.rewrite([*msgs, {"role": "user", "content": question}], n_ctx)
                on_wire = "\n".join(str(m.get("content")) for m in wire.messages)
                if not texts or any(t in on_wire for t in texts):
                    continue
                out["questions"] += 1
                for name, st in (("proxy_stored", st_proxy), ("put_many", st_turns)):
                    found = search_result(st, counter, question, SCOPE, session, 1 << 40)
                    out[name] += reached(texts, found)
    q = max(1, out["questions"])
    out["proxy_stored_share"] = round(out["proxy_stored"] / q, 4)
    out["put_many_share"] = round(out["put_many"] / q, 4)
    return out


def _put_turns(st: Store, sample: dict[str, Any], source: str) -> None:
    """A conversation's turns as the library stores them: one entry a turn, a
    ``put_many`` a session, its date as their event time."""
    conv = sample["conversation"]
    n = 1
    while f"session_{n}" in conv:
        when = parse_time(str(conv.get(f"session_{n}_date_time") or ""))
        texts = [f"{t['speaker']}: {t['text']}" for t in conv[f"session_{n}"]]
        st.put_many(texts, scope=SCOPE, source=source, event_time=when)
        n += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("locomo", type=Path, help="locomo_dev.json (CC BY-NC: never copied)")
    parser.add_argument("--n-ctx", type=int, nargs="+", default=[8192, 4096])
    parser.add_argument("--limit", type=int, default=1000, help="conversations to play")
    parser.add_argument(
        "--min-new",
        type=float,
        nargs="+",
        default=[ProxySettings().recall_min_new],
        help="proxy.recall_min_new values to play (each beside recall off)",
    )
    parser.add_argument(
        "--per-turn",
        action="store_true",
        help="instead: the proxy's search answer over what it stored beside one over put_many",
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]
    if args.per_turn:
        for n_ctx in args.n_ctx:
            figures = stored_per_turn(args.locomo, n_ctx, args.limit)
            figures["load_1m"] = round(load, 2)
            print(json.dumps(figures), flush=True)
        return
    for n_ctx in args.n_ctx:
        for min_new in args.min_new:
            ratio = ProxySettings().recall_ratio
            for figures in run(args.locomo, n_ctx, args.limit, ratio, min_new):
                figures["load_1m"] = round(load, 2)
                print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
