"""Showing a connection URL, or a setting, without its secrets.

Store URLs (``postgresql://user:password@host/db?sslpassword=…``) and upstream URLs may
carry credentials; anything offload prints or logs about them goes through
:func:`redact_url`, which keeps what identifies the place (scheme, user, host, port,
database, harmless options) and masks the rest. Settings go through
:func:`redact_setting`: a credential (:func:`offload.config.is_secret`) is masked whole.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from offload.config import is_secret

MASK = "***"
# query options that carry a secret (libpq's password, sslpassword; generic token/key ones)
_SECRET_OPTIONS = ("password", "sslpassword", "token", "secret", "key", "api_key", "apikey")


def redact_url(url: str) -> str:
    """``url`` with any password (in the user part or the query) replaced by ``***``.

    Text that is not a ``scheme://`` URL comes back unchanged; a URL that cannot be parsed
    comes back as ``scheme://***`` rather than risk showing a secret.
    """
    scheme, sep, _ = url.partition("://")
    if not sep:
        return url
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            user, colon, _password = userinfo.partition(":")
            netloc = f"{user}{':' + MASK if colon else ''}@{hostport}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode([(k, MASK if _is_secret(k) else v) for k, v in pairs], safe="*/:")
        # rebuilt by hand: urlunsplit drops the empty authority of sqlite:///path
        tail = (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")
        return f"{scheme}://{netloc}{parts.path}{tail}"
    except ValueError:
        return f"{scheme}://{MASK}"


def _is_secret(option: str) -> bool:
    name = option.lower()
    return any(name == s or name.endswith("_" + s) or name.endswith(s) for s in _SECRET_OPTIONS)


def redact_setting(key: str, value: Any) -> Any:
    """``value`` of the dotted setting ``key`` as it may be shown: a credential masked whole
    (an unset one stays empty, so "not set" shows), a URL through :func:`redact_url`."""
    if is_secret(key):
        return MASK if value else value
    return redact_url(value) if isinstance(value, str) else value
