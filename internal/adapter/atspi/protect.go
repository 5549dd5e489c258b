package atspi

import (
	"context"

	"github.com/pcp-dev/pcp/api"
)

// Protect marks the windows of process pid as PCP's own prompts, under
// key (who shows them: "notifications" for the desktop notification
// server); pid <= 0 removes key's process. The adapter never acts on an
// element of a protected process (activate, select, set_value, scroll,
// read_text, whether by invoke.action or a capability): an agent must
// not press Approve on the prompt that asks the user about it. Reading
// its tree stays allowed.
func (a *Adapter) Protect(key string, pid int) {
	a.protMu.Lock()
	defer a.protMu.Unlock()
	if a.protected == nil {
		a.protected = map[string]int{}
	}
	if pid <= 0 {
		delete(a.protected, key)
		return
	}
	a.protected[key] = pid
}

// refuseProtected refuses to act on ap when its process shows PCP's own
// prompts. When some process is protected and ap's cannot be told, the
// action is refused too.
func (a *Adapter) refuseProtected(ctx context.Context, ap *app) error {
	a.protMu.Lock()
	if len(a.protected) == 0 {
		a.protMu.Unlock()
		return nil
	}
	pids := make(map[int]string, len(a.protected))
	for k, p := range a.protected {
		pids[p] = k
	}
	a.protMu.Unlock()
	pid, err := ap.processID(ctx)
	if err != nil {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": ap.id, "reason": "pcp_prompt"},
			"cannot tell whether %s shows PCP's own prompts (%v): not acting on it", ap.id, err)
	}
	if key, ok := pids[int(pid)]; ok {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": ap.id, "reason": "pcp_prompt", "shows": key, "pid": pid},
			"%s shows PCP's own prompts (%s, pid %d): PCP's adapters do not act on them", ap.id, key, pid)
	}
	return nil
}

// processID returns the application's process id, as the bus daemon
// knows it (asked once).
func (ap *app) processID(ctx context.Context) (uint32, error) {
	ap.mu.Lock()
	pid := ap.pid
	ap.mu.Unlock()
	if pid != 0 {
		return pid, nil
	}
	c, err := ap.a.conn(ctx)
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, ap.a.cfg.CallTimeout)
	defer cancel()
	if err := c.BusObject().CallWithContext(cctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0, ap.bus).Store(&pid); err != nil {
		return 0, err
	}
	ap.mu.Lock()
	ap.pid = pid
	ap.mu.Unlock()
	return pid, nil
}
