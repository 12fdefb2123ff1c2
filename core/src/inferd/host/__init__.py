"""The host: the server that builds every part, the plugin host, the command line, settings (logging, gc, Triton's flags that do not apply) and the start-up summary."""
