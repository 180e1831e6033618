"""The tests' own HTTP requests to the servers they run on loopback, through one client.

``httpx.get(...)`` builds a client for every call, and with it an SSL context (certifi's
CA bundle parsed: ~50 ms of CPU here), though no loopback test speaks TLS; a test that
polls a starting server that way spends more CPU than the server it waits for. One
module-wide client builds it once. It keeps no idle connection, so every request opens
its own and closes it after, exactly as ``httpx.get`` does: no test sees a reused
connection it did not ask for. ``get``, ``post``, ``stream`` and ``request`` take what
httpx's functions of the same names take.
"""

from __future__ import annotations

import httpx

# The timeout is a ceiling for a hung server, not a wait: at load 15-25 on two cores a
# request that costs the server a fraction of a second of CPU took over 5 s to answer (a
# test that means a timeout passes its own, e.g. ``timeout=0.5``).
CLIENT = httpx.Client(timeout=60.0, limits=httpx.Limits(max_keepalive_connections=0))

get = CLIENT.get
post = CLIENT.post
stream = CLIENT.stream
request = CLIENT.request
