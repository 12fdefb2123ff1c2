"""Reading model files: TorchScript (``torch.jit.load``) and torch.export programs (``torch.export.load``)."""

from __future__ import annotations

import inspect
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inferd.api import InvalidArgument
from inferd_backend_pytorch.binding import Argument


@dataclass(frozen=True, slots=True)
class LoadedModule:
    """A callable model on its device and the arguments its ``forward`` takes."""

    module: Callable[..., Any]
    arguments: tuple[Argument, ...]
    torchscript: bool


def load_module(path: Path, device: torch.device | None, what: str) -> LoadedModule:
    """Load ``path`` onto ``device`` (None: where it was saved). ``what`` names the model in errors."""
    if path.suffix == ".pt2":
        return _load_exported(path, device, what)
    return _load_torchscript(path, device, what)


def _load_torchscript(path: Path, device: torch.device | None, what: str) -> LoadedModule:
    try:
        module = torch.jit.load(str(path), map_location=device)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise InvalidArgument(
            f"{what}: cannot load TorchScript file {path}: {error_summary(exc)}. model.pt must be saved with "
            f"torch.jit.script(m).save(path) or torch.jit.trace(m, example).save(path); a torch.save()d module "
            f"or state_dict is not TorchScript (for torch.export programs use model.pt2)"
        ) from None
    module.eval()
    return LoadedModule(module, torchscript_arguments(module), True)


def torchscript_arguments(module: Any) -> tuple[Argument, ...]:
    """The arguments of a ScriptModule's ``forward`` from its schema (``self`` dropped)."""
    out: list[Argument] = []
    for arg in module.forward.schema.arguments:
        kind_name = arg.type.kind()
        if kind_name == "ClassType" and not out and arg.name == "self":
            continue
        out.append(Argument(arg.name, _kind(arg.type), str(arg.type), bool(arg.kwarg_only)))
    return tuple(out)


def _kind(type_: Any) -> str:
    kind_name = type_.kind()
    if kind_name == "TensorType":
        return "tensor"
    if kind_name == "DictType":
        return "dict"
    if kind_name == "ListType" and str(type_.getElementType()) == "str":
        return "strings"
    if kind_name == "OptionalType" and type_.getElementType().kind() == "TensorType":
        return "optional"
    return "other"


def _load_exported(path: Path, device: torch.device | None, what: str) -> LoadedModule:
    if _is_aoti_package(path):
        raise InvalidArgument(
            f"{what}: {path} is an AOTInductor package (torch._inductor.aoti_compile_and_package); inferd's "
            f"pytorch backend serves torch.export.save() programs as model.pt2, or TorchScript as model.pt"
        )
    try:
        program = torch.export.load(str(path))
    except Exception as exc:
        raise InvalidArgument(
            f"{what}: cannot load torch.export program {path}: {error_summary(exc)}. model.pt2 must be saved with "
            f"torch.export.save(torch.export.export(m, example_args), path)"
        ) from None
    module = program.module()
    if device is not None:
        module = module.to(device)
    return LoadedModule(module, exported_arguments(program, module), False)


def exported_arguments(program: Any, module: Any) -> tuple[Argument, ...]:
    """Positional arguments then keyword arguments, as the program's input spec records them."""
    args_spec, kwargs_spec = _children(program.call_spec.in_spec)
    keywords = list(kwargs_spec.context or ())
    names = [p for p in inspect.signature(module.forward).parameters if p not in keywords]
    out = []
    for i, child in enumerate(_children(args_spec)):
        name = names[i] if i < len(names) else f"arg{i}"
        out.append(Argument(name, "tensor" if child.is_leaf() else "other", "Tensor" if child.is_leaf() else "nested"))
    for key, child in zip(keywords, _children(kwargs_spec), strict=False):
        out.append(Argument(key, "tensor" if child.is_leaf() else "other", "Tensor", keyword_only=True))
    return tuple(out)


def _children(spec: Any) -> list[Any]:
    """A TreeSpec's children (``children()`` in newer torch, ``children_specs`` in older)."""
    children = getattr(spec, "children", None)
    return list(children()) if callable(children) else list(spec.children_specs)


def _is_aoti_package(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/aotinductor/" in name or name.endswith(".so") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def error_summary(exc: BaseException) -> str:
    """The last line of a (possibly multi-line TorchScript) error message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
