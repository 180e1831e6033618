"""The one-port host of ``offload serve``: it composes the surfaces, it is not one.

- :mod:`offload.serve.host`: :func:`build` makes every surface from its own factory and the
  router between them (:class:`Served` is what the dashboard and ``/api/stats`` report);
- :mod:`offload.serve.lifespan`: every sub-app's ASGI lifespan, in order, stopped in reverse;
- :mod:`offload.serve.dashboard`: the page at ``/``;
- :mod:`offload.serve.figures`: the host's own Prometheus gauges (store, surfaces).

This package may import every surface (``proxy``, ``mcp``, ``gateway``); the surfaces still
never import each other, and ``cli/serve_cmds.py`` only parses flags and calls :func:`build`.
"""
