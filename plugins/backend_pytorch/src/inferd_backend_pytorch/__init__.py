"""inferd backend "pytorch": TorchScript ``model.pt`` and torch.export ``model.pt2`` models."""

__version__ = "0.1.0"
