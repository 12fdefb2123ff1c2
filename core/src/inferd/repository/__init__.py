"""What a model repository holds: the scan of a folder (configs parsed once), fingerprints and diffs, and repositories in object storage."""
