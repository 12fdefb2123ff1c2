"""What the log lines of a request name: its id and its model, set while it is handled.

Context variables, so the thread or task that runs a request carries them: the data plane sets
them, the runner carries them onto an instance's thread, and the log formatter reads them.
"""

from __future__ import annotations

import contextvars

#: The id of the request being handled (set by the data plane); "" outside requests.
REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("inferd_request_id", default="")
#: The model of the request (or execution) being handled; "" outside requests.
REQUEST_MODEL: contextvars.ContextVar[str] = contextvars.ContextVar("inferd_request_model", default="")
