// Package notify shows PCP's confirmations as desktop notifications
// (org.freedesktop.Notifications on the session bus) with Approve and Deny
// actions, and turns the user's click into the user's decision.
//
// # Who counts as the user
//
// A click counts only when the ActionInvoked signal that reports it comes
// from the notification server: its sender, which the bus daemon sets
// and no client can forge, must be the unique name that owns
// org.freedesktop.Notifications (watched with NameOwnerChanged), and its
// notification id one this Notifier created for that confirmation on that
// server. Any other ActionInvoked, broadcast or sent to pcpd's connection
// by another process of the user, does nothing. A notification id is
// good for one answer; a server that goes away takes its ids with it, and
// the pending confirmations are shown again on the next one.
//
// The Notifier never decides itself: Config.Decide carries the answer to
// the core as the user (pcpd opens a user-role session, audited as
// "user:notification"). The server's process id is handed to
// Config.OnServer so that PCP's own adapters refuse to act on the
// server's windows: an agent must not press Approve through
// invoke.action.
//
// # Concurrency
//
// Prompt, Withdraw and Close may be called from any goroutine; Prompt and
// Withdraw only queue. One worker goroutine makes the bus calls in queue
// order, one reads the signals of the current connection. mu guards the
// fields below it; no bus call is made and Config.Decide is never called
// with it held.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

// The notification service, and the actions of a confirmation's
// notification.
const (
	ServiceName   = "org.freedesktop.Notifications"
	ObjectPath    = dbus.ObjectPath("/org/freedesktop/Notifications")
	ActionApprove = "approve"
	ActionDeny    = "deny"

	busDaemon = "org.freedesktop.DBus"
)

// Decider carries the user's answer to the broker: approve or deny the
// confirmation, as the user.
type Decider func(ctx context.Context, confirmationID string, approve bool) error

// Config configures a Notifier.
type Config struct {
	// BusAddress is the session bus; empty means
	// DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus. A bus is never
	// launched.
	BusAddress string
	// Decide is called with the user's answer. Required.
	Decide Decider
	// OnServer, when set, is told the unique bus name and process id of
	// the notification server each time it changes ("" and 0 when there
	// is none), before anything is shown on it.
	OnServer func(busName string, pid int)
	// CallTimeout bounds each bus call (default 2 s).
	CallTimeout time.Duration
	// AppName is the application name notifications carry (default
	// "PCP").
	AppName string
	Logger  *slog.Logger
}

// Notifier shows confirmations as notifications. It implements
// core.ConfirmationPrompter.
type Notifier struct {
	cfg    Config
	log    *slog.Logger
	life   context.Context // ends at Close
	cancel context.CancelFunc
	wake   chan struct{}
	wg     sync.WaitGroup // the worker and the signal readers
	// dropped counts signals dropped because the queue was full.
	dropped atomic.Uint64

	// dialMu serialises connecting; it is taken before mu.
	dialMu sync.Mutex
	// mu guards the fields below.
	mu       sync.Mutex
	queue    []op
	conn     *dbus.Conn
	owner    string // unique name of the notification server; "" when none
	known    bool   // owner has been looked up
	markup   bool   // the server reads markup in bodies
	dialedAt time.Time
	dialErr  error
	// shown holds the confirmations to show or shown, by confirmation
	// id, until withdrawn; byNote the notifications shown on owner, by
	// notification id, while they may still be answered.
	shown  map[string]*entry
	byNote map[uint32]string
	closed bool
}

type entry struct {
	info api.Confirmation
	note uint32 // 0 until shown on the current server
}

// op is one bus call for the worker: show a confirmation, or close a
// notification of a server.
type op struct {
	show  string // confirmation id
	close uint32
	owner string // the server of close
}

// redialInterval bounds how often a failed connection is retried.
const redialInterval = time.Second

// New returns a Notifier; it connects on first use, or at Connect.
func New(cfg Config) *Notifier {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 2 * time.Second
	}
	if cfg.AppName == "" {
		cfg.AppName = "PCP"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1), shown: map[string]*entry{}, byNote: map[uint32]string{}}
	n.life, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(1)
	go n.worker()
	return n
}

// Connect connects to the session bus now and finds the notification
// server (starting it if the bus can activate one). It is idempotent.
func (n *Notifier) Connect(ctx context.Context) error {
	_, err := n.connection(ctx)
	return err
}

// Server returns the unique bus name of the notification server, "" when
// there is none (or no connection yet).
func (n *Notifier) Server() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.owner
}

// BusName returns the Notifier's own unique name on the session bus, ""
// before it connects.
func (n *Notifier) BusName() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return ""
	}
	return n.conn.Names()[0]
}

// Prompt shows a pending confirmation. It only queues.
func (n *Notifier) Prompt(ctx context.Context, c api.Confirmation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.shown[c.ConfirmationID] != nil {
		return
	}
	n.shown[c.ConfirmationID] = &entry{info: c}
	n.pushLocked(op{show: c.ConfirmationID})
}

// Withdraw takes down a confirmation's notification. It only queues.
func (n *Notifier) Withdraw(confirmationID string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.shown[confirmationID]
	if e == nil {
		return
	}
	delete(n.shown, confirmationID)
	if e.note != 0 {
		delete(n.byNote, e.note)
		n.pushLocked(op{close: e.note, owner: n.owner})
	}
}

func (n *Notifier) pushLocked(o op) {
	n.queue = append(n.queue, o)
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Close takes down every notification still shown (their confirmations
// can no longer be used once pcpd goes) and disconnects.
func (n *Notifier) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	conn, owner := n.conn, n.owner
	var notes []uint32
	for note := range n.byNote {
		notes = append(notes, note)
	}
	n.shown, n.byNote, n.queue = map[string]*entry{}, map[uint32]string{}, nil
	n.mu.Unlock()
	if conn != nil && owner != "" {
		for _, note := range notes {
			n.closeNote(context.Background(), conn, owner, note)
		}
	}
	n.cancel() // ends the worker, and a dial in progress
	n.mu.Lock()
	conn, n.conn = n.conn, nil
	n.mu.Unlock()
	if conn != nil {
		conn.Close() // ends its signal reader
	}
	n.wg.Wait()
	return nil
}

// worker makes the queued bus calls, in order.
func (n *Notifier) worker() {
	defer n.wg.Done()
	for {
		select {
		case <-n.life.Done():
			return
		case <-n.wake:
		}
		for {
			n.mu.Lock()
			if len(n.queue) == 0 || n.closed {
				n.mu.Unlock()
				break
			}
			o := n.queue[0]
			n.queue = n.queue[1:]
			n.mu.Unlock()
			if o.show != "" {
				n.show(o.show)
			} else {
				n.mu.Lock()
				conn := n.conn
				n.mu.Unlock()
				if conn != nil && o.owner != "" {
					n.closeNote(n.life, conn, o.owner, o.close)
				}
			}
		}
	}
}

// show puts one confirmation on the notification server.
func (n *Notifier) show(id string) {
	conn, err := n.connection(n.life)
	if err != nil {
		n.log.Warn("no session bus: confirmation not shown as a notification; pcpctl confirm still decides it", "confirmation_id", id, "err", err)
		return
	}
	n.mu.Lock()
	e, owner, markup := n.shown[id], n.owner, n.markup
	if e == nil || e.note != 0 || owner == "" {
		// Withdrawn, shown already, or no server yet: one that appears
		// is given every confirmation still waiting.
		n.mu.Unlock()
		return
	}
	info := e.info
	n.mu.Unlock()

	summary, body := Text(info, markup)
	hints := map[string]dbus.Variant{"urgency": dbus.MakeVariant(byte(2))}
	actions := []string{ActionApprove, "Approve", ActionDeny, "Deny"}
	ctx, cancel := context.WithTimeout(n.life, n.cfg.CallTimeout)
	var note uint32
	// Sent to the server's unique name: the id it returns is that
	// server's, whoever owns the well-known name by then.
	err = conn.Object(owner, ObjectPath).CallWithContext(ctx, ServiceName+".Notify", 0,
		n.cfg.AppName, uint32(0), "dialog-question", summary, body, actions, hints, int32(0)).Store(&note)
	cancel()
	if err != nil {
		n.log.Warn("the notification server refused a confirmation; pcpctl confirm still decides it", "confirmation_id", id, "server", owner, "err", err)
		return
	}
	n.mu.Lock()
	if n.shown[id] != e || n.owner != owner {
		// Withdrawn while it was being shown, or the server changed.
		n.mu.Unlock()
		n.closeNote(n.life, conn, owner, note)
		return
	}
	e.note = note
	n.byNote[note] = id
	n.mu.Unlock()
	n.log.Debug("confirmation shown", "confirmation_id", id, "notification_id", note, "server", owner)
}

func (n *Notifier) closeNote(ctx context.Context, conn *dbus.Conn, owner string, note uint32) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.CallTimeout)
	defer cancel()
	if err := conn.Object(owner, ObjectPath).CallWithContext(ctx, ServiceName+".CloseNotification", 0, note).Err; err != nil {
		n.log.Debug("closing a notification", "notification_id", note, "err", err)
	}
}

// connection returns the bus connection, connecting if need be, at most
// once per redialInterval.
func (n *Notifier) connection(ctx context.Context) (*dbus.Conn, error) {
	// One dial at a time: Connect and the worker may both ask.
	n.dialMu.Lock()
	defer n.dialMu.Unlock()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("notifier closed")
	}
	if n.conn != nil && n.conn.Connected() {
		c := n.conn
		n.mu.Unlock()
		return c, nil
	}
	if n.dialErr != nil && time.Since(n.dialedAt) < redialInterval {
		err := n.dialErr
		n.mu.Unlock()
		return nil, err
	}
	n.dialedAt = time.Now()
	n.mu.Unlock()

	c, sigs, err := n.dial(ctx)
	n.mu.Lock()
	if err == nil && n.closed {
		err = errors.New("notifier closed")
		c.Close()
	}
	n.dialErr = err
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	n.conn = c
	n.wg.Add(1)
	go n.readSignals(c, sigs)
	n.mu.Unlock()
	n.findServer(ctx, c)
	return c, nil
}

func (n *Notifier) dial(ctx context.Context) (*dbus.Conn, *sigQueue, error) {
	addr, err := n.address()
	if err != nil {
		return nil, nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 3*n.cfg.CallTimeout)
	defer cancel()
	connCtx, closeConn := context.WithCancel(n.life)
	// godbus's Auth and Hello take no context; cancelling the
	// connection's own context closes it, which ends them.
	stop := context.AfterFunc(dctx, closeConn)
	defer stop()
	sigs := newSigQueue(256, &n.dropped)
	c, err := dbus.Dial(addr, dbus.WithSignalHandler(sigs), dbus.WithContext(connCtx))
	if err != nil {
		closeConn()
		return nil, nil, fmt.Errorf("connecting to the session bus %s: %w", addr, err)
	}
	if err = c.Auth(nil); err == nil {
		err = c.Hello()
	}
	if err == nil {
		err = dctx.Err()
	}
	if err == nil {
		// The server's broadcasts (other servers broadcast what dunst
		// sends to the notification's client alone), and the changes
		// of owner.
		err = c.AddMatchSignalContext(dctx, dbus.WithMatchSender(ServiceName), dbus.WithMatchObjectPath(ObjectPath), dbus.WithMatchInterface(ServiceName))
	}
	if err == nil {
		err = c.AddMatchSignalContext(dctx, dbus.WithMatchSender(busDaemon), dbus.WithMatchInterface(busDaemon),
			dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, ServiceName))
	}
	if err != nil {
		closeConn()
		c.Close()
		return nil, nil, fmt.Errorf("connecting to the session bus %s: %w", addr, err)
	}
	return c, sigs, nil
}

func (n *Notifier) address() (string, error) {
	if n.cfg.BusAddress != "" {
		return n.cfg.BusAddress, nil
	}
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" {
		return a, nil
	}
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" {
		p := filepath.Join(rt, "bus")
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return "unix:path=" + p, nil
		}
	}
	return "", errors.New("no session bus: DBUS_SESSION_BUS_ADDRESS is unset and $XDG_RUNTIME_DIR/bus does not exist")
}

// findServer asks who owns the notification service, starting it when
// the bus can, and makes it the server.
func (n *Notifier) findServer(ctx context.Context, c *dbus.Conn) {
	ctx, cancel := context.WithTimeout(ctx, 3*n.cfg.CallTimeout)
	defer cancel()
	var owner string
	if c.BusObject().CallWithContext(ctx, busDaemon+".GetNameOwner", 0, ServiceName).Store(&owner) != nil {
		var started uint32
		if err := c.BusObject().CallWithContext(ctx, busDaemon+".StartServiceByName", 0, ServiceName, uint32(0)).Store(&started); err != nil {
			n.log.Warn("no notification server on the session bus; confirmations wait for pcpctl confirm until one appears", "err", err)
		} else if c.BusObject().CallWithContext(ctx, busDaemon+".GetNameOwner", 0, ServiceName).Store(&owner) != nil {
			owner = ""
		}
	}
	n.setServer(ctx, c, owner)
}

// setServer makes owner the notification server: the ids of the last one
// are void, and every confirmation still waiting is shown on the new one.
func (n *Notifier) setServer(ctx context.Context, c *dbus.Conn, owner string) {
	n.mu.Lock()
	same := n.known && n.owner == owner
	n.mu.Unlock()
	if same {
		return
	}
	pid, markup := 0, false
	if owner != "" {
		var p uint32
		if err := c.BusObject().CallWithContext(ctx, busDaemon+".GetConnectionUnixProcessID", 0, owner).Store(&p); err == nil {
			pid = int(p)
		}
		var caps []string
		if err := c.Object(owner, ObjectPath).CallWithContext(ctx, ServiceName+".GetCapabilities", 0).Store(&caps); err != nil {
			n.log.Warn("the notification server does not answer GetCapabilities", "server", owner, "err", err)
		}
		actions := false
		for _, cp := range caps {
			actions = actions || cp == "actions"
			markup = markup || cp == "body-markup"
		}
		var name, vendor, version, spec string
		if c.Object(owner, ObjectPath).CallWithContext(ctx, ServiceName+".GetServerInformation", 0).Store(&name, &vendor, &version, &spec) == nil && name == "dunst" {
			// dunst reads markup without saying so.
			markup = true
		}
		if !actions {
			n.log.Warn("the notification server shows no actions: answer confirmations with pcpctl confirm", "server", owner, "name", name)
		}
	}
	// The adapters learn of the server before it shows anything.
	if n.cfg.OnServer != nil {
		n.cfg.OnServer(owner, pid)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn != c || n.closed {
		return
	}
	n.owner, n.markup, n.known = owner, markup, true
	n.byNote = map[uint32]string{}
	for id, e := range n.shown {
		e.note = 0
		if owner != "" {
			n.pushLocked(op{show: id})
		}
	}
}

// readSignals handles the signals of one connection until it closes.
func (n *Notifier) readSignals(c *dbus.Conn, q *sigQueue) {
	defer n.wg.Done()
	for {
		var sig *dbus.Signal
		select {
		case <-q.done:
			return
		case sig = <-q.ch:
		}
		n.handle(c, sig)
	}
}

func (n *Notifier) handle(c *dbus.Conn, sig *dbus.Signal) {
	switch {
	case sig.Name == busDaemon+".NameOwnerChanged" && sig.Sender == busDaemon:
		var name, old, owner string
		if dbus.Store(sig.Body, &name, &old, &owner) != nil || name != ServiceName {
			return
		}
		n.log.Info("notification server changed", "old", old, "new", owner)
		ctx, cancel := context.WithTimeout(n.life, 3*n.cfg.CallTimeout)
		n.setServer(ctx, c, owner)
		cancel()
	case sig.Name == ServiceName+".ActionInvoked":
		var note uint32
		var key string
		if sig.Path != ObjectPath || dbus.Store(sig.Body, &note, &key) != nil {
			return
		}
		n.actionInvoked(sig.Sender, note, key)
	case sig.Name == ServiceName+".NotificationClosed":
		var note, reason uint32
		if sig.Path != ObjectPath || dbus.Store(sig.Body, &note, &reason) != nil {
			return
		}
		n.mu.Lock()
		if sig.Sender == n.owner && n.owner != "" {
			if id, ok := n.byNote[note]; ok {
				// Dismissed: the confirmation waits on, for pcpctl.
				delete(n.byNote, note)
				if e := n.shown[id]; e != nil && e.note == note {
					e.note = 0
				}
			}
		}
		n.mu.Unlock()
	}
}

// actionInvoked decides a confirmation when the click is the user's: the
// signal comes from the notification server, for a notification this
// Notifier showed there.
func (n *Notifier) actionInvoked(sender string, note uint32, key string) {
	n.mu.Lock()
	if sender == "" || sender != n.owner {
		owner := n.owner
		n.mu.Unlock()
		n.log.Warn("ignored an ActionInvoked that the notification server did not send", "sender", sender, "server", owner, "notification_id", note, "action", key)
		return
	}
	id, ok := n.byNote[note]
	if !ok || (key != ActionApprove && key != ActionDeny) {
		n.mu.Unlock()
		return
	}
	// One answer per notification; Withdraw, which the decision brings,
	// closes it (dunst keeps a notification answered from its menu).
	delete(n.byNote, note)
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(n.life, 10*time.Second)
	defer cancel()
	if err := n.cfg.Decide(ctx, id, key == ActionApprove); err != nil {
		n.log.Warn("the user's answer from the notification was not taken", "confirmation_id", id, "action", key, "err", err)
	}
}

// sigQueue is the connection's signal handler: a bounded queue, so that
// a flood of signals costs a bounded amount of memory (godbus's own
// handler starts a goroutine per signal it cannot deliver at once).
type sigQueue struct {
	ch       chan *dbus.Signal
	done     chan struct{}
	once     sync.Once
	dropped  *atomic.Uint64
	mu       sync.RWMutex
	finished bool
}

func newSigQueue(n int, dropped *atomic.Uint64) *sigQueue {
	return &sigQueue{ch: make(chan *dbus.Signal, n), done: make(chan struct{}), dropped: dropped}
}

// DeliverSignal implements dbus.SignalHandler.
func (q *sigQueue) DeliverSignal(iface, name string, sig *dbus.Signal) {
	if iface != ServiceName && iface != busDaemon {
		return
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.finished {
		return
	}
	select {
	case q.ch <- sig:
	default:
		q.dropped.Add(1)
	}
}

// Terminate implements dbus.Terminator: the connection closed.
func (q *sigQueue) Terminate() {
	q.once.Do(func() {
		q.mu.Lock()
		q.finished = true
		q.mu.Unlock()
		close(q.done)
	})
}
