#!/usr/bin/env python3
"""A framed-stream peer written apart from PCP's Go client: it sends one
ExecuteRequest frame on pcpd's Unix socket and reports, as one JSON line
on stdout, what came back: the result, and for each attachment its size,
seals and SHA-256, read from the memfd that came with the reply frame
(recvmsg, SCM_RIGHTS) or from the inline base64.

usage: framed_attach_peer.py SOCKET CAPABILITY_ID MODE
MODE is the request's "attachments" ("auto" sends none).
"""
import array, json, os, socket, struct, sys

# The report of an attachment is shared with the other peer (no bytecode
# is written beside it).
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "testkit", "testdata"))
from attachment_report import describe  # noqa: E402

MAX_FDS = 32
EXECUTE_REQUEST, EXECUTE_RESPONSE, PUSH_EVENT, ERROR_RESPONSE = 3, 4, 16, 17


class Stream:
    """Reads frames with recvmsg. Descriptors that come with a read belong
    to the frame holding the last byte of that read."""

    def __init__(self, s):
        self.s, self.buf, self.off, self.held = s, b"", 0, []  # held: (offset, fd)

    def fill(self):
        data, anc, flags, _ = self.s.recvmsg(65536, socket.CMSG_SPACE(MAX_FDS * 4))
        if not data:
            raise SystemExit("connection closed before the reply")
        if flags & socket.MSG_CTRUNC:
            raise SystemExit("control data truncated")
        end = self.off + len(self.buf) + len(data) - 1
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(cdata[: len(cdata) - len(cdata) % a.itemsize])
                self.held.extend((end, fd) for fd in a)
        self.buf += data

    def frame(self):
        while len(self.buf) < 5:
            self.fill()
        tag, n = struct.unpack(">BI", self.buf[:5])
        while len(self.buf) < 5 + n:
            self.fill()
        start, end = self.off, self.off + 5 + n
        payload = self.buf[5:5 + n]
        self.buf, self.off = self.buf[5 + n:], end
        mine = [fd for at, fd in self.held if start <= at < end]
        for at, fd in self.held:
            if at < start:
                os.close(fd)  # a frame passed over
        self.held = [(at, fd) for at, fd in self.held if at >= end]
        return tag, payload, mine


def main():
    path, cap_id, mode = sys.argv[1:4]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    req = {"capability": cap_id, "params": {}, "admin": False}
    if mode != "auto":
        req["attachments"] = mode
    body = json.dumps(req).encode()
    s.sendall(struct.pack(">BI", EXECUTE_REQUEST, len(body)) + body)
    st = Stream(s)
    while True:
        tag, payload, fds = st.frame()
        if tag != PUSH_EVENT:
            break
        for fd in fds:
            os.close(fd)
    s.close()
    msg = json.loads(payload)
    out = {"tag": tag, "fds_received": len(fds)}
    if tag == ERROR_RESPONSE:
        out["error"] = msg
    else:
        res = msg["result"]
        out["status"] = res["status"]
        out["data"] = res.get("data")
        out["attachments"] = [describe(a, fds) for a in res.get("attachments", [])]
    for fd in fds:
        os.close(fd)
    print(json.dumps(out))




if __name__ == "__main__":
    main()
