package atspi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

// ID is the adapter's id in the core's dispatch and in health reports.
const ID = "atspi"

// EventFunc receives the PCP events the adapter derives from AT-SPI2
// events: eventType is one of api's Event* names, appID and surfaceID say
// where (surfaceID may be empty), data is the event's payload, owned by
// the callee. It is called from one goroutine, in the order the events
// arrived, never with a lock held; a slow callback delays the cache
// updates that follow it.
type EventFunc func(eventType, appID, surfaceID string, data map[string]any)

// Config configures an Adapter. Zero values take the defaults noted.
type Config struct {
	// BusAddress is the accessibility bus; empty: AT_SPI_BUS_ADDRESS,
	// else org.a11y.Bus.GetAddress on the session bus.
	BusAddress string
	// OnEvent, when set, receives PCP events.
	OnEvent EventFunc
	// CallTimeout bounds every D-Bus call (default 1.5s): some GTK3
	// methods never answer, and godbus would otherwise wait forever.
	CallTimeout time.Duration
	// WalkTimeout bounds one fetch of an application's tree (default 5s).
	WalkTimeout time.Duration
	// MaxNodes bounds the nodes kept of one application (default 10000).
	MaxNodes int
	// MaxDepth bounds the depth of a walk below the application (default 64).
	MaxDepth int
	// MaxInFlight bounds the calls outstanding to one application
	// (default 12, 48 for Qt: AT-SPI2 apps answer on their main thread,
	// and past about 16 more only queue to GTK; see quirks).
	MaxInFlight int
	// MaxTextBytes bounds read_text (default 1 MiB): past it the answer
	// is TEXT_TOO_LARGE and the caller pages with offset and length.
	MaxTextBytes int
	// TreeTextChars bounds the text a tree carries per node (default
	// 4096 characters); read_text reads all of it.
	TreeTextChars int
	// ActionTimeout is how long an action waits for its target to exist
	// and be actionable (default 3s); params "timeout_ms" overrides it.
	ActionTimeout time.Duration
	// BoundsMaxAge is how long element bounds are reused (default 1s):
	// toolkits send no reliable event when a widget moves.
	BoundsMaxAge time.Duration
	// NoDirect disables the peer-to-peer connections to applications
	// that offer one (GetApplicationBusAddress); every call then goes
	// through the bus daemon.
	NoDirect bool
	// NoCacheInterface disables Cache.GetItems: trees are walked node by
	// node (for comparison and for toolkits whose cache misbehaves).
	NoCacheInterface bool
	// Aliases maps other app ids (a manifest's "org.gnome.Calculator") to
	// the adapter's ("atspi.gnome-calculator"), so the capabilities of an
	// app registered under its own id can run on its accessibility tree.
	// Without an alias an execution acts only on the application its
	// capability's app id names. The broker adds aliases at run time from
	// manifests' "accessible_name" (Alias).
	Aliases map[string]string
	// WindowOrigins, when set, gives top-level windows' origins in root
	// coordinates, for the toolkits that cannot give screen coordinates
	// (GTK 4, see quirks.windowCoordsOnly). Nil: those toolkits' surface
	// geometry stays window-relative, and AppStats.Coordinates says so.
	WindowOrigins WindowOrigins
	// Log receives what the adapter reports about applications, such as
	// one that crashed during a call (default slog.Default()).
	Log *slog.Logger
}

// WindowOrigins gives a top-level window's origin in root coordinates,
// from the display server. pid is the window's process, title its title
// as the application's accessible window names it; ok is false when no
// such window is known.
type WindowOrigins interface {
	Origin(pid int, title string) (x, y int, ok bool)
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defi := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.CallTimeout, 1500*time.Millisecond)
	def(&c.WalkTimeout, 5*time.Second)
	def(&c.ActionTimeout, 3*time.Second)
	def(&c.BoundsMaxAge, time.Second)
	defi(&c.MaxNodes, 10000)
	defi(&c.MaxDepth, 64)
	defi(&c.MaxTextBytes, 1<<20)
	defi(&c.TreeTextChars, 4096)
	return c
}

// events the adapter registers with the registry: GTK3 emits only the
// events some client registered, and exposes its Cache interface only
// once one has.
var registeredEvents = []string{
	"object:children-changed", "object:state-changed", "object:property-change",
	"object:text-changed", "object:value-changed",
	"window:activate", "window:deactivate", "window:create", "window:destroy",
	"focus:",
}

// redialInterval bounds how often a failed connection is retried.
const redialInterval = time.Second

// Adapter is the AT-SPI2 adapter. Its methods may be called concurrently.
//
// Locking: mu guards the connection state and the application tables
// below it; each app has its own locks (see app). The order is
// app.loadMu, then Adapter.mu, then app.mu; focusMu is taken last. Only
// app.loadMu is held across D-Bus calls.
type Adapter struct {
	cfg    Config
	life   context.Context // ends at Close
	cancel context.CancelFunc
	queue  *sigQueue
	wg     sync.WaitGroup // the event loop
	calls  atomic.Uint64  // D-Bus calls made to applications

	mu        sync.Mutex
	bus       *dbus.Conn
	busAddr   string
	registry  string // the registry's unique bus name
	busErr    error  // why the last connection attempt failed
	dialedAt  time.Time
	apps      map[string]*app // by unique bus name
	byID      map[string]*app
	appsFresh bool // the application list reflects the registry
	closed    bool
	loopUp    bool

	focusMu   sync.Mutex // a leaf lock: taken last, held briefly
	focusSurf string     // the surface last reported focused

	// aliasMu guards aliases: other app ids (a manifest's) mapped to the
	// adapter's, from Config.Aliases and Alias. A leaf lock.
	aliasMu sync.RWMutex
	aliases map[string]string

	// protMu guards protected: the processes that show PCP's own
	// prompts, by who shows them (protect.go). A leaf lock.
	protMu    sync.Mutex
	protected map[string]int
}

// New returns an adapter. It connects on first use, or at Connect.
func New(cfg Config) *Adapter {
	life, cancel := context.WithCancel(context.Background())
	aliases := make(map[string]string, len(cfg.Aliases))
	for k, v := range cfg.Aliases {
		aliases[k] = v
	}
	return &Adapter{
		cfg: cfg.withDefaults(), life: life, cancel: cancel, queue: newSigQueue(8192),
		apps: map[string]*app{}, byID: map[string]*app{}, aliases: aliases,
	}
}

// Alias makes appID, an app registered under its own id by a signed
// manifest, stand for the application whose accessible name is
// accessibleName, so that the app's capabilities can run on that
// application's tree. An empty accessibleName removes the alias. When two
// applications share the name, the alias is the first one's id.
func (a *Adapter) Alias(appID, accessibleName string) {
	a.aliasMu.Lock()
	defer a.aliasMu.Unlock()
	label := appLabel(accessibleName)
	if label == "" {
		delete(a.aliases, appID)
		return
	}
	a.aliases[appID] = AppIDPrefix + label
}

// ID returns "atspi".
func (a *Adapter) ID() string { return ID }

// Close ends the event loop and closes every connection. Calls after
// Close answer NO_ATSPI2_SUPPORT.
func (a *Adapter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	bus := a.bus
	a.bus = nil
	apps := a.apps
	a.apps, a.byID = map[string]*app{}, map[string]*app{}
	a.mu.Unlock()
	a.cancel()
	for _, ap := range apps {
		ap.closeDirect()
	}
	if bus != nil {
		bus.Close()
	}
	a.wg.Wait()
	return nil
}

// errNoBus is NO_ATSPI2_SUPPORT for a missing accessibility bus.
func errNoBus(err error) error {
	return api.Errorf(api.CodeNoATSPI2Support, map[string]any{"reason": err.Error()}, "no accessibility bus: %v", err)
}

// Connect connects to the accessibility bus now, registers for events and
// lists the applications. It is idempotent; every other method connects
// on demand. A failed attempt is retried at most once a second.
func (a *Adapter) Connect(ctx context.Context) error {
	_, err := a.conn(ctx)
	if err != nil {
		return err
	}
	_, err = a.appList(ctx)
	return err
}

// conn returns the bus connection, connecting if need be.
func (a *Adapter) conn(ctx context.Context) (*dbus.Conn, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errNoBus(errors.New("adapter closed"))
	}
	if a.bus != nil && a.bus.Connected() {
		c := a.bus
		a.mu.Unlock()
		return c, nil
	}
	if a.busErr != nil && time.Since(a.dialedAt) < redialInterval {
		err := a.busErr
		a.mu.Unlock()
		return nil, errNoBus(err)
	}
	a.dialedAt = time.Now()
	a.mu.Unlock()

	c, addr, registry, err := a.dial(ctx)

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		if c != nil {
			c.Close()
		}
		return nil, errNoBus(errors.New("adapter closed"))
	}
	if err != nil {
		a.busErr = err
		return nil, errNoBus(err)
	}
	if a.bus != nil && a.bus.Connected() { // another caller won
		c.Close()
		return a.bus, nil
	}
	// A new bus connection: every application and its cache belong to
	// the old one.
	for _, ap := range a.apps {
		ap.closeDirect()
	}
	a.apps, a.byID, a.appsFresh = map[string]*app{}, map[string]*app{}, false
	a.bus, a.busAddr, a.busErr, a.registry = c, addr, nil, registry
	if !a.loopUp {
		a.loopUp = true
		a.wg.Add(1)
		go a.eventLoop()
	}
	return c, nil
}

func (a *Adapter) dial(ctx context.Context) (c *dbus.Conn, addr, registry string, err error) {
	dctx, cancel := context.WithTimeout(ctx, 3*a.cfg.CallTimeout)
	defer cancel()
	if addr, err = busAddress(dctx, a.cfg.BusAddress, a.cfg.CallTimeout); err != nil {
		return nil, "", "", err
	}
	if c, err = dialBus(dctx, a.life, addr, a.queue); err != nil {
		return nil, "", "", fmt.Errorf("connecting to %s: %w", addr, err)
	}
	if err = a.subscribe(dctx, c); err == nil {
		// The registry starts on the first call to it (RegisterEvent).
		err = c.BusObject().CallWithContext(dctx, "org.freedesktop.DBus.GetNameOwner", 0, registryName).Store(&registry)
	}
	if err != nil {
		c.Close()
		return nil, "", "", err
	}
	return c, addr, registry, nil
}

// subscribe adds the match rules for AT-SPI2 events and registers the
// events with the registry.
func (a *Adapter) subscribe(ctx context.Context, c *dbus.Conn) error {
	for iface := range eventClasses {
		if err := c.AddMatchSignalContext(ctx, dbus.WithMatchInterface(iface)); err != nil {
			return fmt.Errorf("adding a match rule for %s: %w", iface, err)
		}
	}
	if err := c.AddMatchSignalContext(ctx, dbus.WithMatchSender("org.freedesktop.DBus"),
		dbus.WithMatchInterface("org.freedesktop.DBus"), dbus.WithMatchMember("NameOwnerChanged")); err != nil {
		return fmt.Errorf("adding a match rule for NameOwnerChanged: %w", err)
	}
	reg := c.Object(registryName, registryPath)
	calls := make([]*dbus.Call, 0, len(registeredEvents))
	done := make(chan *dbus.Call, len(registeredEvents))
	for _, ev := range registeredEvents {
		calls = append(calls, reg.GoWithContext(ctx, registryName+".RegisterEvent", 0, done, ev, []string{}, ""))
	}
	var old []string
	for range calls {
		c := <-done
		if c.Err != nil {
			if !isUnknownMethod(c.Err) {
				return fmt.Errorf("registering %v with the AT-SPI2 registry: %w", c.Args, c.Err)
			}
			old = append(old, c.Args[0].(string))
		}
	}
	// Registries before 2.46 take the event name alone.
	for _, ev := range old {
		if err := reg.CallWithContext(ctx, registryName+".RegisterEvent", 0, ev).Err; err != nil {
			return fmt.Errorf("registering %s with the AT-SPI2 registry: %w", ev, err)
		}
	}
	return nil
}

// appList returns the applications on the bus, listing them again when
// the registry said they changed.
func (a *Adapter) appList(ctx context.Context) ([]*app, error) {
	c, err := a.conn(ctx)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	fresh := a.appsFresh
	a.mu.Unlock()
	if !fresh {
		if err := a.discover(ctx, c); err != nil {
			return nil, err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*app, 0, len(a.byID))
	for _, ap := range a.byID {
		out = append(out, ap)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}

// discover lists the registry root's children and adds the applications
// it does not know yet; applications no longer listed are dropped.
func (a *Adapter) discover(ctx context.Context, c *dbus.Conn) error {
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	call := c.Object(registryName, rootPath).CallWithContext(cctx, ifaceAccessible+".GetChildren", 0)
	cancel()
	if call.Err != nil {
		return api.Errorf(api.CodeNoATSPI2Support, map[string]any{"reason": call.Err.Error()},
			"the AT-SPI2 registry does not answer: %v", call.Err)
	}
	var refs []ref
	if len(call.Body) == 1 {
		refs, _, _ = decodeRefs(call.Body[0])
	}
	var buses []string
	seen := map[string]bool{}
	for _, r := range refs {
		if r.bus != "" && !seen[r.bus] {
			seen[r.bus] = true
			buses = append(buses, r.bus)
		}
	}
	a.mu.Lock()
	var unknown []string
	for _, b := range buses {
		if a.apps[b] == nil {
			unknown = append(unknown, b)
		}
	}
	a.mu.Unlock()

	// Name, toolkit and toolkit version of each new application, all at
	// once, each with Properties.Get: the toolkit is not known yet, and
	// GetAll kills Qt 5 (see quirks).
	const per = 3
	reqs := make([]*req, 0, per*len(unknown))
	for range unknown {
		reqs = append(reqs, getProp(rootPath, ifaceAccessible, "Name"), getProp(rootPath, ifaceApplication, "ToolkitName"),
			getProp(rootPath, ifaceApplication, "Version"))
	}
	var wg sync.WaitGroup
	for i, b := range unknown {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, per)
			runBatch(ctx, c, b, sem, a.cfg.CallTimeout, reqs[per*i:per*i+per], &a.calls)
		}()
	}
	wg.Wait()

	a.mu.Lock()
	for b, ap := range a.apps {
		if !seen[b] {
			a.dropLocked(ap)
		}
	}
	for i, b := range unknown {
		if a.apps[b] != nil {
			continue
		}
		if reqs[per*i].err != nil && isGone(reqs[per*i].err) {
			continue // left while we asked
		}
		name, _ := reqs[per*i].value().(string)
		tk, _ := reqs[per*i+1].value().(string)
		ver, _ := reqs[per*i+2].value().(string)
		ap := newApp(a, b, clean(name, maxNameBytes), clean(tk, 64), clean(ver, 64))
		ap.id = a.freeIDLocked(baseAppID(ap.name, b))
		a.apps[b], a.byID[ap.id] = ap, ap
	}
	a.appsFresh = true
	a.mu.Unlock()
	return nil
}

// freeIDLocked returns base, or base-2, base-3, ... whichever no running
// application has.
func (a *Adapter) freeIDLocked(base string) string {
	if a.byID[base] == nil {
		return base
	}
	for n := 2; ; n++ {
		id := fmt.Sprintf("%s-%d", base, n)
		if a.byID[id] == nil {
			return id
		}
	}
}

// dropLocked forgets an application that left the bus.
func (a *Adapter) dropLocked(ap *app) {
	delete(a.apps, ap.bus)
	if a.byID[ap.id] == ap {
		delete(a.byID, ap.id)
	}
	go ap.closeDirect()
}

// appByID finds a running application by its PCP app id, listing the
// applications again once if it is not known. Not found is
// NO_ATSPI2_SUPPORT: the app may run without accessibility.
func (a *Adapter) appByID(ctx context.Context, id string) (*app, error) {
	id = a.canonical(id)
	for attempt := 0; attempt < 2; attempt++ {
		if _, err := a.appList(ctx); err != nil {
			return nil, err
		}
		a.mu.Lock()
		ap := a.byID[id]
		if ap == nil && attempt == 0 {
			a.appsFresh = false
		}
		a.mu.Unlock()
		if ap != nil {
			return ap, nil
		}
	}
	return nil, api.Errorf(api.CodeNoATSPI2Support, map[string]any{"app_id": id},
		"no application %s on the accessibility bus", id)
}

// canonical returns the adapter's app id for id, following Aliases.
func (a *Adapter) canonical(id string) string {
	a.aliasMu.RLock()
	defer a.aliasMu.RUnlock()
	if alias, ok := a.aliases[id]; ok {
		return alias
	}
	return id
}

// appByBus finds a running application by its unique bus name.
func (a *Adapter) appByBus(ctx context.Context, bus string) (*app, error) {
	for attempt := 0; attempt < 2; attempt++ {
		if _, err := a.appList(ctx); err != nil {
			return nil, err
		}
		a.mu.Lock()
		ap := a.apps[bus]
		if ap == nil && attempt == 0 {
			a.appsFresh = false
		}
		a.mu.Unlock()
		if ap != nil {
			return ap, nil
		}
	}
	return nil, api.Errorf(api.CodeNoATSPI2Support, map[string]any{"bus_name": bus},
		"no application with bus name %s on the accessibility bus", bus)
}

// Stats is a snapshot of the adapter's state.
type Stats struct {
	Connected  bool   `json:"connected"`
	BusAddress string `json:"bus_address,omitempty"`
	// Error says why the adapter is not connected.
	Error string `json:"error,omitempty"`
	// EventsReceived and EventsDropped count AT-SPI2 signals; a drop
	// makes every cache refetch its tree.
	EventsReceived uint64 `json:"events_received"`
	EventsDropped  uint64 `json:"events_dropped"`
	// Calls counts the D-Bus calls made to applications.
	Calls uint64     `json:"calls"`
	Apps  []AppStats `json:"apps"`
}

// AppStats describes one application.
type AppStats struct {
	AppID   string `json:"app_id"`
	BusName string `json:"bus_name"`
	Name    string `json:"name"`
	Toolkit string `json:"toolkit,omitempty"`
	// ToolkitVersion is Application.Version.
	ToolkitVersion string `json:"toolkit_version,omitempty"`
	// Coordinates is what the geometry of the app's surfaces is relative
	// to: "screen" (root coordinates), or "window" for a toolkit that
	// cannot give screen coordinates (GTK 4) when no WindowOrigins was
	// configured; then each surface's geometry is its own extents, origin
	// unknown. Element bounds are always window-relative.
	Coordinates string `json:"coordinates"`
	// Direct is true while calls go over a peer-to-peer connection.
	Direct bool `json:"direct"`
	// Loaded is true once the tree has been fetched; Nodes counts the
	// nodes cached; Truncated says a walk stopped at a bound.
	Loaded    bool `json:"loaded"`
	Nodes     int  `json:"nodes"`
	Truncated bool `json:"truncated,omitempty"`
	Surfaces  int  `json:"surfaces"`
	// LastLoadMS is how long the last full fetch of the tree took.
	LastLoadMS float64 `json:"last_load_ms,omitempty"`
}

// Stats reports the connection, the applications and their caches. It
// does no I/O.
func (a *Adapter) Stats() Stats {
	a.mu.Lock()
	s := Stats{Connected: a.bus != nil && a.bus.Connected(), BusAddress: a.busAddr}
	if !s.Connected && a.busErr != nil {
		s.Error = a.busErr.Error()
	}
	apps := make([]*app, 0, len(a.byID))
	for _, ap := range a.byID {
		apps = append(apps, ap)
	}
	a.mu.Unlock()
	s.EventsReceived, s.EventsDropped = a.queue.counts()
	s.Calls = a.calls.Load()
	s.Apps = []AppStats{}
	for _, ap := range apps {
		s.Apps = append(s.Apps, ap.stats())
	}
	slices.SortFunc(s.Apps, func(x, y AppStats) int {
		if x.AppID < y.AppID {
			return -1
		}
		if x.AppID > y.AppID {
			return 1
		}
		return 0
	})
	return s
}

// Healthy reports whether the accessibility bus is reachable; the core's
// health check calls it.
func (a *Adapter) Healthy(ctx context.Context) error {
	_, err := a.conn(ctx)
	return err
}
