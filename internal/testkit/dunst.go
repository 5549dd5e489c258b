package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

// Dunst is Debian's dunst notification daemon, serving
// org.freedesktop.Notifications on a Desktop's session bus and drawing on
// its X display. Its context menu, which lists the actions of the
// notifications shown, is answered by a script in place of dmenu: Answer
// picks an action there the way a user picks it with the mouse, and dunst
// then emits ActionInvoked itself.
type Dunst struct {
	// PID is dunst's process id.
	PID    int
	d      *Desktop
	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
	mu     sync.Mutex // serialises Answer
}

// dmenuScript stands in for dmenu: it reads the menu dunst offers on
// stdin and prints the line that ends in the pick Answer wrote, such as
// "[3,approve]".
const dmenuScript = `#!/bin/sh
menu=$(cat)
printf '%s\n' "$menu" > "$(dirname "$0")/menu.last"
printf '%s\n' "$menu" | grep -m1 -F -- "$(cat "$(dirname "$0")/pick")"
`

// StartDunst starts dunst on the desktop and waits until it owns
// org.freedesktop.Notifications. Stop it with Stop.
func (d *Desktop) StartDunst() (*Dunst, error) {
	if _, err := exec.LookPath("dunst"); err != nil {
		return nil, fmt.Errorf("dunst is not installed (scripts/desktop install installs it): %w", err)
	}
	dir, err := os.MkdirTemp(d.Dir, "dunst")
	if err != nil {
		return nil, err
	}
	menu := filepath.Join(dir, "menu")
	if err := os.WriteFile(menu, []byte(dmenuScript), 0o755); err != nil {
		return nil, err
	}
	rc := filepath.Join(dir, "dunstrc")
	conf := "[global]\n    dmenu = " + menu + "\n    show_indicators = no\n"
	if err := os.WriteFile(rc, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	// Watch for the name before starting, so its acquisition is not
	// missed.
	c, err := dbus.Connect(d.Vars["DBUS_SESSION_BUS_ADDRESS"])
	if err != nil {
		return nil, fmt.Errorf("session bus: %w", err)
	}
	defer c.Close()
	sigs := make(chan *dbus.Signal, 16)
	c.Signal(sigs)
	if err := c.AddMatchSignal(dbus.WithMatchSender("org.freedesktop.DBus"), dbus.WithMatchMember("NameOwnerChanged"),
		dbus.WithMatchArg(0, "org.freedesktop.Notifications")); err != nil {
		return nil, err
	}
	n := &Dunst{d: d, dir: dir, exited: make(chan struct{})}
	n.cmd = exec.Command("dunst", "-config", rc)
	n.cmd.Env = append(os.Environ(), d.Env...)
	logf, err := os.Create(filepath.Join(dir, "dunst.log"))
	if err != nil {
		return nil, err
	}
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	logf.Close()
	n.PID = n.cmd.Process.Pid
	go func() { n.cmd.Wait(); close(n.exited) }()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		if owner := n.owner(c); owner != "" {
			var pid uint32
			if c.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixProcessID", 0, owner).Store(&pid) == nil && int(pid) == n.PID {
				return n, nil
			}
		}
		select {
		case <-sigs:
		case <-n.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "dunst.log"))
			return nil, fmt.Errorf("dunst exited before owning org.freedesktop.Notifications:\n%s", log)
		case <-timeout.C:
			n.Stop()
			return nil, errors.New("dunst did not own org.freedesktop.Notifications within 10s")
		}
	}
}

func (n *Dunst) owner(c *dbus.Conn) string {
	var owner string
	if c.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, "org.freedesktop.Notifications").Store(&owner) != nil {
		return ""
	}
	return owner
}

// Answer picks action key of notification id in dunst's context menu, as
// a user does, with `dunstctl context`: dunst emits ActionInvoked for it.
// It returns once dunst has read the pick; the effect arrives
// asynchronously.
func (n *Dunst) Answer(id uint32, key string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	last := filepath.Join(n.dir, "menu.last")
	os.Remove(last)
	if err := os.WriteFile(filepath.Join(n.dir, "pick"), fmt.Appendf(nil, "[%d,%s]", id, key), 0o644); err != nil {
		return err
	}
	cmd := exec.Command("dunstctl", "context")
	cmd.Env = append(os.Environ(), n.d.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("dunstctl context: %v: %s", err, out)
	}
	return nil
}

// Displayed counts the notifications dunst shows (`dunstctl count
// displayed`).
func (n *Dunst) Displayed() (int, error) {
	cmd := exec.Command("dunstctl", "count", "displayed")
	cmd.Env = append(os.Environ(), n.d.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("dunstctl count displayed: %v: %s", err, out)
	}
	var c int
	_, err = fmt.Sscan(strings.TrimSpace(string(out)), &c)
	return c, err
}

// Stop stops dunst by its PID and waits for it to exit.
func (n *Dunst) Stop() {
	n.cmd.Process.Signal(os.Interrupt)
	select {
	case <-n.exited:
	case <-time.After(5 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
	}
}

// NotifyCall is a call to the notification service, its reply, or one of
// its signals, as a bus monitor saw it.
type NotifyCall struct {
	// Member is "Notify", "CloseNotification", "ActionInvoked" or
	// "NotificationClosed"; Sender the unique name that sent it.
	Member, Sender string
	// ID is the notification id: Notify's reply, the others' first
	// argument.
	ID uint32
	// Summary, Body and Actions are Notify's.
	Summary, Body string
	Actions       []string
	// Key is ActionInvoked's action; Reason NotificationClosed's.
	Key    string
	Reason uint32
}

// NotifyWatch watches every message of org.freedesktop.Notifications on
// a session bus, as dbus-monitor does, so a test sees what PCP shows
// without going through PCP.
type NotifyWatch struct {
	c    *dbus.Conn
	msgs chan *dbus.Message
	out  chan NotifyCall
}

// WatchNotifications becomes a monitor of the bus at addr for the
// notification interface. Close it when done.
func WatchNotifications(addr string) (*NotifyWatch, error) {
	c, err := dbus.Connect(addr)
	if err != nil {
		return nil, err
	}
	rules := []string{"interface='org.freedesktop.Notifications'", "type='method_return'"}
	// The bus answers before it starts forwarding, and an eavesdropping
	// godbus connection would take that answer for a monitored message.
	if err := c.BusObject().Call("org.freedesktop.DBus.Monitoring.BecomeMonitor", 0, rules, uint32(0)).Err; err != nil {
		c.Close()
		return nil, fmt.Errorf("BecomeMonitor: %w", err)
	}
	msgs := make(chan *dbus.Message, 256)
	c.Eavesdrop(msgs)
	w := &NotifyWatch{c: c, msgs: msgs, out: make(chan NotifyCall, 256)}
	go w.run(msgs)
	return w, nil
}

func (w *NotifyWatch) run(msgs <-chan *dbus.Message) {
	defer close(w.out)
	notifies := map[uint32]NotifyCall{} // Notify calls by serial, until their reply
	for m := range msgs {
		sender, _ := m.Headers[dbus.FieldSender].Value().(string)
		switch m.Type {
		case dbus.TypeMethodCall, dbus.TypeSignal:
			member, _ := m.Headers[dbus.FieldMember].Value().(string)
			nc := NotifyCall{Member: member, Sender: sender}
			switch member {
			case "Notify":
				var app, icon string
				var replaces uint32
				var hints map[string]dbus.Variant
				var timeout int32
				if dbus.Store(m.Body, &app, &replaces, &icon, &nc.Summary, &nc.Body, &nc.Actions, &hints, &timeout) == nil {
					notifies[m.Serial()] = nc
				}
				continue
			case "CloseNotification":
				if dbus.Store(m.Body, &nc.ID) != nil {
					continue
				}
			case "ActionInvoked":
				if dbus.Store(m.Body, &nc.ID, &nc.Key) != nil {
					continue
				}
			case "NotificationClosed":
				if dbus.Store(m.Body, &nc.ID, &nc.Reason) != nil {
					continue
				}
			default:
				continue
			}
			w.out <- nc
		case dbus.TypeMethodReply:
			serial, _ := m.Headers[dbus.FieldReplySerial].Value().(uint32)
			nc, ok := notifies[serial]
			if !ok {
				continue
			}
			delete(notifies, serial)
			if dbus.Store(m.Body, &nc.ID) == nil {
				w.out <- nc
			}
		}
	}
}

// Next returns the next observation of member, skipping others, or an
// error when ctx ends first.
func (w *NotifyWatch) Next(ctx context.Context, member string) (NotifyCall, error) {
	for {
		select {
		case nc, ok := <-w.out:
			if !ok {
				return NotifyCall{}, errors.New("the bus monitor closed")
			}
			if nc.Member == member {
				return nc, nil
			}
		case <-ctx.Done():
			return NotifyCall{}, fmt.Errorf("no %s seen on the bus: %w", member, ctx.Err())
		}
	}
}

// Close stops watching.
func (w *NotifyWatch) Close() {
	// godbus's Close closes the eavesdropping channel while its reader
	// may still send on it: take the channel back first, then close it.
	w.c.Eavesdrop(nil)
	w.c.Close()
	close(w.msgs)
}
