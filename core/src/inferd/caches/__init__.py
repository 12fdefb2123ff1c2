"""The built-in response cache plugin (local, in memory)."""
