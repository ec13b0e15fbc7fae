"""A fast reference scheduler extender for the benchmark (not part of extproxy).

POST <prefix>/filter      echoes every candidate node in the mode of the request:
                          NodeNames -> the same NodeNames bytes, Nodes -> the same Nodes bytes.
                          The body is never fully decoded: msgspec decodes the envelope into
                          `Raw` fields (the Pod and the lists are only scanned, not built).
POST <prefix>/prioritize  answers a HostPriorityList with integer scores 0..10.
GET  <anything>           200 "ok" (readiness probe).

Two servers implement the same handlers so that either can be measured:
  --server aiohttp   aiohttp.web on uvloop (the default: fastest here, see bench/README.md)
  --server uvicorn   uvicorn + uvloop + httptools with a bare ASGI app

Run: python bench/refbackend.py --port 18080 [--server uvicorn|aiohttp]
"""
from __future__ import annotations

import argparse

import msgspec


class _Envelope(msgspec.Struct):
    # The scheduler writes PascalCase keys; `Raw` keeps each value's bytes as received.
    Nodes: msgspec.Raw = msgspec.Raw(b"null")
    NodeNames: msgspec.Raw = msgspec.Raw(b"null")


class _Meta(msgspec.Struct):
    name: str = ""


class _Node(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _NodeList(msgspec.Struct):
    items: list[_Node] = []


class _PrioArgs(msgspec.Struct):
    Nodes: _NodeList | None = None
    NodeNames: list[str] | None = None


_envelope = msgspec.json.Decoder(_Envelope)
_prio = msgspec.json.Decoder(_PrioArgs)
_encode = msgspec.json.encode
_NULL = b"null"
_TAIL = b',"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


def filter_answer(body: bytes) -> bytes:
    env = _envelope.decode(body)
    names = bytes(env.NodeNames)
    if names.strip() != _NULL:  # NodeNames mode: echo the names, Nodes null
        return b'{"Nodes":null,"NodeNames":' + names + _TAIL
    return b'{"Nodes":' + bytes(env.Nodes) + b',"NodeNames":null' + _TAIL


def prioritize_answer(body: bytes) -> bytes:
    args = _prio.decode(body)
    if args.NodeNames is not None:
        names = args.NodeNames
    elif args.Nodes is not None:
        names = [n.metadata.name for n in args.Nodes.items]
    else:
        names = []
    return _encode([{"Host": n, "Score": i % 11} for i, n in enumerate(names)])


def answer(path: str, body: bytes) -> tuple[int, bytes]:
    try:
        if path.endswith("/filter"):
            return 200, filter_answer(body)
        if path.endswith("/prioritize"):
            return 200, prioritize_answer(body)
    except msgspec.DecodeError as exc:
        return 400, _encode({"error": str(exc)})
    return 404, b'{"error":"no such verb"}'


# --- uvicorn: a bare ASGI app ----------------------------------------------------------

_JSON = (b"content-type", b"application/json")


async def asgi_app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    if scope["method"] != "POST":
        status, data = 200, b"ok"
    else:
        message = await receive()
        body = message.get("body", b"")
        if message.get("more_body"):
            chunks = [body]
            while message.get("more_body"):
                message = await receive()
                chunks.append(message.get("body", b""))
            body = b"".join(chunks)
        status, data = answer(scope["path"], body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [_JSON, (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


def run_uvicorn(port: int, host: str) -> None:
    import uvicorn

    uvicorn.run(
        asgi_app, host=host, port=port, loop="uvloop", http="httptools",
        access_log=False, log_level="warning", lifespan="off",
    )


# --- aiohttp.web -----------------------------------------------------------------------


def run_aiohttp(port: int, host: str) -> None:
    import uvloop
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        if request.method != "POST":
            return web.Response(body=b"ok")
        status, data = answer(request.path, await request.read())
        return web.Response(status=status, body=data, content_type="application/json")

    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("*", "/{tail:.*}", handle)
    uvloop.install()
    web.run_app(app, host=host, port=port, access_log=None, print=None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server", choices=("uvicorn", "aiohttp"), default="aiohttp")
    parser.add_argument("--host", default="127.0.0.1")  # bench/links.py: an address inside a network namespace
    args = parser.parse_args()
    (run_uvicorn if args.server == "uvicorn" else run_aiohttp)(args.port, args.host)


if __name__ == "__main__":
    main()
