"""A strict reading of Prometheus text exposition for the tests of ``/metrics``.

``prometheus_client``'s parser reads the samples; on top of it every family must have HELP
and TYPE, a counter's name must end in ``_total``, and no family may mix label sets (a
family whose series nest, such as a total beside its per-session parts, double-counts
under ``sum()``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass
class Family:
    """One metric family as the exposition declares it."""

    name: str
    kind: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


def read(text: str) -> dict[str, Family]:
    """The families of ``text`` by name (counters keep their ``_total``); raises
    AssertionError naming the first convention ``text`` breaks."""
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            assert name not in helps, f"two HELP lines for {name}"
            assert help_.strip(), f"{name} has an empty HELP"
            helps[name] = help_
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert name not in types, f"two TYPE lines for {name}"
            types[name] = kind
    assert set(helps) == set(types), (
        f"HELP without TYPE or TYPE without HELP: {helps.keys() ^ types.keys()}"
    )
    families = {n: Family(n, types[n], helps[n]) for n in types}
    for metric in text_string_to_metric_families(text):
        for sample in metric.samples:
            assert sample.name in families, f"{sample.name} has no HELP/TYPE of its own"
            families[sample.name].samples.append((dict(sample.labels), float(sample.value)))
    for fam in families.values():
        assert _NAME.fullmatch(fam.name), fam.name
        assert fam.kind in ("counter", "gauge"), f"{fam.name}: {fam.kind}"
        if fam.kind == "counter":
            assert fam.name.endswith("_total"), f"counter {fam.name} does not end in _total"
            assert all(v >= 0 for _, v in fam.samples), f"{fam.name} has a negative count"
        else:
            assert not fam.name.endswith("_total"), f"gauge {fam.name} is named like a counter"
        label_sets = {frozenset(labels) for labels, _ in fam.samples}
        assert len(label_sets) <= 1, (
            f"{fam.name} mixes label sets {label_sets}: sum() double-counts"
        )
        keys = [tuple(sorted(labels.items())) for labels, _ in fam.samples]
        assert len(keys) == len(set(keys)), f"{fam.name} repeats a series"
    return families


def value(families: dict[str, Family], name: str, **labels: str) -> float:
    """The one sample of ``name`` with exactly ``labels``."""
    found = [v for ls, v in families[name].samples if ls == labels]
    assert len(found) == 1, f"{name}{labels}: {families[name].samples}"
    return found[0]
