"""``inferd serve --workers N``: N serving processes behind one endpoint.

A :class:`~inferd.workers.supervisor.Supervisor` (the ``inferd serve`` process itself when N > 1)
starts N workers; each is a whole :class:`~inferd.host.server.Server` whose frontends share the HTTP,
gRPC and metrics ports with ``SO_REUSEPORT``. Workers talk over Unix sockets in a directory the
supervisor owns (:mod:`~inferd.workers.control`): a worker answering statistics, metrics,
readiness, repository control or settings requests asks its peers (:mod:`~inferd.workers.peers`),
so the N processes behave as one server. With N = 1 none of this exists.
"""
