"""``offload models bench``: how well does a local model compress agent context?

Each fixed sample (:mod:`offload.llm.bench_samples`) is compressed once with the expansion
guard off, so the figures describe the model itself: ratio (output/input tokens), latency,
and key-fact retention (the fraction of a sample's facts present verbatim in the output).
The model may answer with up to twice its input (the cap does not bound the ratio); an
answer that still stops at the cap is flagged (its ratio is then a lower bound). ``calls``
counts every request sent, a retry after a timeout included; ``retries`` says how many.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from offload.config import LocalModelSettings
from offload.errors import ModelNotConfigured, UpstreamError, UpstreamUnavailable
from offload.llm.bench_samples import SAMPLES, BenchSample
from offload.llm.local_model import LocalModel


@dataclass(frozen=True)
class BenchRow:
    """One sample's figures (``error`` is set, and figures are zero, when the call failed)."""

    sample: str
    input_tokens: int
    output_tokens: int
    ratio: float  # output / input tokens; >= 1.0 means the model expanded the text
    seconds: float
    facts_kept: int
    facts_total: int
    calls: int  # requests sent, retries included
    error: str = ""
    retries: int = 0  # of ``calls``, how many repeated one that timed out or failed
    cut_off: bool = False  # an answer stopped at its cap: the ratio is a lower bound

    @property
    def retention(self) -> float:
        """Fraction of key facts present verbatim in the output."""
        return self.facts_kept / self.facts_total if self.facts_total else 1.0


def facts_kept(output: str, facts: Sequence[str]) -> int:
    """How many of ``facts`` occur verbatim in ``output``."""
    return sum(1 for fact in facts if fact in output)


async def run_bench(
    settings: LocalModelSettings,
    samples: Sequence[BenchSample] = SAMPLES,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> list[BenchRow]:
    """Compress every sample with the configured model and measure it.

    ``progress(done, total)`` is called before the first sample and after each one.

    Raises :class:`ModelNotConfigured` without a base URL and :class:`UpstreamUnavailable`
    when the endpoint cannot be reached; any other upstream failure is recorded in that
    sample's row and the bench goes on.
    """
    if not settings.base_url:
        raise ModelNotConfigured("models bench", flag="--endpoint URL")
    rows: list[BenchRow] = []
    async with LocalModel(settings) as model:
        for sample in samples:
            if progress is not None:
                progress(len(rows), len(samples))
            n_in = model.counter.count(sample.text)
            started = time.monotonic()
            sent, retried = model.requests, model.retried
            try:
                result = await model.compress(sample.text, guard=False)
            except UpstreamUnavailable:
                raise
            except UpstreamError as exc:
                seconds = time.monotonic() - started
                rows.append(
                    BenchRow(
                        sample.name,
                        n_in,
                        0,
                        0.0,
                        seconds,
                        0,
                        len(sample.facts),
                        model.requests - sent,
                        str(exc),
                        retries=model.retried - retried,
                    )
                )
                continue
            rows.append(
                BenchRow(
                    sample=sample.name,
                    input_tokens=result.input_tokens,
                    output_tokens=result.output_tokens,
                    ratio=result.output_tokens / max(1, result.input_tokens),
                    seconds=result.seconds,
                    facts_kept=facts_kept(result.text, sample.facts),
                    facts_total=len(sample.facts),
                    calls=model.requests - sent,
                    retries=model.retried - retried,
                    cut_off=result.cut_off > 0,
                )
            )
    if progress is not None:
        progress(len(rows), len(samples))
    return rows


def format_table(rows: Sequence[BenchRow]) -> str:
    """A plain-text table of the rows plus a totals line."""
    header = ("sample", "in tok", "out tok", "ratio", "seconds", "facts", "calls", "note")
    body: list[tuple[str, ...]] = []
    for r in rows:
        notes = []
        if r.error:
            notes.append(f"error: {r.error}"[:60])
        elif r.ratio >= 1.0:
            notes.append("expanded (guard would keep raw)")
        if r.cut_off:
            notes.append("stopped at its cap (ratio is a lower bound)")
        if r.retries:
            notes.append(f"{r.retries} of the calls retried")
        note = "; ".join(notes)
        body.append(
            (
                r.sample,
                str(r.input_tokens),
                str(r.output_tokens),
                f"{r.ratio:.2f}",
                f"{r.seconds:.2f}",
                f"{r.facts_kept}/{r.facts_total}",
                str(r.calls),
                note,
            )
        )
    ok = [r for r in rows if not r.error]
    retries = sum(r.retries for r in rows)
    if ok:
        n_in = sum(r.input_tokens for r in ok)
        n_out = sum(r.output_tokens for r in ok)
        kept = sum(r.facts_kept for r in ok)
        total = sum(r.facts_total for r in ok)
        body.append(
            (
                "total",
                str(n_in),
                str(n_out),
                f"{n_out / max(1, n_in):.2f}",
                f"{sum(r.seconds for r in ok):.2f}",
                f"{kept}/{total}",
                str(sum(r.calls for r in rows)),  # every request sent, failed samples' too
                f"retention {kept / max(1, total):.0%}"
                + (f"; {retries} retries" if retries else ""),
            )
        )
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(row) for row in body)])
