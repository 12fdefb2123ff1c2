"""Default plugins: the built-in frontends, schedulers and cache, registered like any plugin."""
