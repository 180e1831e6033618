"""``offload models bench``: how well a local model compresses, on five fixed samples."""

from __future__ import annotations

import argparse
import dataclasses
import functools

from offload.cli.common import emit
from offload.cli.flags import subcommand
from offload.cli.progress import Bar
from offload.config import Settings
from offload.errors import InvalidInput


def configure(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do")
    p = subcommand(
        actions,
        "bench",
        "how well a local model compresses, on five fixed samples",
        "offload models bench --endpoint http://127.0.0.1:8080/v1 --sample json",
    )
    p.add_argument("--endpoint", help="OpenAI-compatible base URL (default [local_model] base_url)")
    p.add_argument("--model", help="model name to request")
    p.add_argument("--api-key", help="bearer key for the endpoint")
    p.add_argument(
        "--sample",
        action="append",
        default=[],
        help="run only these samples (error-trace, reasoning, design-note, source-code, json)",
    )


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """--endpoint/--model/--api-key are [local_model] settings."""
    flags: dict[str, object] = {}
    for flag, key in (("endpoint", "base_url"), ("model", "model"), ("api_key", "api_key")):
        value = getattr(args, flag, None)
        if value:
            flags[f"local_model.{key}"] = value
    return flags


def run(args: argparse.Namespace, settings: Settings) -> int:
    import anyio

    from offload.llm.bench import format_table, run_bench
    from offload.llm.bench_samples import SAMPLES

    samples = SAMPLES
    if args.sample:
        known = {s.name for s in SAMPLES}
        unknown = sorted(set(args.sample) - known)
        if unknown:
            raise InvalidInput(
                f"unknown sample {', '.join(unknown)}; choose from {', '.join(sorted(known))}"
            )
        samples = tuple(s for s in SAMPLES if s.name in args.sample)
    bar = Bar("compressing samples")
    rows = anyio.run(functools.partial(run_bench, settings.local_model, samples, progress=bar))
    emit(args, {"rows": [dataclasses.asdict(r) for r in rows]}, lambda d: format_table(rows))
    return 1 if any(r.error for r in rows) else 0
