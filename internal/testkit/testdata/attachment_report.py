"""What PCP's attachment peers (internal/daemon/testdata/attach_peer.py,
internal/face/stream/testdata/framed_attach_peer.py) report of one
attachment: its size, whether its memfd is a sealed regular file that
refuses writes, and the SHA-256 of what it holds, read from the
descriptor or from the inline base64."""

import base64, fcntl, hashlib, os, stat

SEALS = {"shrink": fcntl.F_SEAL_SHRINK, "grow": fcntl.F_SEAL_GROW,
         "write": fcntl.F_SEAL_WRITE, "seal": fcntl.F_SEAL_SEAL}

def describe(a, fds):
    d = {"name": a["name"], "media_type": a["media_type"], "size": a["size"]}
    if "fd" in a:
        fd = fds[a["fd"]]
        st = os.fstat(fd)
        d["fd"] = a["fd"]
        d["regular_file"] = stat.S_ISREG(st.st_mode)
        d["file_size"] = st.st_size
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        d["seals"] = sorted(k for k, v in SEALS.items() if seals & v)
        try:
            os.pwrite(fd, b"x", 0)
            d["writable"] = True
        except OSError:
            d["writable"] = False
        data = b""
        while len(data) < st.st_size:
            chunk = os.pread(fd, st.st_size - len(data), len(data))
            if not chunk:
                break
            data += chunk
    else:
        data = base64.b64decode(a["data"])
        d["inline"] = True
    d["read"] = len(data)
    d["sha256"] = hashlib.sha256(data).hexdigest()
    return d
