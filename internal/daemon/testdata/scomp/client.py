"""A scomp client on Python's websockets library (Debian python3-websockets):
TestScompPythonClient runs it against a live pcpd. Usage:

    client.py tcp ws://127.0.0.1:PORT/ TOKEN
    client.py unix /path/to/scomp.sock

It speaks the wire of spec 004 as any client would: one JSON-RPC message
per text frame. It prints one line per check and exits non-zero on the
first failure.
"""
import asyncio
import json
import sys

import websockets


async def call(ws, id_, method, params):
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}))
    reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
    if reply.get("id") != id_:
        raise SystemExit(f"reply to {id_}: {reply}")
    return reply


def check(what, cond, got):
    if not cond:
        raise SystemExit(f"FAIL {what}: {got}")
    print(f"ok {what}")


async def session(ws):
    check("subprotocol", ws.subprotocol == "scomp.v0", ws.subprotocol)
    r = await call(ws, 1, "handshake", {"protocol": "0.1", "bindings": [], "metadata": {"client": {"name": "python-websockets", "version": websockets.__version__}}})
    names = [b["name"] for b in r["result"]["bindings"]]
    check("handshake", r["result"]["sessionId"] and "org_example_notes_create" in names, r)
    r = await call(ws, 2, "eval", {"code": "1 + 1"})
    check("eval 1 + 1", r.get("result") == {"value": 2}, r)
    r = await call(ws, 3, "eval", {"code": "const n = await org_example_notes_create({title: 'from python'}); n.data.title"})
    check("binding call", r.get("result") == {"value": "from python"}, r)
    await ws.send(json.dumps([{"jsonrpc": "2.0", "id": 4, "method": "eval", "params": {"code": "1"}}]))
    r = json.loads(await asyncio.wait_for(ws.recv(), 30))
    check("batch refused", r.get("error", {}).get("code") == -32600, r)
    await ws.send(b'{"jsonrpc":"2.0","id":5,"method":"eval","params":{"code":"1"}}')
    try:
        got = await asyncio.wait_for(ws.recv(), 30)
        raise SystemExit(f"FAIL binary frame answered: {got}")
    except websockets.ConnectionClosed as e:
        check("binary frame closes 1003", e.rcvd is not None and e.rcvd.code == 1003, e)


async def main():
    kind = sys.argv[1]
    if kind == "tcp":
        uri, token = sys.argv[2], sys.argv[3]
        try:
            async with websockets.connect(uri, subprotocols=["scomp.v0"], extra_headers={"Authorization": "Bearer wrong"}):
                raise SystemExit("FAIL a wrong token was served")
        except websockets.InvalidStatusCode as e:
            check("wrong token refused", e.status_code == 401, e)
        async with websockets.connect(uri, subprotocols=["scomp.v0"], extra_headers={"Authorization": "Bearer " + token}) as ws:
            await session(ws)
    else:
        async with websockets.unix_connect(sys.argv[2], "ws://localhost/", subprotocols=["scomp.v0"]) as ws:
            await session(ws)


asyncio.run(main())
