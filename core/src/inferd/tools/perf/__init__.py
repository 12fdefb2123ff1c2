"""``inferd perf``: perf_analyzer for inferd and any KServe v2 server.

Modules: ``options`` (settings), ``model`` (metadata/config), ``inputs`` (request data),
``transport*`` (HTTP and gRPC), ``load`` (concurrency and request-rate generators), ``profiler``
(windows and stability), ``engine`` (:class:`~inferd.tools.perf.engine.PerfSession`, used by
``inferd analyze``), ``report`` (console and CSV), ``cli``.
"""
