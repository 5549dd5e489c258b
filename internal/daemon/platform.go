package daemon

import (
	"os"
	"sync"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/adapter/x11"
)

// newPlatform opens the X11 display when Config.X11 asks for it and binds
// the platform adapter: the system and compositor capabilities, and the
// surfaces of every top-level window. A display that cannot be opened is
// not fatal: the daemon runs without a platform adapter (health lists no
// x11 adapter) and says so in the log.
func (s *Server) newPlatform() error {
	if !s.cfg.X11 {
		return nil
	}
	display := s.cfg.X11Display
	if display == "" {
		display = os.Getenv("DISPLAY")
	}
	if display == "" {
		s.log.Info("no X11 display (DISPLAY is not set): no platform adapter")
		return nil
	}
	c, err := x11.Open(display, s.log)
	if err != nil {
		s.log.Warn("the X11 display cannot be opened: no platform adapter", "display", display, "err", err)
		return nil
	}
	p := x11.NewPlatform(c)
	if s.ax != nil {
		// One window, one surface id: an accessible app's windows are the
		// AT-SPI2 adapter's, which takes their origins from X11.
		p.Claimed = s.ax.AccessiblePIDs
		s.origins.set(p)
	}
	if err := s.b.SetPlatformAdapter(p); err != nil {
		c.Close()
		return err
	}
	if err := s.b.AddAdapter(api.RegisterAdapterParams{AdapterID: x11.AdapterID, SurfaceType: "x11", SupportedTiers: []int{3}}, p); err != nil {
		c.Close()
		return err
	}
	s.x11 = p
	info := c.Info()
	s.log.Info("X11 platform adapter bound", "display", display, "xtest", info.XTest, "mit_shm", info.MITSHM, "window_manager", info.WindowManager)
	return nil
}

// startPlatform publishes the display's window changes as surface.*
// events until the server stops (startBackground).
func (s *Server) startPlatform() {
	if s.x11 == nil {
		return
	}
	events := s.x11.Conn().Watch(s.ctx)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for e := range events {
			s.publishSurfaceEvent(e)
		}
	}()
}

func (s *Server) publishSurfaceEvent(e x11.Event) {
	if e.Surface != nil && s.x11.Claims(s.ctx, e.Surface) {
		return // the AT-SPI2 adapter announces it
	}
	var typ string
	data := map[string]any{}
	var sid, app string
	if e.Surface != nil {
		sid, app = e.Surface.ID(), s.x11.SurfaceAPI(e.Surface).AppID
		data["surface_id"], data["app_id"], data["title"] = sid, app, e.Surface.Title
		data["window"], data["state"] = e.Surface.Window, e.Surface.State
		if e.Surface.PID != 0 {
			data["pid"] = e.Surface.PID
		}
	}
	switch e.Type {
	case x11.EventCreated:
		typ = api.EventSurfaceCreated
	case x11.EventDestroyed:
		typ = api.EventSurfaceDestroyed
	case x11.EventTitleChanged:
		typ = api.EventSurfaceTitleChanged
		data["previous_title"] = e.Previous
	case x11.EventFocusChanged:
		typ = api.EventSurfaceFocusChanged
		data["focused"] = e.Surface != nil
		data["previous_surface_id"] = e.Previous
		if e.Surface == nil {
			data["surface_id"] = ""
		}
	default:
		return
	}
	s.b.Publish(typ, app, sid, data)
}

// closePlatform closes the display (release).
func (s *Server) closePlatform() {
	if s.x11 != nil {
		s.x11.Conn().Close()
	}
}

// windowOrigins is the AT-SPI2 adapter's atspi.WindowOrigins: the X11
// platform adapter's, once it is bound (the AT-SPI2 adapter is made
// first); until then, and without a display, no origin is known.
type windowOrigins struct {
	mu sync.Mutex
	p  *x11.Platform
}

func (o *windowOrigins) set(p *x11.Platform) {
	o.mu.Lock()
	o.p = p
	o.mu.Unlock()
}

func (o *windowOrigins) Origin(pid int, title string) (x, y int, ok bool) {
	o.mu.Lock()
	p := o.p
	o.mu.Unlock()
	if p == nil {
		return 0, 0, false
	}
	return p.Origin(pid, title)
}
