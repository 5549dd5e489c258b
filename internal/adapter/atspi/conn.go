package atspi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
)

// Well-known names and paths of AT-SPI2.
const (
	registryName = "org.a11y.atspi.Registry"
	registryPath = dbus.ObjectPath("/org/a11y/atspi/registry")
	rootPath     = dbus.ObjectPath("/org/a11y/atspi/accessible/root")
	cachePath    = dbus.ObjectPath("/org/a11y/atspi/cache")

	ifaceAccessible   = "org.a11y.atspi.Accessible"
	ifaceAction       = "org.a11y.atspi.Action"
	ifaceApplication  = "org.a11y.atspi.Application"
	ifaceComponent    = "org.a11y.atspi.Component"
	ifaceEditableText = "org.a11y.atspi.EditableText"
	ifaceSelection    = "org.a11y.atspi.Selection"
	ifaceText         = "org.a11y.atspi.Text"
	ifaceValue        = "org.a11y.atspi.Value"
	ifaceProperties   = "org.freedesktop.DBus.Properties"
)

// dialBus opens a connection to the accessibility bus: Auth and Hello,
// bounded by ctx. The connection lives until life ends or it is closed.
func dialBus(ctx, life context.Context, addr string, h dbus.SignalHandler) (*dbus.Conn, error) {
	return dialWith(ctx, life, addr, h, true)
}

// dialPeer opens a peer-to-peer connection to an application's own D-Bus
// server (the address Application.GetApplicationBusAddress gives): Auth,
// no Hello, since there is no bus daemon.
func dialPeer(ctx, life context.Context, addr string) (*dbus.Conn, error) {
	return dialWith(ctx, life, addr, discardSignals{}, false)
}

func dialWith(ctx, life context.Context, addr string, h dbus.SignalHandler, hello bool) (*dbus.Conn, error) {
	connCtx, cancel := context.WithCancel(life)
	// godbus's Auth and Hello take no context; cancelling the
	// connection's own context closes it, which ends them.
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	c, err := dbus.Dial(addr, dbus.WithSignalHandler(h), dbus.WithContext(connCtx))
	if err != nil {
		cancel()
		return nil, err
	}
	err = c.Auth(nil)
	if err == nil && hello {
		err = c.Hello()
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		c.Close()
		return nil, err
	}
	return c, nil
}

// busAddress finds the accessibility bus: the configured address, then
// AT_SPI_BUS_ADDRESS, then org.a11y.Bus.GetAddress on the session bus.
func busAddress(ctx context.Context, configured string, callTimeout time.Duration) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if v := os.Getenv("AT_SPI_BUS_ADDRESS"); v != "" {
		return v, nil
	}
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" {
		return "", errors.New("neither AT_SPI_BUS_ADDRESS nor DBUS_SESSION_BUS_ADDRESS is set")
	}
	dctx, cancel := context.WithTimeout(ctx, 2*callTimeout)
	defer cancel()
	sess, err := dbus.SessionBusPrivateNoAutoStartup(dbus.WithContext(dctx))
	if err != nil {
		return "", fmt.Errorf("session bus: %w", err)
	}
	defer sess.Close()
	if err := sess.Auth(nil); err != nil {
		return "", fmt.Errorf("session bus: %w", err)
	}
	if err := sess.Hello(); err != nil {
		return "", fmt.Errorf("session bus: %w", err)
	}
	var addr string
	if err := sess.Object("org.a11y.Bus", "/org/a11y/bus").CallWithContext(dctx, "org.a11y.Bus.GetAddress", 0).Store(&addr); err != nil {
		return "", fmt.Errorf("org.a11y.Bus.GetAddress: %w", err)
	}
	if addr == "" {
		return "", errors.New("org.a11y.Bus.GetAddress gave an empty address")
	}
	return addr, nil
}

// discardSignals drops every signal: peer-to-peer connections carry
// nothing the adapter listens to (events come through the bus).
type discardSignals struct{}

func (discardSignals) DeliverSignal(string, string, *dbus.Signal) {}

// sigQueue receives the bus connection's signals in order. godbus calls
// DeliverSignal from its reader goroutine, which must not block; the
// queue holds at most max signals, and on overflow drops the newest and
// remembers that it did, so the event loop can distrust every cache
// instead of trusting one that missed a change.
type sigQueue struct {
	max    int
	notify chan struct{} // capacity 1: "there is something to take"

	mu       sync.Mutex // guards the fields below
	buf      []*dbus.Signal
	overflow bool
	dropped  uint64
	received uint64
}

func newSigQueue(max int) *sigQueue {
	return &sigQueue{max: max, notify: make(chan struct{}, 1)}
}

func (q *sigQueue) DeliverSignal(_, _ string, s *dbus.Signal) {
	q.mu.Lock()
	q.received++
	if len(q.buf) >= q.max {
		q.overflow = true
		q.dropped++
	} else {
		q.buf = append(q.buf, s)
	}
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// take returns the queued signals and whether any were dropped since the
// last take.
func (q *sigQueue) take() ([]*dbus.Signal, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, o := q.buf, q.overflow
	q.buf, q.overflow = nil, false
	return b, o
}

func (q *sigQueue) counts() (received, dropped uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.received, q.dropped
}

// req is one method call of a batch.
type req struct {
	path   dbus.ObjectPath
	method string // "interface.Member"
	args   []any
	// props, for a Properties.GetAll, are the properties the caller
	// reads: what a toolkit without GetAll is asked (nil: knownProps).
	props []string

	body []any
	err  error
}

func newReq(path dbus.ObjectPath, method string, args ...any) *req {
	return &req{path: path, method: method, args: args}
}

func getProp(path dbus.ObjectPath, iface, prop string) *req {
	return newReq(path, ifaceProperties+".Get", iface, prop)
}

// getAllProps reads the properties of iface: Properties.GetAll where the
// toolkit answers it, else props (default: knownProps) one by one.
func getAllProps(path dbus.ObjectPath, iface string, props ...string) *req {
	r := newReq(path, ifaceProperties+".GetAll", iface)
	r.props = props
	return r
}

// value returns the first value of the reply, unwrapping a variant.
func (r *req) value() any {
	if r.err != nil || len(r.body) == 0 {
		return nil
	}
	if v, ok := r.body[0].(dbus.Variant); ok {
		return v.Value()
	}
	return r.body[0]
}

// isGone reports whether a D-Bus error says the object or application no
// longer exists.
func isGone(err error) bool {
	var de dbus.Error
	if errors.As(err, &de) {
		switch de.Name {
		case "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.ServiceUnknown",
			"org.freedesktop.DBus.Error.NameHasNoOwner", "org.freedesktop.DBus.Error.UnknownMethod",
			"org.freedesktop.DBus.Error.UnknownInterface":
			return true
		}
		return strings.Contains(de.Name, "UnknownObject")
	}
	return false
}

// isUnknownMethod reports whether the peer does not implement a method.
func isUnknownMethod(err error) bool {
	var de dbus.Error
	if errors.As(err, &de) {
		switch de.Name {
		case "org.freedesktop.DBus.Error.UnknownMethod", "org.freedesktop.DBus.Error.UnknownInterface",
			"org.freedesktop.DBus.Error.InvalidArgs":
			return true
		}
	}
	return false
}

// runBatch sends reqs on conn to dest with at most inflight calls
// outstanding and each call bounded by timeout, and fills each req's
// body or err. sem, shared by every batch to one application, bounds the
// calls in flight to it across batches. It returns early only when ctx
// ends; reqs not sent then carry ctx's error.
func runBatch(ctx context.Context, conn *dbus.Conn, dest string, sem chan struct{}, timeout time.Duration, reqs []*req, calls *atomic.Uint64) {
	if len(reqs) == 0 {
		return
	}
	calls.Add(uint64(len(reqs)))
	type pending struct {
		r      *req
		cancel context.CancelFunc
	}
	done := make(chan *dbus.Call, cap(sem))
	out := make(map[*dbus.Call]pending, cap(sem))
	next := 0
	finish := func(c *dbus.Call) {
		p := out[c]
		delete(out, c)
		p.cancel()
		<-sem
		p.r.body, p.r.err = c.Body, c.Err
	}
	for next < len(reqs) || len(out) > 0 {
		if next < len(reqs) && ctx.Err() == nil {
			select {
			case sem <- struct{}{}:
				r := reqs[next]
				next++
				cctx, cancel := context.WithTimeout(ctx, timeout)
				c := conn.Object(dest, r.path).(*dbus.Object).GoWithContext(cctx, r.method, 0, done, r.args...)
				out[c] = pending{r, cancel}
			case c := <-done:
				finish(c)
			case <-ctx.Done():
			}
			continue
		}
		if len(out) == 0 {
			break
		}
		finish(<-done)
	}
	for ; next < len(reqs); next++ {
		reqs[next].err = ctx.Err()
	}
}
