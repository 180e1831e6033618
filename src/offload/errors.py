"""Every error offload raises on purpose.

The tree, in one place::

    OffloadError                    base; ``exit_code`` is what the CLI exits with
    ├── ConfigError                 a setting is malformed or unknown            (exit 2)
    ├── InvalidInput                a caller sent something we refuse            (exit 2)
    │   ├── EncodingError           text that is not valid UTF-8 / has lone surrogates
    │   ├── WrongType               a value of the wrong type (also a ``TypeError``)
    │   └── FenceError              a checkin nonce that does not match
    ├── ReferenceError_             a reference that names no live entry         (exit 3)
    │   ├── NotFound                nothing matches it
    │   ├── AmbiguousReference      a hex prefix matching several entries (lists them)
    │   ├── OtherScope              it names an entry of another scope only
    │   └── Gone                    forgotten or expired; says why and how to regenerate
    ├── PathError                   a path that may not be read                  (exit 4)
    │   ├── OutsideRoots            outside the allowed roots, or a symlink escaping them
    │   ├── NotAFile                missing, or a directory
    │   ├── BinaryFile              looks binary
    │   └── TooLarge                over the size limit
    ├── StoreError                  the store itself is unhappy                  (exit 5)
    │   ├── IntegrityError          a block whose bytes no longer match its hash
    │   ├── RowRefused              a PostgreSQL role held to its scopes wrote outside them
    │   └── StoreBusy               the database stayed locked past the timeout
    ├── UpstreamError               a model server or MCP upstream failed        (exit 6)
    │   ├── UpstreamUnavailable     could not connect / not started
    │   ├── UpstreamTimeout         no answer in time
    │   ├── UpstreamTooLarge        an answer past a bound (an event stream's open event)
    │   └── ModelNotConfigured      a feature needs a local model and none is set
    └── AddressInUse                the host:port a server would listen on is    (exit 7)
                                    taken, or cannot be bound there

Messages are one line and say what to do next where there is something to do.
"""

from __future__ import annotations

from collections.abc import Sequence


class OffloadError(Exception):
    """Root of every deliberate offload error."""

    exit_code = 1


class ConfigError(OffloadError):
    """A setting is malformed, unknown or out of range."""

    exit_code = 2


class InvalidInput(OffloadError):
    """The caller sent something offload refuses; nothing was changed."""

    exit_code = 2


class EncodingError(InvalidInput):
    """Text that cannot be stored byte-exactly as UTF-8."""


class WrongType(InvalidInput, TypeError):
    """A value of the wrong type (a bare string where a list of strings is wanted); a
    ``TypeError`` too, so a library caller's ``except TypeError`` sees it."""


class FenceError(InvalidInput):
    """A checkin whose nonce does not match the checkout."""


class ReferenceError_(OffloadError):
    """A reference that does not name a live entry."""

    exit_code = 3


class NotFound(ReferenceError_):
    """No entry, label, hash or prefix matches the reference."""

    def __init__(self, ref: str, hint: str = "") -> None:
        self.ref = ref
        self.hint = hint
        msg = f"no entry matches {ref!r}"
        super().__init__(f"{msg}; {hint}" if hint else msg)

    def with_hint(self, how_to_find: str) -> NotFound:
        """This error ending with ``how_to_find``: how the caller of the surface that
        reports it finds an entry (its own command or tool), unless it already says
        something more particular (a prefix too short, a missing block). The store names
        no surface: each surface adds its own."""
        if self.hint or not how_to_find:
            return self
        return NotFound(self.ref, how_to_find)


class AmbiguousReference(ReferenceError_):
    """A hex prefix that matches more than one entry."""

    def __init__(self, ref: str, candidates: Sequence[str]) -> None:
        self.ref = ref
        self.candidates = list(candidates)
        shown = ", ".join(self.candidates[:10])
        more = f" (+{len(self.candidates) - 10} more)" if len(self.candidates) > 10 else ""
        super().__init__(
            f"prefix {ref!r} is ambiguous: matches {shown}{more}; give more characters"
        )


class OtherScope(ReferenceError_):
    """The reference names entries of other scopes only: a scope is a boundary, so nothing
    of theirs is read or changed unless the caller asks for every scope."""

    def __init__(self, ref: str, scope: str, how_to_reach: str = "") -> None:
        self.ref = ref
        self.scope = scope
        msg = (
            f"{ref!r} lives in another scope than {scope!r}, so it is not read or changed from here"
        )
        super().__init__(f"{msg}; {how_to_reach}" if how_to_reach else msg)

    def with_hint(self, how_to_reach: str) -> OtherScope:
        """This error ending with how the caller of the surface that reports it asks for
        every scope (its own flag or argument); the store names no surface."""
        return OtherScope(self.ref, self.scope, how_to_reach)


class Gone(ReferenceError_):
    """The entry existed but was forgotten or expired; the message says why."""

    def __init__(self, ref: str, reason: str, when: str, regenerate: str = "") -> None:
        self.ref = ref
        self.reason = reason
        self.when = when
        self.regenerate = regenerate
        tail = f"; to regenerate: {regenerate}" if regenerate else ""
        super().__init__(f"{ref!r} is gone: {reason} at {when}{tail}")


class PathError(OffloadError):
    """A filesystem path that offload will not read."""

    exit_code = 4


class OutsideRoots(PathError):
    """Outside the allowed roots, or a symlink that escapes them."""


class NotAFile(PathError):
    """Missing, or not a regular file."""


class BinaryFile(PathError):
    """The file looks binary; offload stores text only."""


class TooLarge(PathError):
    """The input is larger than the configured limit."""


class StoreError(OffloadError):
    """The store cannot do what was asked."""

    exit_code = 5


class IntegrityError(StoreError):
    """A stored block no longer hashes to its identity."""


class RowRefused(StoreError):
    """PostgreSQL's row-level security refused a row a role wrote: a role held to its
    scopes (``offload store restrict``) writing another scope, or meeting a row another
    scope holds. ``where``: the store (its URL without the password); ``table``: the table
    whose policy refused the row."""

    def __init__(self, message: str, *, where: str = "", table: str = "") -> None:
        self.where = where
        self.table = table
        super().__init__(message)


class StoreBusy(StoreError):
    """The database stayed locked longer than the busy timeout."""


class UpstreamError(OffloadError):
    """A model server or upstream MCP server failed."""

    exit_code = 6


class UpstreamUnavailable(UpstreamError):
    """Could not reach the upstream."""


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer in time."""


class UpstreamTooLarge(UpstreamError):
    """The upstream sent more than a bound allows (its request is cancelled)."""


class ModelNotConfigured(UpstreamError):
    """A feature needs a local model and none is configured."""

    def __init__(self, feature: str, flag: str = "") -> None:
        # ``flag``: the command's own way to name one (``--endpoint URL``), said first
        super().__init__(
            f"{feature} needs a local model and none is configured; "
            + (f"pass {flag}, or " if flag else "")
            + "set [local_model] base_url in offload.toml or OFFLOAD_LOCAL_MODEL__BASE_URL"
        )


class AddressInUse(OffloadError):
    """The address a server was asked to listen on is taken (or cannot be bound)."""

    exit_code = 7
