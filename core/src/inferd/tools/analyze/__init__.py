"""``inferd analyze``: a model_analyzer-style configuration sweep for a model served by inferd.

Modules: ``search`` (the configurations to try), ``sweep`` (load each through the repository API
and measure it with the perf engine), ``export`` (config.pbtxt files and results.json),
``report`` (report.html, its plot drawn with matplotlib), ``cli``.
"""
