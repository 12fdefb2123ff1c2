"""The null-stack ceilings: what the server stack alone costs, with no inference behind it.

    python null_servers.py http --loop asyncio|uvloop --port P   # uvicorn + httptools, ASGI handler
    python null_servers.py grpc --port P                         # grpc.aio, generic unary handler

The HTTP handler reads the whole body and answers a fixed KServe v2 JSON response; the gRPC
handler takes the request bytes (no parsing) and answers a fixed serialized ModelInferResponse.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, MutableMapping

import grpc

from inferd.frontends.grpc import grpc_service_pb2 as pb

Scope = MutableMapping[str, object]
Receive = Callable[[], Awaitable[MutableMapping[str, object]]]
Send = Callable[[MutableMapping[str, object]], Awaitable[None]]

HTTP_BODY = b'{"model_name":"null","outputs":[{"name":"OUTPUT","datatype":"FP32","shape":[1,1],"data":[0.0]}]}'
HTTP_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(HTTP_BODY)).encode())]
GRPC_RESPONSE = pb.ModelInferResponse(
    model_name="null",
    outputs=[pb.ModelInferResponse.InferOutputTensor(name="OUTPUT", datatype="FP32", shape=[1, 1])],
    raw_output_contents=[b"\x00\x00\x00\x00"],
).SerializeToString()


async def null_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Read the body, answer the fixed response."""
    more = True
    while more:
        more = bool((await receive()).get("more_body"))
    await send({"type": "http.response.start", "status": 200, "headers": HTTP_HEADERS})
    await send({"type": "http.response.body", "body": HTTP_BODY})


def serve_http(loop: str, port: int) -> None:
    import uvicorn

    uvicorn.run(
        null_app,
        host="127.0.0.1",
        port=port,
        loop=loop,
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )


async def _null_infer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return GRPC_RESPONSE


async def serve_grpc(port: int) -> None:
    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(_null_infer)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("stack", choices=["http", "grpc"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    args = p.parse_args()
    if args.stack == "http":
        serve_http(args.loop, args.port)
    else:
        asyncio.run(serve_grpc(args.port))


if __name__ == "__main__":
    main()
