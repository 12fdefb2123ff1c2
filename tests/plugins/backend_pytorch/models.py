"""Small PyTorch models the tests build and save (TorchScript and torch.export)."""

from __future__ import annotations

from pathlib import Path

import torch


class AddSub(torch.nn.Module):
    """(a, b) -> (a + b, a - b)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Affine(torch.nn.Module):
    """forward(x, scale) with weights, so that named binding and devices matter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * scale


class DictOut(torch.nn.Module):
    """x -> {"double": 2x, "square": x*x, "total": sum over features (INT64 when x is)}."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"double": x * 2, "square": x * x, "total": x.sum(dim=1, keepdim=True)}


class DictIn(torch.nn.Module):
    """forward(inputs: Dict[str, Tensor]) -> inputs["left"] * inputs["right"]."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["left"] * inputs["right"]


class Upper(torch.nn.Module):
    """List[str] -> List[str] (Triton's TYPE_STRING convention)."""

    def forward(self, words: list[str]) -> list[str]:
        return [w.upper() for w in words]


class Accumulate(torch.nn.Module):
    """(x, start, ready, acc) -> (sum, sum) with sum = acc * (1 - start) + x."""

    def forward(
        self, x: torch.Tensor, start: torch.Tensor, ready: torch.Tensor, acc: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        total = acc * (1 - start) + x * ready
        return total, total


class Exported(torch.nn.Module):
    """An exported program with a dict output: {"sum": lin(x) + y, "diff": lin(x) - y}."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.linear(x)
        return {"sum": h + y, "diff": h - y}


def save_script(module: torch.nn.Module, path: Path) -> None:
    torch.jit.script(module).save(str(path))


def save_exported(module: torch.nn.Module, path: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(
        module, (torch.zeros(2, 4), torch.zeros(2, 3)), dynamic_shapes={"x": {0: batch}, "y": {0: batch}}
    )
    torch.export.save(program, str(path))
