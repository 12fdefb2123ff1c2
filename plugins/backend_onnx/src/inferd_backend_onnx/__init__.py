"""inferd's onnxruntime backend. Importing this package imports no framework."""
