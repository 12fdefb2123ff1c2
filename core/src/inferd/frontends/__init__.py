"""The built-in frontends (HTTP, gRPC, metrics), each a plugin on the frontend contract, and what they share (header forwarding, the JSON of typed results, the repository name rule)."""
