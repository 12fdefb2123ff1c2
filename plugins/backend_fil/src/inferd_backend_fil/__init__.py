"""inferd backend "fil": tree models (XGBoost, LightGBM, Treelite) with Triton FIL's configuration."""

__version__ = "0.1.0"
