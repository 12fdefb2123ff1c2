"""The order in which ensembles and the models their steps call load and unload.

Pure functions over a call graph: ``{model: the models its steps call, in step order}``. A plain
model calls nothing. The lifecycle builds the graph (from parsed configs, or from the versions
serving) and carries the order out; nothing here touches a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

#: ``{model: the models its steps call}``, each list in step order without repeats.
Calls = Mapping[str, Sequence[str]]


class Unload(NamedTuple):
    """One model to unload, and the model whose unloading forced it ("" when asked for)."""

    model: str
    because: str = ""


def load_waves(calls: Calls, names: Sequence[str]) -> list[list[str]]:
    """``names`` in groups where each group calls only models of earlier groups or models not
    among ``names``. Models in a cycle (which cannot load) go together in the last group."""
    left = list(dict.fromkeys(names))
    waves: list[list[str]] = []
    while left:
        pending = set(left)
        wave = [n for n in left if not pending & (set(calls.get(n, ())) - {n})] or left
        waves.append(wave)
        left = [n for n in left if n not in wave]
    return waves


def composing(calls: Calls, name: str) -> list[str]:
    """The models ``name`` calls directly or through other ensembles, each after the models it
    calls, in step order; ``name`` itself and models not in ``calls`` are left out."""
    order: list[str] = []
    seen = {name}

    def visit(model: str) -> None:
        for dep in calls.get(model, ()):
            if dep in seen or dep not in calls:
                continue
            seen.add(dep)
            visit(dep)
            order.append(dep)

    visit(name)
    return order


def callers(calls: Calls, model: str) -> list[str]:
    """The models whose steps call ``model``."""
    return [n for n, deps in calls.items() if n != model and model in deps]


def unload_order(calls: Calls, name: str, dependents: bool = False) -> list[Unload]:
    """What unloading ``name`` takes down, in order, as Triton does: ``name``, then every
    ensemble that calls it, directly or not (they could no longer run). With ``dependents``,
    also the models ``name`` calls that no remaining ensemble calls, recursively.

    ``calls`` holds the models serving now; ``name`` need not be among them.
    """
    left = dict(calls)
    order: list[Unload] = []

    def take(model: str, because: str = "") -> None:
        left.pop(model, None)
        order.append(Unload(model, because))

    def unload(model: str, recurse: bool) -> None:
        direct = list(left.get(model, ())) if recurse else []
        take(model)
        todo = callers(left, model)
        while todo:
            caller = todo.pop()
            if caller in left:
                take(caller, model)
                todo.extend(callers(left, caller))
        for dep in direct:
            if dep in left and not callers(left, dep):
                unload(dep, True)

    unload(name, dependents)
    return order
