package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	sdkrpc "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/deadline"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// lineConn is MCP's stdio framing (one JSON-RPC message a line) over a
// stream socket, as an sdk.Transport and sdk.Connection. It replaces the
// SDK's IOTransport because the wire is hostile and IOTransport ends the
// session at the first bad byte: here every line is bounded (MaxLine,
// and the daemon's budget for long lines), an oversized line is skipped
// to its newline and answered INVALID_REQUEST under the id its prefix
// names, a line that is not JSON is answered PARSE_ERROR, a batch (MCP
// dropped batches in 2025-06-18) INVALID_REQUEST, and the stream stays
// in sync. A line begun must arrive whole within the message timeout. A
// write that the peer does not read within the write timeout closes the
// connection, so a client that never reads holds nothing but its own
// session.
//
// Concurrency: Read is called by the SDK's read loop alone; Write may be
// called concurrently (wmu serialises them) and concurrently with Read;
// Close may be called at any time, more than once.
type lineConn struct {
	c            net.Conn
	lr           *jsonrpc.LineReader
	dl           *deadline.Reader // nil without a message timeout
	msgTimeout   time.Duration
	writeTimeout time.Duration
	onProtocol   func(*api.Error)

	wmu sync.Mutex

	// pmu guards pending, the requests read and not yet answered, and
	// answered, which is signalled when one is.
	pmu      sync.Mutex
	pending  int
	answered chan struct{}

	closeOnce sync.Once
	// done is closed when the connection closes.
	done chan struct{}
}

func newLineConn(c net.Conn, o *Options) *lineConn {
	lc := &lineConn{c: c, msgTimeout: o.MessageTimeout, writeTimeout: o.WriteTimeout, onProtocol: o.onProtocol, done: make(chan struct{}), answered: make(chan struct{}, 1)}
	var src io.Reader = c
	if o.MessageTimeout > 0 {
		lc.dl = deadline.NewReader(c, c, 0, o.MessageTimeout)
		src = lc.dl
	}
	lc.lr = jsonrpc.NewLineReader(src, o.MaxLine)
	lc.lr.Deadlines = lc.dl
	lc.lr.Budget = o.LineBudget
	return lc
}

// Connect implements sdk.Transport: the connection is its own transport.
func (l *lineConn) Connect(context.Context) (sdk.Connection, error) { return l, nil }

// SessionID implements sdk.Connection; a stream has no MCP session id.
func (l *lineConn) SessionID() string { return "" }

// Read returns the next well-formed message, answering the malformed
// ones on its way.
func (l *lineConn) Read(ctx context.Context) (sdkrpc.Message, error) {
	for {
		line, err := l.lr.ReadLine()
		switch {
		case errors.Is(err, jsonrpc.ErrLineTooLong):
			l.refuse(jsonrpc.RecoverID(l.lr.SkippedPrefix), &api.Error{Code: api.CodeInvalidRequest,
				Message: fmt.Sprintf("line of %d bytes exceeds the limit of %d bytes", l.lr.Skipped, l.lr.Max()),
				Data:    map[string]any{"limit": l.lr.Max(), "size": l.lr.Skipped}})
			continue
		case errors.Is(err, jsonrpc.ErrNoLineBudget):
			l.refuse(jsonrpc.RecoverID(l.lr.SkippedPrefix), &api.Error{Code: api.CodeRateLimited,
				Message: fmt.Sprintf("line of %d bytes refused: the daemon's memory for long lines is in use; retry later", l.lr.Skipped),
				Data:    map[string]any{"scope": "line_memory", "size": l.lr.Skipped}})
			continue
		case errors.Is(err, os.ErrDeadlineExceeded) && l.dl != nil && l.dl.InMessage():
			l.refuse(nil, &api.Error{Code: api.CodeInvalidRequest,
				Message: fmt.Sprintf("a line must arrive whole within %v of its first byte; closing", l.msgTimeout),
				Data:    map[string]any{"timeout_ms": l.msgTimeout.Milliseconds()}})
			return nil, err
		case errors.Is(err, io.EOF):
			// The peer has sent all it will (pcpctl mcp at the end of its
			// input): answer what it asked before ending the session.
			l.awaitAnswers()
			return nil, io.EOF
		case err != nil:
			if errors.Is(err, net.ErrClosed) {
				err = io.EOF
			}
			return nil, err
		}
		msg, perr := decodeLine(line)
		if perr != nil {
			l.refuse(nil, perr)
			continue
		}
		if req, ok := msg.(*sdkrpc.Request); ok && req.ID.IsValid() {
			l.pmu.Lock()
			l.pending++
			l.pmu.Unlock()
		}
		if msg != nil {
			return msg, nil
		}
	}
}

// decodeLine decodes one line into an MCP message. A blank line is
// skipped (nil, nil); anything else that is not one JSON-RPC 2.0 message
// is the error to answer.
func decodeLine(line []byte) (sdkrpc.Message, *api.Error) {
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
		i++
	}
	if i == len(line) {
		return nil, nil
	}
	if line[i] == '[' {
		return nil, &api.Error{Code: api.CodeInvalidRequest, Message: "JSON-RPC batches are not supported by MCP since 2025-06-18; send one message a line"}
	}
	// The SDK's decoder may alias its input, which the line reader reuses.
	msg, err := sdkrpc.DecodeMessage(append([]byte(nil), line...))
	if err != nil {
		if !json.Valid(line) {
			return nil, &api.Error{Code: api.CodeParseError, Message: "parse error: the line is not JSON"}
		}
		return nil, &api.Error{Code: api.CodeInvalidRequest, Message: "not a JSON-RPC 2.0 message: " + err.Error()}
	}
	return msg, nil
}

// refuse answers a line that could not be served, under id (null when
// unknown).
func (l *lineConn) refuse(id []byte, e *api.Error) {
	if l.onProtocol != nil {
		l.onProtocol(e)
	}
	l.writeLine(append(jsonrpc.AppendError(nil, id, e), '\n'))
}

// Write implements sdk.Connection.
func (l *lineConn) Write(ctx context.Context, msg sdkrpc.Message) error {
	data, err := sdkrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("mcp: encoding a message: %w", err)
	}
	err = l.writeLine(append(data, '\n'))
	if _, ok := msg.(*sdkrpc.Response); ok {
		l.pmu.Lock()
		l.pending--
		l.pmu.Unlock()
		select {
		case l.answered <- struct{}{}:
		default:
		}
	}
	return err
}

// awaitAnswers waits until every request read has been answered, or the
// connection closes.
func (l *lineConn) awaitAnswers() {
	for {
		l.pmu.Lock()
		n := l.pending
		l.pmu.Unlock()
		if n <= 0 {
			return
		}
		select {
		case <-l.answered:
		case <-l.done:
			return
		}
	}
}

func (l *lineConn) writeLine(b []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	select {
	case <-l.done:
		return net.ErrClosed
	default:
	}
	if l.writeTimeout > 0 {
		l.c.SetWriteDeadline(time.Now().Add(l.writeTimeout))
	}
	if _, err := l.c.Write(b); err != nil {
		// A peer that does not read: let go of it.
		l.Close()
		return err
	}
	return nil
}

// Close implements sdk.Connection.
func (l *lineConn) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.c.Close()
	})
	return err
}
