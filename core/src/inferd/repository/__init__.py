"""What a model repository holds: the scan of a folder (configs parsed once), fingerprints and diffs, repositories in object storage, and the check of client-chosen names that may reach its files."""
