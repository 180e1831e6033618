"""Checking tool arguments: each bad value is an InvalidInput that names the fix.

The JSON schemas in :mod:`offload.mcp.catalog` are advisory (clients may not enforce
them), so every handler reads its arguments through :class:`Args`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from offload.core.text.numbers import whole_number
from offload.core.text.timeexpr import parse_time
from offload.errors import EncodingError, InvalidInput
from offload.mcp.progress import MakeNotifier


class Args:
    """The arguments of one tool call, read with type checks and ranges."""

    def __init__(
        self,
        tool: str,
        raw: Mapping[str, Any] | None,
        accepted: Iterable[str],
        *,
        notify: MakeNotifier | None = None,
    ) -> None:
        self.tool = tool
        self.raw = dict(raw or {})
        # makes the call's progress notifier (mcp/progress.py); None: the client asked none
        self.notify = notify
        allowed = list(accepted)
        unknown = sorted(set(self.raw) - set(allowed))
        if unknown:
            names = ", ".join(allowed) or "none"
            raise InvalidInput(
                f"{tool}: unknown argument(s) {', '.join(unknown)}; accepted: {names}"
            )

    def _bad(self, name: str, want: str) -> InvalidInput:
        got = self.raw.get(name)
        shown = repr(got) if len(repr(got)) <= 40 else repr(got)[:40] + "…"
        return InvalidInput(f"{self.tool}: {name} must be {want}, got {shown}")

    def has(self, name: str) -> bool:
        """True when the argument was given and is not null."""
        return self.raw.get(name) is not None

    def text(self, name: str, default: str = "", *, required: bool = False) -> str:
        """A string argument."""
        value = self.raw.get(name)
        if value is None:
            if required:
                raise InvalidInput(f"{self.tool}: {name} is required")
            return default
        if not isinstance(value, str):
            raise self._bad(name, "a string")
        self._check_unicode(name, value)
        if required and not value.strip():
            raise InvalidInput(f"{self.tool}: {name} must not be empty")
        return value

    def _check_unicode(self, name: str, value: str) -> None:
        """JSON may carry a lone surrogate (``"\\ud800"``); no name, ref, path or filter
        holds one, and SQLite and the filesystem cannot take it."""
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise EncodingError(
                    f"{self.tool}: {name} is not valid Unicode at character {exc.start} "
                    "(a lone surrogate); send UTF-8 text"
                ) from None

    def ref(self) -> str:
        """The ``ref`` argument (id, label, ``ctx:sha256:…`` or a hex prefix)."""
        return self.text("ref", required=True).strip()

    def integer(self, name: str, default: int, lo: int, hi: int) -> int:
        """An integer within [lo, hi] (integral floats and digit strings accepted)."""
        value = self.raw.get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            raise self._bad(name, f"an integer in {lo}-{hi}")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and (number := whole_number(value)) is not None:
            value = number
        if not isinstance(value, int) or not lo <= value <= hi:
            raise self._bad(name, f"an integer in {lo}-{hi}")
        return value

    def number(self, name: str, lo: float, hi: float) -> float | None:
        """A number within [lo, hi], or None when absent."""
        value = self.raw.get(name)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise self._bad(name, f"a number in {lo:g}-{hi:g}") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(name, f"a number in {lo:g}-{hi:g}")
        if not math.isfinite(value) or not lo <= value <= hi:
            raise self._bad(name, f"a number in {lo:g}-{hi:g}")
        return float(value)

    def flag(self, name: str, default: bool = False) -> bool:
        """A boolean (``"true"``/``"false"`` strings accepted, as CLIs send them)."""
        value = self.raw.get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self._bad(name, "true or false")

    def strings(self, name: str) -> list[str]:
        """A list of strings; a single string counts as a list of one."""
        value = self.raw.get(name)
        if value is None:
            return []
        if isinstance(value, str):
            self._check_unicode(name, value)
            return [value] if value.strip() else []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(name, "a list of strings")
        for v in value:
            self._check_unicode(name, v)
        return [v for v in value if v.strip()]

    def when(self, name: str) -> float | None:
        """A date or time (ISO 8601, or a date in words such as ``8 May 2023``) as epoch
        seconds (UTC when it names no offset), or None when absent."""
        value = self.text(name).strip()
        if not value:
            return None
        at = parse_time(value)
        if at is None:
            raise self._bad(name, "a date such as 2023-05-08 or 2023-05-08T13:56:00Z")
        return at

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        """One of ``choices``."""
        value = self.text(name, default)
        if value not in choices:
            raise self._bad(name, "one of " + ", ".join(choices))
        return value


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(tool: str, value: str) -> float:
    """``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` or bare seconds, in seconds."""
    text = value.strip().lower()
    unit = _UNITS.get(text[-1:], 0.0)
    number = text[:-1] if unit else text
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInput(f"{tool}: older_than must look like 30m, 12h or 7d, got {value!r}")
    return seconds
