"""What ``offload setup`` added to each client's config, recorded for ``--revert``.

The record of a client lives in a per-user state directory tied to the config files, not
to the store: ``$XDG_STATE_HOME/offload/setup/CLIENT.json`` (default
``~/.local/state/offload/setup/``), or ``DIR/.local/state/offload/setup/`` with
``--config-dir DIR``. So ``--revert`` finds it whatever ``OFFLOAD_HOME`` or ``--home`` says.
It holds, per file: whether setup created it, its first backup, the digest of the last
bytes setup wrote, and for each entry the value written and what it replaced. It is
readable by its owner alone (an http entry's value may hold the bearer token).

Revert puts the first backup back byte for byte while the file is exactly as setup last
wrote it; once the client (or the user) has changed the file, it takes only offload's
entries out of it as it is now, putting back what they replaced.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from offload.cli.wiring.config_files import read_config, write_atomic
from offload.errors import InvalidInput


def records_dir(config_dir: str | None) -> Path:
    """Where setup's records live (see the module docstring)."""
    if config_dir:
        return Path(config_dir).expanduser().absolute() / ".local" / "state" / "offload" / "setup"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "offload" / "setup"


def record_path(config_dir: str | None, client: str) -> Path:
    """The record file of one client."""
    return records_dir(config_dir) / f"{client}.json"


def load(path: Path) -> dict[str, Any] | None:
    """The record at ``path``, or None when there is none."""
    text = read_config(path)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as exc:  # not JSON, or nested past the stack
        raise InvalidInput(f"{path} is not valid JSON; nothing changed, move it away") from exc
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        raise InvalidInput(f"{path} is not an offload setup record; nothing changed")
    return record


def save(path: Path, record: dict[str, Any]) -> None:
    """Write the record (owner-only: it may hold the bearer token)."""
    data = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    write_atomic(path, data.encode("utf-8"), private=True)


def forget(path: Path) -> None:
    """Remove the record once its client is reverted."""
    path.unlink(missing_ok=True)
