"""Counts in words: a number and its noun in the number it takes (pure).

Every count the CLI and the dashboard print goes through :func:`counted`, so one entry is
"1 entry" and not "1 entries".
"""

from __future__ import annotations


def plural(noun: str) -> str:
    """The plural of an English ``noun`` by the regular rules (entry -> entries, match ->
    matches, hit -> hits); its last word when ``noun`` is several ("orphan block")."""
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def counted(n: int, noun: str, many: str = "", *, grouped: bool = False) -> str:
    """``n`` followed by ``noun`` when it is 1, else by its plural (``many`` when the
    plural is irregular): "1 hit", "0 hits", "2 entries"; ``grouped``: thousands with
    commas ("1,024 tokens")."""
    number = f"{n:,}" if grouped else str(n)
    return f"{number} {noun if n == 1 else (many or plural(noun))}"


def stage_progress(stage: str, done: int, total: int, size: int, elapsed: float) -> str:
    """One progress update of a stage of work over an input of ``size`` bytes, of which
    ``done`` of ``total`` units are done: ``analysing  42%  21.0/50.0 MB  3.2 MB/s``."""
    share = min(done, total) / total if total else 1.0
    mb = size * share / 1e6
    rate = f"{mb / elapsed:.1f} MB/s" if elapsed > 0 else "- MB/s"
    return f"{stage} {100 * share:3.0f}%  {mb:.1f}/{size / 1e6:.1f} MB  {rate}"
