package pavo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
)

// Caller makes one call to pcpd: method with params, the result decoded
// into result (a *json.RawMessage keeps it as it came). Errors from the
// daemon are *api.Error. *client.Client is a Caller; so is Redial. The
// driver calls it from one goroutine at a time.
type Caller interface {
	Call(ctx context.Context, method string, params, result any) error
}

// Conn is a connection Redial dials: a Caller that says when it ended.
// *client.Client is a Conn.
type Conn interface {
	Caller
	Done() <-chan struct{}
	Close() error
}

// Redial is a Caller that dials pcpd on first use and again whenever the
// connection it holds has ended (pcpd stopped or restarted), so the
// driver outlives the daemon. A call that fails because the connection
// closed under it is retried once on a new connection when the method
// only reads; a write is never sent twice.
//
// mu guards conn; a dial happens under it, so concurrent callers wait for
// one dial rather than making several.
type Redial struct {
	Dial func(ctx context.Context) (Conn, error)

	mu   sync.Mutex
	conn Conn
}

// Call runs method on the current connection, dialing one if needed.
func (r *Redial) Call(ctx context.Context, method string, params, result any) error {
	c, err := r.get(ctx)
	if err != nil {
		return err
	}
	err = c.Call(ctx, method, params, result)
	if err == nil || !errors.Is(err, net.ErrClosed) {
		return err
	}
	r.drop(c)
	if !readOnly(method) {
		return errClosed
	}
	if c, err = r.get(ctx); err != nil {
		return err
	}
	err = c.Call(ctx, method, params, result)
	if errors.Is(err, net.ErrClosed) {
		r.drop(c)
		return errClosed
	}
	return err
}

// Close closes the current connection, if any. A later Call dials again.
func (r *Redial) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return nil
	}
	err := r.conn.Close()
	r.conn = nil
	return err
}

func (r *Redial) get(ctx context.Context) (Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		select {
		case <-r.conn.Done():
			r.conn.Close()
			r.conn = nil
		default:
			return r.conn, nil
		}
	}
	if r.Dial == nil {
		return nil, errNoDaemon
	}
	c, err := r.Dial(ctx)
	if err != nil {
		return nil, &unreachableError{err: err}
	}
	r.conn = c
	return c, nil
}

func (r *Redial) drop(c Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == c {
		r.conn.Close()
		r.conn = nil
	}
}

var (
	errNoDaemon = errors.New("no connection to pcpd is configured")
	errClosed   = errors.New("pcpd closed the connection")
)

// unreachableError is a failed dial.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return "pcpd is not reachable: " + e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// callError is a failed call to pcpd: Error() reads "METHOD: NAME:
// message" for a daemon error, "METHOD: what went wrong" otherwise.
type callError struct {
	method string
	err    error
}

func (e *callError) Error() string {
	var pe *api.Error
	if errors.As(e.err, &pe) {
		msg := pe.Message
		if msg == "" {
			info, _ := pe.Code.Info()
			msg = info.Message
		}
		return fmt.Sprintf("%s: %s: %s", e.method, pe.Code.Name(), msg)
	}
	return e.method + ": " + e.err.Error()
}

func (e *callError) Unwrap() error { return e.err }

// pcpError returns the daemon's error inside err, if it is one.
func pcpError(err error) *api.Error {
	var pe *api.Error
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// call makes one call to pcpd within the driver's call timeout.
func (d *Driver) call(ctx context.Context, method string, params, result any) error {
	if d.Daemon == nil {
		return &callError{method, errNoDaemon}
	}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if d.CallTimeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, d.CallTimeout)
	}
	defer cancel()
	err := d.Daemon.Call(cctx, method, params, result)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no reply from pcpd within %s", d.CallTimeout.Round(time.Millisecond))
	}
	return &callError{method, err}
}

// readOnlyMethods are the daemon methods that change nothing (as
// api.Methods marks them): the only ones the query op calls as raw
// operations, and the only ones Redial retries. Sorted.
var readOnlyMethods = api.ReadOnlyMethods()

func readOnly(method string) bool {
	m, ok := api.LookupMethod(method)
	return ok && m.ReadOnly
}
