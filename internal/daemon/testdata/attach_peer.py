#!/usr/bin/env python3
"""A JSON-RPC peer written apart from PCP's Go client: it invokes a
capability on pcpd's Unix socket and reports, as one JSON line on stdout,
what came back: the result, and for each attachment its size, seals and
SHA-256, read from the memfd that came with the reply line (recvmsg,
SCM_RIGHTS) or from the inline base64.

usage: attach_peer.py SOCKET CAPABILITY_ID MODE
MODE is the invoke's "attachments" ("auto" sends none), or "hangup": send
the request and close at once, reading nothing.
"""
import array, json, os, socket, sys

# The report of an attachment is shared with the other peer (no bytecode
# is written beside it).
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testkit", "testdata"))
from attachment_report import describe  # noqa: E402

MAX_FDS = 32


def main():
    path, cap_id, mode = sys.argv[1:4]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    params = {"capability_id": cap_id, "app_id": cap_id.rsplit(".", 1)[0],
              "source": "SystemIntelligence"}
    if mode not in ("auto", "hangup"):
        params["attachments"] = mode
    s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "invoke.capability",
                          "params": params}).encode() + b"\n")
    if mode == "hangup":
        s.close()
        print(json.dumps({"hung_up": True}))
        return
    line, fds = read_line(s)
    s.close()
    msg = json.loads(line)
    out = {"fds_received": len(fds)}
    if "error" in msg:
        out["error"] = msg["error"]
    else:
        res = msg["result"]
        out["status"] = res["status"]
        out["data"] = res.get("data")
        out["attachments"] = [describe(a, fds) for a in res.get("attachments", [])]
    for fd in fds:
        os.close(fd)
    print(json.dumps(out))


def read_line(s):
    """Reads the first line, with the descriptors that came with it: those
    received with a chunk belong to the line holding its last byte."""
    buf, fds = b"", []
    while b"\n" not in buf:
        data, anc, flags, _ = s.recvmsg(65536, socket.CMSG_SPACE(MAX_FDS * 4))
        if not data:
            raise SystemExit("connection closed before the reply")
        if flags & socket.MSG_CTRUNC:
            raise SystemExit("control data truncated")
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(cdata[: len(cdata) - len(cdata) % a.itemsize])
                if b"\n" in (buf + data)[:-1]:
                    raise SystemExit("descriptors came with a later line")
                fds.extend(a)
        buf += data
    return buf[: buf.index(b"\n")], fds




if __name__ == "__main__":
    main()
