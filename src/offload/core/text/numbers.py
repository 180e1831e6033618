"""Reading a whole number written as text, bounded (pure).

``str.isdigit`` is true of characters ``int`` cannot read (``"²"``, ``"①"``), and ``int``
refuses a digit string past 4,300 digits (CPython's guard against quadratic conversion):
``s.isdigit() and int(s)`` raises ``ValueError`` on text anyone can send. Every number a
request, a tool argument or stored content spells goes through :func:`whole_number`.
"""

from __future__ import annotations

#: More digits than any count, offset or status offload reads (``int64`` has 19).
MAX_DIGITS = 18


def whole_number(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """The non-negative integer ``text`` spells in ASCII digits (blanks around it
    allowed), or None: empty, a sign, another script's digits, or more than
    ``max_digits`` digits (too large for any range offload accepts)."""
    digits = text.strip()
    if not digits or len(digits) > max_digits or not digits.isascii() or not digits.isdigit():
        return None
    return int(digits)
