"""inferd's test kit: real servers on free ports, repositories from dicts, the backend contract."""

pytest_plugins = ["inferd.testing"]
