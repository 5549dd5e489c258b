package daemon

import (
	"bufio"
	"net"
)

// peekedConn is a connection whose first byte has been read to tell the
// faces apart; Read returns it again first.
type peekedConn struct {
	*net.UnixConn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// isFramed tells the two faces of the Unix sockets apart by the first
// byte a client sends. A JSON-RPC message starts with '{' or '[' or JSON
// whitespace; a frame starts with its type tag, 1..27. Tab, line feed and
// carriage return are whitespace and also the tags of Pong,
// RegisterCapability and QueryCapabilities, none of which a client may
// send, so they count as JSON-RPC. Any other byte is given to JSON-RPC,
// which answers it with a parse error.
func isFramed(b byte) bool {
	switch b {
	case '\t', '\n', '\r':
		return false
	}
	return b >= 1 && b <= 27
}
