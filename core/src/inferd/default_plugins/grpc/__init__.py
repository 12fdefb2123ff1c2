"""The gRPC frontend (KServe v2 + Triton extensions) and its generated protobuf code."""
