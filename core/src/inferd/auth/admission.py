"""The one access check every HTTP and gRPC route goes through (and plugins' routes may): admit
a request as its route's API group, and answer a model its caller may not see as an unknown one.

``admit`` gives the :class:`~inferd.auth.policy.Grant` to run the request under, or a
:class:`Hidden` answer the frontend encodes in its own way; a refusal
(``AccessDenied``) or the unknown model's error is raised. Control routes keep Triton's order: the
model control mode answers first, for any model.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from inferd.auth.policy import Grant, unknown_model, unknown_to_load, visible_names

if TYPE_CHECKING:
    from inferd.auth.groups import ApiGroup
    from inferd.auth.policy import AccessPolicy


class ModelAction(enum.Enum):
    """What a request does with the model it names, as far as a refusal to show the model matters."""

    READY = "ready"
    LOAD = "load"
    UNLOAD = "unload"
    OTHER = "other"


class Hidden(enum.Enum):
    """How a request for a model its caller may not see is answered, when it is not an error."""

    NOT_READY = "not ready"
    UNLOADED = "unloaded"


class Models(Protocol):
    """What the check reads of the data plane (``inferd.api.DataPlane``)."""

    def check_control(self) -> None: ...
    def model_names(self) -> list[str]: ...


def admit(
    policy: AccessPolicy,
    group: ApiGroup,
    action: ModelAction,
    model: str,
    headers: Mapping[str, str],
    dataplane: Models,
) -> Grant | Hidden:
    """``policy``'s answer to a request of ``group`` doing ``action`` with ``model`` ("" for none)."""
    grant = policy.admit(group, model, headers)
    if grant.visible:
        return grant
    with grant.serving():  # its hints name only models the caller may see
        return hidden(action, model, dataplane)


def hidden(action: ModelAction, model: str, dataplane: Models) -> Hidden:
    """What a request doing ``action`` with a model its caller may not see gets: what an unknown
    model gets (raised when it is an error)."""
    if action is ModelAction.READY:
        return Hidden.NOT_READY
    if action is ModelAction.LOAD or action is ModelAction.UNLOAD:
        dataplane.check_control()  # the control mode answers first, for any model
        if action is ModelAction.LOAD:
            raise unknown_to_load(model, dataplane.model_names())
        return Hidden.UNLOADED  # unloading an unknown model succeeds
    # any other route (traffic): as the data plane answers a name it does not know
    raise unknown_model(model, candidates=visible_names(dataplane.model_names()))
