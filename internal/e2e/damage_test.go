package e2e

import (
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// screenChanges reports changes to the screen's contents on display: the
// X server's DAMAGE extension on the root window, which covers what every
// window draws. The returned wait blocks until the screen changed since
// the previous wait (or since screenChanges, for the first) and reports
// false if the deadline passed first. A test that must see pixels change
// captures the screen again after each change, never on a timer.
func screenChanges(t *testing.T, display string) (wait func(deadline time.Time) bool) {
	t.Helper()
	c, err := xgb.NewConnDisplay(display)
	if err != nil {
		t.Fatalf("connecting to X display %s: %v", display, err)
	}
	t.Cleanup(c.Close)
	if err := xfixes.Init(c); err != nil {
		t.Fatalf("XFIXES on %s: %v", display, err)
	}
	if _, err := xfixes.QueryVersion(c, 5, 0).Reply(); err != nil {
		t.Fatalf("XFIXES on %s: %v", display, err)
	}
	if err := damage.Init(c); err != nil {
		t.Fatalf("DAMAGE on %s: %v", display, err)
	}
	if _, err := damage.QueryVersion(c, 1, 1).Reply(); err != nil {
		t.Fatalf("DAMAGE on %s: %v", display, err)
	}
	id, err := c.NewId()
	if err != nil {
		t.Fatal(err)
	}
	d := damage.Damage(id)
	root := xproto.Setup(c).DefaultScreen(c).Root
	if err := damage.CreateChecked(c, d, xproto.Drawable(root), damage.ReportLevelNonEmpty).Check(); err != nil {
		t.Fatalf("DAMAGE on the root window: %v", err)
	}
	notices := make(chan struct{}, 1)
	go func() {
		for {
			ev, err := c.WaitForEvent()
			if ev == nil && err == nil {
				return // closed
			}
			if _, ok := ev.(damage.NotifyEvent); ok {
				select {
				case notices <- struct{}{}:
				default:
				}
			}
		}
	}()
	return func(deadline time.Time) bool {
		select {
		case <-notices:
		case <-time.After(time.Until(deadline)):
			return false
		}
		// Empty the damaged region: the next drawing notifies again.
		damage.Subtract(c, d, xfixes.Region(0), xfixes.Region(0))
		c.Sync()
		return true
	}
}
