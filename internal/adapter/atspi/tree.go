package atspi

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

// node is one accessible object as the cache holds it.
type node struct {
	path     dbus.ObjectPath
	parent   dbus.ObjectPath // "" for the application root
	children []dbus.ObjectPath
	// childCount is what the toolkit reports; kidsKnown says children
	// holds the node's children (a node the walk stopped at does not).
	childCount int32
	kidsKnown  bool
	depth      int

	role   uint32
	name   string
	desc   string
	states stateSet
	ifaces ifaceSet

	// gen counts the events that touched the node; a lazily fetched
	// field is stored only if gen did not move while it was fetched.
	gen uint64
	// infoStale: role, name, states or interfaces may be out of date (an
	// event the adapter could not apply directly).
	infoStale bool

	nActions   int32 // Action.NActions, read only where quirks.actionOnEveryNode
	nActionsOK bool
	text       string // first TreeTextChars characters, for text roles
	textOK     bool
	value      rangeValue
	valueOK    bool
	bounds     api.Bounds // window coordinates
	boundsAt   time.Time  // zero: never fetched
}

// needs says which lazily fetched fields a read wants.
type needs uint8

const (
	needActions needs = 1 << iota
	needText
	needValue
	needBounds
)

// app is one application on the bus and its cache.
//
// Locking: loadMu serializes the fetches that change the tree's shape
// (full load, children refresh) and is held across D-Bus calls; mu guards
// every field below it and is held only briefly, never across a call.
// Lock order: loadMu, then mu.
type app struct {
	a       *Adapter
	bus     string
	id      string
	name    string
	toolkit string        // Application.ToolkitName
	version string        // Application.Version
	q       quirks        // of the toolkit (quirksOf)
	sem     chan struct{} // calls in flight to this application

	loadMu sync.Mutex

	mu          sync.Mutex
	direct      *dbus.Conn // peer-to-peer connection, nil if none
	directTried bool
	noCacheIf   bool // Cache.GetItems is not implemented
	nodes       map[dbus.ObjectPath]*node
	loaded      bool
	loading     bool
	truncated   bool
	// touched records, during a load, the nodes events changed, so the
	// freshly loaded tree re-reads them.
	touched   map[dbus.ObjectPath]bool
	staleKids map[dbus.ObjectPath]bool // nodes whose children must be listed again
	surfaces  map[dbus.ObjectPath]int
	nextSurf  int
	changed   chan struct{} // closed and replaced at every change
	loadDur   time.Duration
	// crashed is the call during which the application left the bus,
	// once it has ("" while it runs); see reportCrash.
	crashed, crashedPath string
	// running counts the batches in flight (app.run); idle is closed
	// when it drops to 0, if someone waits (whenIdle).
	running int
	idle    chan struct{}
	// pid is the application's process, 0 until asked (processID).
	pid uint32
}

func newApp(a *Adapter, bus, name, toolkit, version string) *app {
	q := quirksOf(toolkit, version)
	return &app{
		a: a, bus: bus, name: name, toolkit: toolkit, version: version, q: q,
		sem:   make(chan struct{}, q.inFlight(a.cfg.MaxInFlight)),
		nodes: map[dbus.ObjectPath]*node{}, staleKids: map[dbus.ObjectPath]bool{},
		surfaces: map[dbus.ObjectPath]int{}, changed: make(chan struct{}),
	}
}

func (ap *app) closeDirect() {
	ap.mu.Lock()
	d := ap.direct
	ap.direct = nil
	ap.mu.Unlock()
	if d != nil {
		d.Close()
	}
}

// changedLocked wakes whoever waits for this application to change.
func (ap *app) changedLocked() {
	close(ap.changed)
	ap.changed = make(chan struct{})
}

// connection returns the connection calls to the application use: the
// peer-to-peer one when the application offers it, else the bus. The
// first call asks for the address (which also makes GTK3 expose its
// Cache interface).
func (ap *app) connection(ctx context.Context) (*dbus.Conn, error) {
	bus, err := ap.a.conn(ctx)
	if err != nil {
		return nil, err
	}
	ap.mu.Lock()
	d, tried := ap.direct, ap.directTried
	ap.directTried = true
	ap.mu.Unlock()
	if d != nil && d.Connected() {
		return d, nil
	}
	if tried {
		return bus, nil
	}
	var addr string
	cctx, cancel := context.WithTimeout(ctx, ap.a.cfg.CallTimeout)
	defer cancel()
	if err := bus.Object(ap.bus, rootPath).CallWithContext(cctx, ifaceApplication+".GetApplicationBusAddress", 0).Store(&addr); err != nil || addr == "" || ap.a.cfg.NoDirect {
		return bus, nil
	}
	d, err = dialPeer(cctx, ap.a.life, addr)
	if err != nil {
		return bus, nil
	}
	ap.mu.Lock()
	if ap.direct != nil {
		d.Close()
		d = ap.direct
	} else {
		ap.direct = d
	}
	ap.mu.Unlock()
	return d, nil
}

// run sends reqs to the application, as the toolkit's quirks have them
// sent (quirks.rewrite): every call to an application's objects goes
// through here. An application that leaves the bus while it is being
// asked has crashed during a call: that is reported (reportCrash) and the
// answer is APP_UNRESPONSIVE naming the call.
func (ap *app) run(ctx context.Context, reqs []*req) error {
	c, err := ap.connection(ctx)
	if err != nil {
		return err
	}
	ap.beginRun()
	defer ap.endRun()
	send, finish := ap.q.rewrite(reqs)
	runBatch(ctx, c, ap.bus, ap.sem, ap.a.cfg.CallTimeout, send, &ap.a.calls)
	finish()
	if !c.Connected() {
		// The peer-to-peer connection died under us: forget it, and
		// let the caller's next attempt use the bus.
		ap.mu.Lock()
		if ap.direct == c {
			ap.direct = nil
		}
		ap.mu.Unlock()
		for _, r := range send {
			if r.err != nil && ctx.Err() == nil {
				return ap.a.reportCrash(ap, r)
			}
		}
		return api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": ap.id}, "connection to %s closed", ap.id)
	}
	for _, r := range send {
		if isDisconnected(r.err) {
			return ap.a.reportCrash(ap, r)
		}
	}
	return nil
}

// call sends one request and returns its error.
func (ap *app) call(ctx context.Context, r *req) error {
	if err := ap.run(ctx, []*req{r}); err != nil {
		return err
	}
	return r.err
}

// infoReqs are the calls that describe a node the cache left out.
func infoReqs(p dbus.ObjectPath) []*req {
	return []*req{
		newReq(p, ifaceAccessible+".GetRole"),
		newReq(p, ifaceAccessible+".GetState"),
		newReq(p, ifaceAccessible+".GetInterfaces"),
		// Description is not read: nothing shows it.
		getAllProps(p, ifaceAccessible, "Name", "ChildCount"),
	}
}

// applyInfo fills n from the replies of infoReqs; false if the node is
// gone or did not answer.
func applyInfo(n *node, rs []*req) bool {
	if rs[0].err != nil {
		return false
	}
	n.role, _ = rs[0].value().(uint32)
	if st, err := decodeStates(rs[1].value()); err == nil {
		n.states = st
	}
	if ifs, err := decodeIfaces(rs[2].value()); err == nil {
		n.ifaces = ifs
	}
	if rs[3].err == nil {
		if ni, err := decodeAccessibleProps(rs[3].value()); err == nil {
			n.name, n.desc, n.childCount = ni.name, ni.desc, ni.childCount
		}
	}
	n.infoStale = false
	return true
}

// ensure makes the cache answer a read: the tree fetched, what events
// marked stale fetched again, and the fields need asks for fetched for the
// nodes under scope (the root when scope is "").
func (ap *app) ensure(ctx context.Context, scope dbus.ObjectPath, need needs) error {
	ap.loadMu.Lock()
	defer ap.loadMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	ap.mu.Lock()
	loaded := ap.loaded
	ap.mu.Unlock()
	if !loaded {
		if err := ap.load(ctx); err != nil {
			return err
		}
	}
	if err := ap.refresh(ctx); err != nil {
		return err
	}
	return ap.fill(ctx, scope, need)
}

// load fetches the whole tree: Cache.GetItems where the toolkit has it,
// then a walk of every node whose children the cache left out (GTK3 omits
// the cells of tree and table views; GTK4 lists only the objects a client
// has already seen), bounded by MaxNodes, MaxDepth and WalkTimeout.
// Called with loadMu held.
func (ap *app) load(ctx context.Context) error {
	start := time.Now()
	cfg := &ap.a.cfg
	wctx, cancel := context.WithTimeout(ctx, cfg.WalkTimeout)
	defer cancel()
	ap.mu.Lock()
	ap.loading, ap.touched = true, map[dbus.ObjectPath]bool{}
	noCache := ap.noCacheIf || cfg.NoCacheInterface
	ap.mu.Unlock()
	defer func() {
		ap.mu.Lock()
		ap.loading, ap.touched = false, nil
		ap.mu.Unlock()
	}()

	work := map[dbus.ObjectPath]*node{}
	truncated := false
	if !noCache {
		t, err := ap.loadItems(ctx, wctx, work)
		if err != nil {
			return err
		}
		truncated = t
	}
	if err := ap.loadRoot(wctx, work); err != nil {
		return err
	}
	frontier, err := ap.unlisted(wctx, work)
	if err != nil {
		return err
	}
	lazy := !noCache && ap.q.cacheOnReference
	if t := ap.expand(wctx, work, frontier, func(p dbus.ObjectPath) bool { return work[p] != nil }, lazy); t {
		truncated = true
	}
	kept, t := reachable(work, cfg.MaxNodes, cfg.MaxDepth)
	truncated = truncated || t
	if wctx.Err() != nil && ctx.Err() == nil {
		truncated = true
	}
	ap.install(kept, truncated, time.Since(start))
	return ctx.Err()
}

// loadItems adds what Cache.GetItems lists to work and reports whether the
// list was cut at MaxNodes. An application whose Cache interface is
// missing or does not answer is walked, now and from now on; the error is
// ctx's, when it ended (wctx is ctx bounded by WalkTimeout).
func (ap *app) loadItems(ctx, wctx context.Context, work map[dbus.ObjectPath]*node) (truncated bool, err error) {
	items, trunc, err := ap.getItems(wctx)
	switch {
	case err == nil:
		buildFromItems(work, items, ap.bus)
		return trunc, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case isCrashed(err):
		return false, err
	case isUnknownMethod(err), errors.Is(err, context.DeadlineExceeded):
		ap.mu.Lock()
		ap.noCacheIf = true
		ap.mu.Unlock()
	}
	return false, nil
}

// loadRoot describes the application's root, unless the cache did, and
// makes it the root of work.
func (ap *app) loadRoot(ctx context.Context, work map[dbus.ObjectPath]*node) error {
	root := work[rootPath]
	if root == nil {
		root = &node{path: rootPath}
		rs := infoReqs(rootPath)
		if err := ap.run(ctx, rs); err != nil {
			return err
		}
		if !applyInfo(root, rs) {
			if isGone(rs[0].err) {
				return api.Errorf(api.CodeNoATSPI2Support, map[string]any{"app_id": ap.id}, "%s left the accessibility bus", ap.id)
			}
			return api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": ap.id}, "%s does not answer: %v", ap.id, rs[0].err)
		}
		work[rootPath] = root
	}
	root.parent = ""
	return nil
}

// unlisted sets the depths of work's nodes under the root and returns the
// nodes, above MaxDepth, whose children the cache did not list: those
// whose child count disagrees with the listing, and those that manage
// their descendants (GTK3 leaves the cells of tree and table views out of
// its cache, and counts them as no children) and say they have some.
func (ap *app) unlisted(ctx context.Context, work map[dbus.ObjectPath]*node) ([]dbus.ObjectPath, error) {
	maxDepth := ap.a.cfg.MaxDepth
	var frontier, managed []dbus.ObjectPath
	reach := map[dbus.ObjectPath]bool{}
	var visit func(p dbus.ObjectPath, d int)
	visit = func(p dbus.ObjectPath, d int) {
		n := work[p]
		if n == nil || reach[p] {
			return
		}
		reach[p] = true
		n.depth = d
		switch {
		case n.states.has(stManagesDescendants) && len(n.children) == 0:
			managed = append(managed, p)
		case int32(len(n.children)) != n.childCount || !n.kidsKnown:
			n.kidsKnown = false
			if d < maxDepth {
				frontier = append(frontier, p)
			}
		}
		if d < maxDepth {
			for _, c := range n.children {
				visit(c, d+1)
			}
		}
	}
	visit(rootPath, 0)
	if len(managed) == 0 {
		return frontier, nil
	}
	counts := make([]*req, len(managed))
	for i, p := range managed {
		counts[i] = getProp(p, ifaceAccessible, "ChildCount")
	}
	if err := ap.run(ctx, counts); err != nil {
		return nil, err
	}
	for i, p := range managed {
		if c, ok := counts[i].value().(int32); ok && c > 0 && work[p].depth < maxDepth {
			work[p].childCount, work[p].kidsKnown = c, false
			frontier = append(frontier, p)
		}
	}
	return frontier, nil
}

// reachable returns what hangs from the root of work, breadth first, at
// most maxNodes nodes and maxDepth levels, with each node's depth set and
// its children trimmed to the nodes kept; it reports whether a bound cut
// anything off.
func reachable(work map[dbus.ObjectPath]*node, maxNodes, maxDepth int) (map[dbus.ObjectPath]*node, bool) {
	type entry struct {
		p dbus.ObjectPath
		d int
	}
	truncated := false
	kept := map[dbus.ObjectPath]*node{}
	queue := []entry{{rootPath, 0}}
	for len(queue) > 0 {
		e := queue[0]
		queue = queue[1:]
		n := work[e.p]
		if n == nil || kept[e.p] != nil {
			continue
		}
		if len(kept) >= maxNodes {
			truncated = true
			break
		}
		kept[e.p], n.depth = n, e.d
		if e.d >= maxDepth {
			truncated = truncated || len(n.children) > 0
			continue
		}
		for _, c := range n.children {
			queue = append(queue, entry{c, e.d + 1})
		}
	}
	for _, n := range kept {
		kids := n.children[:0:0]
		for _, c := range n.children {
			if kept[c] != nil {
				kids = append(kids, c)
			}
		}
		if len(kids) != len(n.children) {
			n.children, n.kidsKnown = kids, false
		}
	}
	return kept, truncated
}

// install makes nodes the cache, marking for a fetch what events touched
// while they loaded. It takes mu.
func (ap *app) install(nodes map[dbus.ObjectPath]*node, truncated bool, took time.Duration) {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	ap.nodes, ap.loaded, ap.truncated = nodes, true, truncated
	ap.staleKids = map[dbus.ObjectPath]bool{}
	for p := range ap.touched {
		if n := nodes[p]; n != nil {
			n.infoStale, n.textOK, n.valueOK = true, false, false
			ap.staleKids[p] = true
		}
	}
	ap.syncSurfacesLocked()
	ap.loadDur = took
	ap.changedLocked()
}

// getItems calls Cache.GetItems; a large application's answer takes
// longer than one ordinary call.
func (ap *app) getItems(ctx context.Context) ([]cacheItem, bool, error) {
	c, err := ap.connection(ctx)
	if err != nil {
		return nil, false, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*ap.a.cfg.CallTimeout)
	defer cancel()
	select {
	case ap.sem <- struct{}{}:
	case <-cctx.Done():
		return nil, false, cctx.Err()
	}
	ap.a.calls.Add(1)
	ap.beginRun()
	call := c.Object(ap.bus, cachePath).CallWithContext(cctx, "org.a11y.atspi.Cache.GetItems", 0)
	ap.endRun()
	<-ap.sem
	if isDisconnected(call.Err) {
		return nil, false, ap.a.reportCrash(ap, &req{path: cachePath, method: "org.a11y.atspi.Cache.GetItems", err: call.Err})
	}
	if call.Err != nil {
		return nil, false, call.Err
	}
	items, _, trunc, err := decodeItems(call.Body, ap.a.cfg.MaxNodes)
	return items, trunc, err
}

// buildFromItems adds the items of application bus to work, with each
// parent's children in index order.
func buildFromItems(work map[dbus.ObjectPath]*node, items []cacheItem, bus string) {
	type kid struct {
		path  dbus.ObjectPath
		index int32
		seq   int
	}
	kids := map[dbus.ObjectPath][]kid{}
	for i, it := range items {
		if it.obj.bus != bus {
			continue
		}
		n := &node{
			path: it.obj.path, childCount: it.childCount, role: it.role, name: it.name,
			desc: it.desc, states: it.states, ifaces: it.ifaces,
		}
		if it.parent.bus == bus && !it.parent.isNull() && it.obj.path != rootPath {
			n.parent = it.parent.path
			kids[n.parent] = append(kids[n.parent], kid{n.path, it.index, i})
		}
		if it.childrenGiven {
			for _, c := range it.children {
				if c.bus == bus {
					n.children = append(n.children, c.path)
				}
			}
			n.kidsKnown = true
		}
		work[n.path] = n
	}
	for p, ks := range kids {
		n := work[p]
		if n == nil || n.kidsKnown {
			continue
		}
		sort.SliceStable(ks, func(i, j int) bool {
			a, b := ks[i].index, ks[j].index
			if (a < 0) != (b < 0) {
				return b < 0
			}
			if a != b {
				return a < b
			}
			return ks[i].seq < ks[j].seq
		})
		n.children = make([]dbus.ObjectPath, 0, len(ks))
		for _, k := range ks {
			n.children = append(n.children, k.path)
		}
		n.kidsKnown = true
	}
	for _, n := range work {
		if !n.kidsKnown && n.childCount == 0 {
			n.kidsKnown = true
		}
	}
}

// expand lists the children of the frontier's nodes and, breadth first,
// describes and expands every child that known does not know, into work.
// Each frontier node must be in work. It reports whether it stopped at a
// bound.
//
// With lazyInfo, new nodes are not described one by one (four calls each):
// every one is expanded (one call), and at the end one Cache.GetItems
// describes them all. That suits GTK4, which adds an object to its cache
// when a client first references it, so after the walk its cache holds
// the whole tree; whatever GetItems does not describe is described node by
// node.
func (ap *app) expand(ctx context.Context, work map[dbus.ObjectPath]*node, frontier []dbus.ObjectPath, known func(dbus.ObjectPath) bool, lazyInfo bool) bool {
	maxDepth := ap.a.cfg.MaxDepth
	truncated := false
	var undescribed []dbus.ObjectPath
	frontier = slices.Clone(frontier) // reused below; the caller's stays as it was
	for len(frontier) > 0 && ctx.Err() == nil {
		lists, all, cut := childListings(work, frontier)
		truncated = truncated || cut
		if ap.run(ctx, all) != nil {
			return true
		}
		var fresh []dbus.ObjectPath
		for _, l := range lists {
			added, cut := ap.adopt(work, l, known)
			fresh = append(fresh, added...)
			truncated = truncated || cut
		}
		frontier = frontier[:0]
		if !lazyInfo {
			truncated = ap.describe(ctx, work, fresh, &frontier) || truncated
			continue
		}
		undescribed = append(undescribed, fresh...)
		for _, p := range fresh {
			if work[p].depth < maxDepth {
				frontier = append(frontier, p)
			} else {
				truncated = true
			}
		}
	}
	if lazyInfo && ctx.Err() == nil {
		truncated = ap.describeCached(ctx, work, undescribed) || truncated
	}
	return truncated || ctx.Err() != nil
}

// listing is the calls that list the children of the node at p.
type listing struct {
	p    dbus.ObjectPath
	reqs []*req
}

// childListings returns the calls that list the children of the frontier's
// nodes (all of them, in order, for one batch): one GetChildren per node,
// except that a node with more children than a reply may list is read
// child by child, up to the bound, which is reported as a truncation.
func childListings(work map[dbus.ObjectPath]*node, frontier []dbus.ObjectPath) (lists []listing, all []*req, truncated bool) {
	lists = make([]listing, 0, len(frontier))
	for _, p := range frontier {
		l := listing{p: p}
		if cc := work[p].childCount; cc > maxChildren {
			truncated = true
			for i := int32(0); i < maxChildren; i++ {
				l.reqs = append(l.reqs, newReq(p, ifaceAccessible+".GetChildAtIndex", i))
			}
		} else {
			l.reqs = []*req{newReq(p, ifaceAccessible+".GetChildren")}
		}
		lists = append(lists, l)
		all = append(all, l.reqs...)
	}
	return lists, all, truncated
}

// refs returns the children the listing's replies name, whether the
// reply was cut short, and false if the node's children could not be
// listed.
func (l listing) refs() (refs []ref, cut, ok bool) {
	if len(l.reqs) == 1 && l.reqs[0].method == ifaceAccessible+".GetChildren" {
		r := l.reqs[0]
		if r.err != nil || len(r.body) != 1 {
			return nil, false, false
		}
		refs, cut, _ = decodeRefs(r.body[0])
		return refs, cut, true
	}
	for _, r := range l.reqs {
		if c, err := decodeRef(r.value()); err == nil {
			refs = append(refs, c)
		}
	}
	return refs, false, true
}

// adopt makes the children l lists its node's children, and adds to work,
// at most MaxNodes in all, those neither work nor known holds yet. It
// returns the nodes added and whether a bound cut anything off. A node
// whose children could not be listed stays unlisted.
func (ap *app) adopt(work map[dbus.ObjectPath]*node, l listing, known func(dbus.ObjectPath) bool) (fresh []dbus.ObjectPath, truncated bool) {
	p, n := l.p, work[l.p]
	refs, truncated, ok := l.refs()
	if !ok {
		n.kidsKnown = false
		return nil, false
	}
	n.children = n.children[:0:0]
	for _, r := range refs {
		if r.bus != ap.bus || r.isNull() || r.path == p {
			continue // a plug in another process, or nonsense
		}
		n.children = append(n.children, r.path)
		if c := work[r.path]; c != nil {
			c.parent, c.depth = p, n.depth+1
			continue
		}
		if known(r.path) {
			continue
		}
		if len(work) >= ap.a.cfg.MaxNodes {
			truncated = true
			continue
		}
		work[r.path] = &node{path: r.path, parent: p, depth: n.depth + 1}
		fresh = append(fresh, r.path)
	}
	n.kidsKnown, n.childCount = true, int32(len(n.children))
	return fresh, truncated
}

// describeCached describes the nodes undescribed (in work) from one
// Cache.GetItems, and node by node those it leaves out. It reports
// whether it stopped at a bound.
func (ap *app) describeCached(ctx context.Context, work map[dbus.ObjectPath]*node, undescribed []dbus.ObjectPath) bool {
	items, _, err := ap.getItems(ctx)
	byPath := map[dbus.ObjectPath]*cacheItem{}
	if err == nil {
		for i := range items {
			if items[i].obj.bus == ap.bus {
				byPath[items[i].obj.path] = &items[i]
			}
		}
	}
	var rest []dbus.ObjectPath
	for _, p := range undescribed {
		n := work[p]
		it := byPath[p]
		if n == nil {
			continue
		}
		if it == nil {
			rest = append(rest, p)
			continue
		}
		n.role, n.name, n.desc, n.states, n.ifaces = it.role, it.name, it.desc, it.states, it.ifaces
	}
	var none []dbus.ObjectPath
	return ap.describe(ctx, work, rest, &none)
}

// describe fetches role, states, interfaces, name and child count of the
// nodes fresh (already in work), drops those that are gone, and adds to
// frontier those with children still to list. It reports whether it
// stopped at a bound.
func (ap *app) describe(ctx context.Context, work map[dbus.ObjectPath]*node, fresh []dbus.ObjectPath, frontier *[]dbus.ObjectPath) bool {
	// Where every node has the Action interface (see quirks), its action
	// count is asked with the rest, saving the round trip of a later fill.
	stride := 4
	if ap.q.actionOnEveryNode {
		stride = 5
	}
	info := make([]*req, 0, stride*len(fresh))
	for _, p := range fresh {
		info = append(info, infoReqs(p)...)
		if stride == 5 {
			info = append(info, getProp(p, ifaceAction, "NActions"))
		}
	}
	if ap.run(ctx, info) != nil {
		return true
	}
	truncated := false
	for i, p := range fresh {
		n := work[p]
		if !applyInfo(n, info[stride*i:stride*i+4]) {
			delete(work, p)
			continue
		}
		if stride == 5 && n.ifaces.has(ifAction) {
			if c, ok := info[stride*i+4].value().(int32); ok {
				n.nActions, n.nActionsOK = c, true
			}
		}
		switch {
		case n.childCount == 0 && !n.states.has(stManagesDescendants):
			n.kidsKnown = true
		case n.depth < ap.a.cfg.MaxDepth:
			*frontier = append(*frontier, p)
		default:
			truncated = true
		}
	}
	return truncated
}

// refresh brings the cache up to date with what events marked: lists the
// children of nodes whose children changed (walking new subtrees) and
// describes again the nodes an event could not update in place. Called
// with loadMu held.
func (ap *app) refresh(ctx context.Context) error {
	st := ap.takeStale()
	if len(st.parents) == 0 && len(st.infos) == 0 {
		return nil
	}
	if len(st.parents) > 0 {
		known := func(p dbus.ObjectPath) bool {
			ap.mu.Lock()
			defer ap.mu.Unlock()
			return ap.nodes[p] != nil
		}
		ap.expand(ctx, st.work, st.parents, known, false)
	}
	info := make([]*req, 0, 4*len(st.infos))
	for _, p := range st.infos {
		info = append(info, infoReqs(p)...)
	}
	if err := ap.run(ctx, info); err != nil {
		// Nothing applied: what was stale stays so.
		ap.mu.Lock()
		for _, p := range st.parents {
			ap.staleKids[p] = true
		}
		ap.mu.Unlock()
		return err
	}

	ap.mu.Lock()
	defer ap.mu.Unlock()
	ap.relistLocked(st)
	ap.redescribeLocked(st, info)
	if ap.staleKids[rootPath] || len(st.parents) > 0 {
		ap.syncSurfacesLocked()
	}
	ap.changedLocked()
	return nil
}

// staleSet is what refresh fetches again: the nodes whose children are
// listed again (parents; work holds a copy of each to walk into) and the
// nodes described again (infos, with the gen each had when taken).
type staleSet struct {
	parents []dbus.ObjectPath
	work    map[dbus.ObjectPath]*node
	infos   []dbus.ObjectPath
	gens    map[dbus.ObjectPath]uint64
}

// takeStale returns what events marked stale, and clears the marks on
// children (a description stays stale until it is fetched). It takes mu.
func (ap *app) takeStale() staleSet {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	st := staleSet{work: map[dbus.ObjectPath]*node{}, gens: map[dbus.ObjectPath]uint64{}}
	for p := range ap.staleKids {
		if n := ap.nodes[p]; n != nil {
			st.parents = append(st.parents, p)
			st.work[p] = &node{path: p, depth: n.depth}
		}
	}
	ap.staleKids = map[dbus.ObjectPath]bool{}
	for p, n := range ap.nodes {
		if n.infoStale {
			st.infos = append(st.infos, p)
			st.gens[p] = n.gen
		}
	}
	return st
}

// relistLocked gives the parents of st the children the walk found,
// dropping the subtrees of those gone and adding the nodes new, at most
// MaxNodes in all; a parent the walk could not list stays marked.
func (ap *app) relistLocked(st staleSet) {
	for _, p := range st.parents {
		n, w := ap.nodes[p], st.work[p]
		if n == nil || !w.kidsKnown {
			if n != nil {
				ap.staleKids[p] = true
			}
			continue
		}
		keep := map[dbus.ObjectPath]bool{}
		for _, c := range w.children {
			keep[c] = true
		}
		for _, c := range n.children {
			if !keep[c] {
				if cn := ap.nodes[c]; cn != nil && cn.parent == p {
					ap.pruneLocked(c)
				}
			}
		}
		n.children, n.childCount, n.kidsKnown = w.children, w.childCount, true
		for _, c := range n.children {
			if cn := ap.nodes[c]; cn != nil {
				cn.parent = p
				ap.setDepthLocked(c, n.depth+1)
			}
		}
	}
	for p, w := range st.work {
		if ap.nodes[p] != nil || w.parent == "" {
			continue
		}
		if len(ap.nodes) >= ap.a.cfg.MaxNodes {
			ap.truncated = true
			break
		}
		ap.nodes[p] = w
	}
}

// redescribeLocked stores the descriptions info (infoReqs of st.infos, in
// order) fetched, for the nodes no event touched meanwhile, and drops the
// nodes gone.
func (ap *app) redescribeLocked(st staleSet, info []*req) {
	for i, p := range st.infos {
		n := ap.nodes[p]
		if n == nil || n.gen != st.gens[p] {
			continue
		}
		fresh := &node{}
		if !applyInfo(fresh, info[4*i:4*i+4]) {
			if isGone(info[4*i].err) {
				ap.pruneLocked(p)
			}
			continue
		}
		n.role, n.states, n.ifaces, n.name, n.desc, n.infoStale = fresh.role, fresh.states, fresh.ifaces, fresh.name, fresh.desc, false
	}
}

func (ap *app) setDepthLocked(p dbus.ObjectPath, d int) {
	n := ap.nodes[p]
	if n == nil || n.depth == d || d > ap.a.cfg.MaxDepth+1 {
		return // the bound also ends a cycle an application made
	}
	n.depth = d
	for _, c := range n.children {
		ap.setDepthLocked(c, d+1)
	}
}

// pruneLocked removes a node and its subtree.
func (ap *app) pruneLocked(p dbus.ObjectPath) {
	n := ap.nodes[p]
	if n == nil {
		return
	}
	delete(ap.nodes, p)
	for _, c := range n.children {
		if cn := ap.nodes[c]; cn != nil && cn.parent == p {
			ap.pruneLocked(c)
		}
	}
}

// syncSurfacesLocked numbers the root's children not numbered yet and
// forgets those no longer there.
func (ap *app) syncSurfacesLocked() {
	root := ap.nodes[rootPath]
	if root == nil {
		return
	}
	here := map[dbus.ObjectPath]bool{}
	for _, c := range root.children {
		here[c] = true
		if _, ok := ap.surfaces[c]; !ok {
			ap.nextSurf++
			ap.surfaces[c] = ap.nextSurf
		}
	}
	for p := range ap.surfaces {
		if !here[p] {
			delete(ap.surfaces, p)
		}
	}
}

// subtree lists the paths under scope (scope included), depth first, at
// most limit.
func (ap *app) subtreeLocked(scope dbus.ObjectPath, limit int) []dbus.ObjectPath {
	var out []dbus.ObjectPath
	var walk func(p dbus.ObjectPath, d int)
	walk = func(p dbus.ObjectPath, d int) {
		n := ap.nodes[p]
		if n == nil || len(out) >= limit || d > ap.a.cfg.MaxDepth+1 {
			return
		}
		out = append(out, p)
		for _, c := range n.children {
			walk(c, d+1)
		}
	}
	walk(scope, 0)
	return out
}

// fill fetches the fields need asks for, for the nodes under scope that
// lack them. Called with loadMu held.
func (ap *app) fill(ctx context.Context, scope dbus.ObjectPath, need needs) error {
	if need == 0 {
		return nil
	}
	if scope == "" {
		scope = rootPath
	}
	now := time.Now()
	jobs := ap.fillJobs(scope, need, now)
	if len(jobs) == 0 {
		return nil
	}
	reqs := make([]*req, len(jobs))
	for i, j := range jobs {
		reqs[i] = j.r
	}
	if err := ap.run(ctx, reqs); err != nil {
		return err
	}
	texts, err := ap.fetchTexts(ctx, jobs)
	if err != nil {
		return err
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	for _, j := range jobs {
		ap.storeLocked(j, texts[j], now)
	}
	return nil
}

// fillJob is one field fill fetches for the node at p, with the gen the
// node had when asked (a field is stored only if it did not move).
type fillJob struct {
	p    dbus.ObjectPath
	gen  uint64
	what needs
	r    *req
}

// fillJobs lists the calls that fetch what need asks for and the nodes
// under scope lack (bounds older than BoundsMaxAge at now). For a text,
// the call is its character count (see fetchTexts). It takes mu.
func (ap *app) fillJobs(scope dbus.ObjectPath, need needs, now time.Time) []*fillJob {
	cfg := &ap.a.cfg
	countActions := ap.q.actionOnEveryNode
	var jobs []*fillJob
	ap.mu.Lock()
	defer ap.mu.Unlock()
	for _, p := range ap.subtreeLocked(scope, cfg.MaxNodes) {
		n := ap.nodes[p]
		if need&needActions != 0 && countActions && n.ifaces.has(ifAction) && !n.nActionsOK {
			jobs = append(jobs, &fillJob{p, n.gen, needActions, getProp(p, ifaceAction, "NActions")})
		}
		if need&needText != 0 && n.ifaces.has(ifText) && isTextRole(n.role) && !n.textOK {
			jobs = append(jobs, &fillJob{p, n.gen, needText, getProp(p, ifaceText, "CharacterCount")})
		}
		if need&needValue != 0 && n.ifaces.has(ifValue) && !n.valueOK {
			jobs = append(jobs, &fillJob{p, n.gen, needValue, getAllProps(p, ifaceValue)})
		}
		if need&needBounds != 0 && n.ifaces.has(ifComponent) && now.Sub(n.boundsAt) > cfg.BoundsMaxAge {
			jobs = append(jobs, &fillJob{p, n.gen, needBounds, newReq(p, ifaceComponent+".GetExtents", uint32(1))})
		}
	}
	return jobs
}

// fetchTexts reads the texts of the text jobs whose count came back: at
// most TreeTextChars of each, so no call asks past the end (some toolkits
// read past it). It returns the GetText call per job.
func (ap *app) fetchTexts(ctx context.Context, jobs []*fillJob) (map[*fillJob]*req, error) {
	var texts []*req
	textOf := map[*fillJob]*req{}
	for _, j := range jobs {
		if j.what != needText {
			continue
		}
		cnt, _ := j.r.value().(int32)
		if j.r.err != nil || cnt <= 0 {
			continue
		}
		end := min(cnt, int32(ap.a.cfg.TreeTextChars))
		t := newReq(j.p, ifaceText+".GetText", int32(0), end)
		texts = append(texts, t)
		textOf[j] = t
	}
	if err := ap.run(ctx, texts); err != nil {
		return nil, err
	}
	return textOf, nil
}

// storeLocked stores what job j fetched (text, for a text, is its GetText
// call, nil if none was made), unless an event touched the node since.
func (ap *app) storeLocked(j *fillJob, text *req, now time.Time) {
	n := ap.nodes[j.p]
	if n == nil || n.gen != j.gen {
		return
	}
	switch j.what {
	case needActions:
		if c, ok := j.r.value().(int32); ok {
			n.nActions, n.nActionsOK = c, true
		} else if j.r.err != nil && isGone(j.r.err) {
			n.nActions, n.nActionsOK = 0, true
		}
	case needText:
		n.text, n.textOK = "", j.r.err == nil
		if text != nil {
			s, _ := text.value().(string)
			n.text, n.textOK = clean(s, 4*ap.a.cfg.TreeTextChars), text.err == nil
		}
	case needValue:
		if v, err := decodeValue(j.r.value()); err == nil {
			n.value, n.valueOK = v, true
		}
	case needBounds:
		if x, y, w, h, err := decodeExtents(j.r.value()); err == nil {
			n.bounds, n.boundsAt = api.Bounds{X: int(x), Y: int(y), W: int(w), H: int(h)}, now
		}
	}
}

// toplevels makes sure the root and its children are known, without
// fetching the whole tree: enough for surfaces and the session context.
func (ap *app) toplevels(ctx context.Context) error {
	ap.mu.Lock()
	ok := ap.loaded || (ap.nodes[rootPath] != nil && ap.nodes[rootPath].kidsKnown && !ap.staleKids[rootPath])
	ap.mu.Unlock()
	if ok {
		if ap.loaded {
			return ap.ensure(ctx, "", 0)
		}
		return nil
	}
	ap.loadMu.Lock()
	defer ap.loadMu.Unlock()
	ap.mu.Lock()
	loaded := ap.loaded
	ap.mu.Unlock()
	if loaded {
		return nil
	}
	root := &node{path: rootPath}
	rs := infoReqs(rootPath)
	kids := newReq(rootPath, ifaceAccessible+".GetChildren")
	if err := ap.run(ctx, append(rs, kids)); err != nil {
		return err
	}
	if !applyInfo(root, rs) {
		return api.Errorf(api.CodeNoATSPI2Support, map[string]any{"app_id": ap.id}, "%s does not answer: %v", ap.id, rs[0].err)
	}
	if kids.err != nil || len(kids.body) != 1 {
		return api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": ap.id}, "%s does not list its windows: %v", ap.id, kids.err)
	}
	refs, _, _ := decodeRefs(kids.body[0])
	var paths []dbus.ObjectPath
	for _, r := range refs {
		if r.bus == ap.bus && !r.isNull() && r.path != rootPath {
			paths = append(paths, r.path)
		}
	}
	info := make([]*req, 0, 4*len(paths))
	for _, p := range paths {
		info = append(info, infoReqs(p)...)
	}
	if err := ap.run(ctx, info); err != nil {
		return err
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if ap.loaded {
		return nil
	}
	nodes := map[dbus.ObjectPath]*node{rootPath: root}
	for i, p := range paths {
		n := &node{path: p, parent: rootPath, depth: 1}
		if applyInfo(n, info[4*i:4*i+4]) {
			nodes[p] = n
			root.children = append(root.children, p)
		}
	}
	root.kidsKnown = true
	ap.nodes = nodes
	delete(ap.staleKids, rootPath)
	ap.syncSurfacesLocked()
	return nil
}

// surfaceOfLocked returns the top-level window above p (p itself if it is
// one), or "".
func (ap *app) surfaceOfLocked(p dbus.ObjectPath) dbus.ObjectPath {
	for i := 0; i <= ap.a.cfg.MaxDepth+1; i++ {
		n := ap.nodes[p]
		if n == nil {
			return ""
		}
		if n.parent == rootPath {
			return p
		}
		p = n.parent
	}
	return ""
}

// surfaceIDLocked returns the surface id of the window above p, or "".
func (ap *app) surfaceIDLocked(p dbus.ObjectPath) string {
	w := ap.surfaceOfLocked(p)
	if n, ok := ap.surfaces[w]; ok && w != "" {
		return SurfaceID(ap.id, n)
	}
	return ""
}

// windowPath returns the path of surface number num.
func (ap *app) windowPathLocked(num int) (dbus.ObjectPath, bool) {
	for p, n := range ap.surfaces {
		if n == num {
			return p, true
		}
	}
	return "", false
}

func (ap *app) stats() AppStats {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	s := AppStats{AppID: ap.id, BusName: ap.bus, Name: ap.name, Toolkit: ap.toolkit, ToolkitVersion: ap.version,
		Direct: ap.direct != nil && ap.direct.Connected(), Loaded: ap.loaded, Truncated: ap.truncated, Surfaces: len(ap.surfaces),
		Coordinates: "screen"}
	if ap.q.windowCoordsOnly && ap.a.cfg.WindowOrigins == nil {
		s.Coordinates = "window"
	}
	if ap.loaded {
		s.Nodes = len(ap.nodes)
		s.LastLoadMS = float64(ap.loadDur.Microseconds()) / 1000
	}
	return s
}

// forget drops the cache, so the next read fetches the tree again.
func (ap *app) forget() {
	ap.loadMu.Lock()
	defer ap.loadMu.Unlock()
	ap.mu.Lock()
	defer ap.mu.Unlock()
	ap.nodes, ap.loaded = map[dbus.ObjectPath]*node{}, false
	ap.staleKids = map[dbus.ObjectPath]bool{}
}

// errGone says an element no longer exists.
var errGone = errors.New("gone")
