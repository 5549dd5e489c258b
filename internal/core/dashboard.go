package core

import (
	"context"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// The web dashboard (internal/face/dashboard) is a face of the user's
// role served on loopback HTTP. A browser logs in with a one-time URL
// that only the user's control connection can ask for (dashboard.login),
// so a process that reaches the loopback port, a contained agent among
// them, has nothing to present.

// DashboardLogins mints the dashboard's one-time login URLs. The daemon
// provides it when it serves the dashboard; it may be called
// concurrently.
type DashboardLogins interface {
	// NewLogin returns a URL that logs one browser in, once, until
	// expires.
	NewLogin() (url string, expires time.Time, err error)
	// Address is the dashboard's listener, for the audit log.
	Address() string
}

type dashboardSlot struct{ l DashboardLogins }

// SetDashboard gives the broker the dashboard's logins; nil takes them
// away (the dashboard stopped). Without them dashboard.login answers
// that the dashboard is off.
func (b *Broker) SetDashboard(l DashboardLogins) {
	if l == nil {
		b.dashboard.Store(nil)
		return
	}
	b.dashboard.Store(&dashboardSlot{l: l})
}

// DashboardLogin answers dashboard.login: a one-time login URL of the
// dashboard, for the user only.
func (b *Broker) DashboardLogin(ctx context.Context) (*api.DashboardLoginResult, error) {
	if roleOf(ctx) != RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"},
			"only the user logs into the dashboard; use the control socket")
	}
	slot := b.dashboard.Load()
	if slot == nil {
		return nil, api.Errorf(api.CodeActionNotSupported, map[string]any{"dashboard": false},
			"pcpd serves no dashboard; start it with --dashboard 127.0.0.1:PORT")
	}
	if err := b.auditAvailable(); err != nil {
		return nil, err
	}
	url, expires, err := slot.l.NewLogin()
	if err != nil {
		return nil, api.Errorf(api.CodeInternalError, nil, "dashboard login: %v", err)
	}
	exp := expires.UTC().Format(time.RFC3339)
	if err := b.audit(ctx, audit.Record{Kind: api.AuditDashboard, Actor: SessionFrom(ctx).Actor(), Outcome: api.AuditDashboardLoginIssued,
		Detail: detailOf(&api.AuditDashboardDetail{Address: slot.l.Address(), ExpiresAt: exp})}); err != nil {
		return nil, err
	}
	return &api.DashboardLoginResult{URL: url, ExpiresAt: exp}, nil
}

// DashboardSession audits a browser's dashboard session opening (a login
// URL traded for its cookie) or closing (logout), on the dashboard's
// user-role session. session is a short tag of the session, never its
// cookie.
func (b *Broker) DashboardSession(ctx context.Context, addr, session string, opened bool) error {
	if roleOf(ctx) != RoleUser {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"}, "only the dashboard audits its sessions")
	}
	outcome := api.AuditDashboardSessionClosed
	if opened {
		outcome = api.AuditDashboardSessionOpened
	}
	return b.audit(ctx, audit.Record{Kind: api.AuditDashboard, Actor: SessionFrom(ctx).Actor(), Outcome: outcome,
		Detail: detailOf(&api.AuditDashboardDetail{Address: addr, Session: session})})
}
