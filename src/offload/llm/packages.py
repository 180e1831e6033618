"""The optional packages the embedding models are read from: found without importing them,
and a missing one said once.

Shared by the store's models (``llm/embedding.py``, ``llm/minilm.py``) so that neither
imports the other for it.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("offload.embedding")


def package_dir(name: str) -> Path | None:
    """Where an installed package lives, found without importing (executing) it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def missing_packages(required: Sequence[str]) -> list[str]:
    """The packages of ``required`` that are not installed (empty: all there)."""
    return [name for name in required if package_dir(name) is None]


class Notices:
    """One-line notices, each logged the first time this memory sees it."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def once(self, text: str) -> None:
        """Log ``text`` unless this memory has logged it already."""
        with self._lock:
            if text in self._seen:
                return
            self._seen.add(text)
        log.warning("%s", text)


# the process's memory: every store a process opens says a missing package once
PROCESS_NOTICES = Notices()
