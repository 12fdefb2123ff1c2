"""When and how versions come and go: the model manager (load, swap, unload, control modes), the version builder, warm-up, ensemble load order and the poller."""
