"""The built-in schedulers, each a plugin on the scheduler contract: direct, dynamic batching, sequence batching, ensembles, and what the batchers share."""
