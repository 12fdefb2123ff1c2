"""What every port serving HTTP shows of the data plane: its typed results as Triton's JSON
(:mod:`inferd.views.results_json`) and the status page with its JSON (:mod:`inferd.views.status`),
shared by the built-in frontends and, through :mod:`inferd.api`, plugin frontends."""
