"""What ``offload setup CLIENT`` writes into each agent client's config, and how it is
taken out again (pure, no I/O).

A client is a list of config files (:mod:`offload.core.clients.table`), each a path
relative to the user's home, a format and an entry: the MCP server (stdio command or the
``serve`` URL) or the model provider pointing at the proxy. :func:`apply` turns a file's
old text into its new text; :func:`wired` says whether a text already holds the entry;
:func:`added` records what an entry replaced and :func:`undo` takes offload's entries out
of the file as it is now (after the client may have rewritten it), putting back what they
replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offload.core.clients.edits import (
    Value,
    dig,
    json_set,
    json_unset,
    parse,
    present,
    toml_set_table,
    toml_unset_table,
    yaml_key_text,
    yaml_set_item,
    yaml_set_key,
    yaml_unset_item,
    yaml_unset_key,
)
from offload.core.clients.model import NAME, Client, ConfigFile, Wiring
from offload.core.clients.table import CLIENTS
from offload.core.clients.yaml_blocks import Nested, nested_set, nested_unset
from offload.core.clients.yaml_blocks import current as nested_current
from offload.errors import InvalidInput

__all__ = [
    "CLIENTS",
    "NAME",
    "Client",
    "ConfigFile",
    "Conflict",
    "Wiring",
    "added",
    "apply",
    "current",
    "leftover",
    "undo",
    "wired",
]


def _nested(file: ConfigFile) -> Nested | None:
    """The YAML shape one level down (Hermes, Goose, Continue), else None."""
    if file.fmt != "yaml" or len(file.at) != 2:
        return None
    return Nested(file.at[0], file.at[1], file.match)


def current(file: ConfigFile, doc: Any) -> Value:
    """offload's entry in a parsed document, or None."""
    spec = _nested(file)
    if spec is not None:
        return nested_current(doc, spec)
    if file.match:
        items = dig(doc, file.at[:-1]) if file.at[:-1] else doc
        found = (
            [x for x in items if dig(x, [file.match]) == file.at[-1]]
            if isinstance(items, list)
            else []
        )
        return found[0] if found else None
    return dig(doc, file.at)


def put(file: ConfigFile, text: str | None, value: Value, name: str, block: str = "") -> str:
    """``text`` (``None``: absent) with the entry set to ``value``; unchanged when it is.
    ``block``: a top-level YAML key's text as it was (see :func:`added`), written back as is."""
    spec = _nested(file)
    if text is None:
        for key, top in file.skeleton:  # a new file starts as the client writes one
            text = (
                json_set(text, (key,), top, name, file.fmt)
                if file.fmt.startswith("json")
                else yaml_set_key(text, key, top, name)
            )
    if spec is not None:
        return nested_set(text, spec, value, name)
    if file.fmt in ("json", "jsonc"):
        return json_set(text, file.at, value, name, file.fmt)
    if file.fmt == "toml":
        return toml_set_table(text, file.at, value, name)
    if file.match:
        return yaml_set_item(text, (file.match, file.at[-1]), value, name)
    return yaml_set_key(text, file.at[0], value, name, block)


def unset(file: ConfigFile, text: str, keep: int, name: str) -> str:
    """``text`` without the entry; ``keep``: how many of its parents were there before."""
    spec = _nested(file)
    if spec is not None:
        return nested_unset(text, spec, keep > 0, name)
    if file.fmt in ("json", "jsonc"):
        return json_unset(text, file.at, keep, name, file.fmt)
    if file.fmt == "toml":
        return toml_unset_table(text, file.at, name)
    if file.match:
        return yaml_unset_item(text, (file.match, file.at[-1]), name)
    return yaml_unset_key(text, file.at[0], name)


def apply(file: ConfigFile, text: str | None, wiring: Wiring, name: str) -> str:
    """``text`` (``None``: absent) with offload's entry set; unchanged when it is already set."""
    return put(file, text, file.entry(wiring), name)


def wired(file: ConfigFile, text: str | None, wirings: Sequence[Wiring], name: str) -> str:
    """``"yes"`` (offload's entry as one of ``wirings`` would write it), ``"other"`` (an
    entry of offload's name that differs) or ``"no"``."""
    found = current(file, parse(text, file.fmt, name))
    if found is None:
        return "no"
    return "yes" if any(found == _entry_or_none(file, w) for w in wirings) else "other"


def _entry_or_none(file: ConfigFile, wiring: Wiring) -> Value:
    try:
        return file.entry(wiring)
    except InvalidInput:  # a client without that kind of entry (Claude Desktop's http)
        return None


def added(file: ConfigFile, old: str | None, value: Value, name: str) -> dict[str, Any]:
    """What setting the entry to ``value`` in ``old`` adds, as :func:`undo` needs it: the
    value written, the one it replaced (``had``/``before``; a top-level YAML key's block
    also as text, ``before_text``, so its comments and layout come back) and how many
    parents were there."""
    doc = parse(old, file.fmt, name)
    before = current(file, doc)
    spec = _nested(file)
    if spec is not None:
        keep = int(isinstance(doc, dict) and spec.parent in doc)
    elif file.fmt in ("json", "jsonc"):
        keep = present(doc, file.at) if isinstance(doc, dict) else 0
    else:
        keep = 0
    return {
        "what": file.what,
        "at": list(file.at),
        "value": value,
        "had": before is not None,
        "before": before,
        "before_text": _top_yaml_text(file, old) if before is not None else "",
        "keep": keep,
    }


def _top_yaml_text(file: ConfigFile, old: str | None) -> str:
    """The text of a top-level YAML key's block (Hermes's ``model:``, aider's base URL)."""
    if file.fmt != "yaml" or len(file.at) != 1 or file.match:
        return ""
    return yaml_key_text(old, file.at[0])


class Conflict(InvalidInput):
    """An entry offload wrote was changed since (by the user or the client)."""


def undo(file: ConfigFile, text: str, record: dict[str, Any], name: str) -> str:
    """``text`` with offload's entry taken out: what it replaced put back, or removed.
    An entry already gone is left alone; one changed since setup raises :class:`Conflict`."""
    now = current(file, parse(text, file.fmt, name))
    if now is None:
        return text
    if now != record["value"]:
        raise Conflict(f"{name}: the {NAME} entry ({'.'.join(file.at)}) changed after setup")
    if record["had"]:
        return put(file, text, record["before"], name, record.get("before_text", ""))
    return unset(file, text, int(record["keep"]), name)


def leftover(file: ConfigFile, text: str) -> bool:
    """Whether a file setup created holds anything but its skeleton once offload's entries
    are out (if not, revert removes the file)."""
    doc = parse(text, file.fmt, str(file.path))
    if isinstance(doc, dict):
        return any(k not in dict(file.skeleton) for k in doc)
    return bool(doc)
