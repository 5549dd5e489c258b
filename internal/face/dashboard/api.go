package dashboard

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// The pages' reads: each answers JSON from core calls on a session of
// the user's role, with the server's clock (now, RFC 3339 with
// milliseconds) so that countdowns do not depend on the browser's.

// read runs f on a user session and writes its answer or its error.
func (s *Server) read(w http.ResponseWriter, r *http.Request, f func(ctx context.Context) (any, error)) {
	ctx, sess := s.userContext(r.Context(), core.Endpoint{})
	defer sess.Close()
	v, err := f(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) now() string { return s.opts.Now().UTC().Format(time.RFC3339Nano) }

type confirmationsView struct {
	Now           string             `json:"now"`
	Confirmations []api.Confirmation `json:"confirmations"`
}

func (s *Server) apiConfirmations(w http.ResponseWriter, r *http.Request, _ *session) {
	s.read(w, r, func(ctx context.Context) (any, error) {
		res, err := s.b.Confirmations(ctx)
		if err != nil {
			return nil, err
		}
		return &confirmationsView{Now: s.now(), Confirmations: res.Confirmations}, nil
	})
}

type jobsView struct {
	Now  string    `json:"now"`
	Jobs []api.Job `json:"jobs"`
}

func (s *Server) apiJobs(w http.ResponseWriter, r *http.Request, _ *session) {
	s.read(w, r, func(ctx context.Context) (any, error) {
		res, err := s.b.Jobs(ctx, &api.JobsListParams{Limit: 100})
		if err != nil {
			return nil, err
		}
		return &jobsView{Now: s.now(), Jobs: res.Jobs}, nil
	})
}

type eventsView struct {
	Events []api.Event `json:"events"`
	Types  []string    `json:"types"`
	Next   int64       `json:"next,omitempty"`
}

func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request, _ *session) {
	before, _ := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
	s.read(w, r, func(ctx context.Context) (any, error) {
		res, err := s.b.EventHistory(ctx, &api.EventsHistoryParams{Limit: 200, Before: before})
		if err != nil {
			return nil, err
		}
		return &eventsView{Events: res.Events, Types: api.EventTypes, Next: res.Next}, nil
	})
}

type auditView struct {
	Verify  *api.AuditVerifyResult `json:"verify"`
	Entries []api.AuditEntry       `json:"entries"`
	Next    int64                  `json:"next,omitempty"`
	// Broken is the first entry that does not verify, when the chain is
	// broken and the entry is still there to show.
	Broken *api.AuditEntry `json:"broken,omitempty"`
}

func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request, _ *session) {
	before, _ := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
	s.read(w, r, func(ctx context.Context) (any, error) {
		v, err := s.b.AuditVerify(ctx)
		if err != nil {
			return nil, err
		}
		tail, err := s.b.AuditTail(ctx, &api.AuditTailParams{Limit: 100, Before: before})
		if err != nil {
			return nil, err
		}
		out := &auditView{Verify: v, Entries: tail.Entries, Next: tail.Next}
		if !v.OK && v.BrokenSeq > 0 {
			if b, err := s.b.AuditTail(ctx, &api.AuditTailParams{Limit: 1, Before: v.BrokenSeq + 1}); err == nil && len(b.Entries) == 1 && b.Entries[0].Seq == v.BrokenSeq {
				out.Broken = &b.Entries[0]
			}
		}
		return out, nil
	})
}

type appsView struct {
	Apps         []api.App              `json:"apps"`
	Capabilities []api.Capability       `json:"capabilities"`
	Policy       []api.PolicyCapability `json:"policy"`
	PolicyPath   string                 `json:"policy_path"`
	PolicyLoaded bool                   `json:"policy_loaded"`
	Tier3        api.Valued             `json:"tier3"`
}

func (s *Server) apiApps(w http.ResponseWriter, r *http.Request, _ *session) {
	s.read(w, r, func(ctx context.Context) (any, error) {
		apps, err := s.b.Apps(ctx)
		if err != nil {
			return nil, err
		}
		caps, err := s.b.QueryCapabilities(ctx, &api.QueryCapabilitiesParams{})
		if err != nil {
			return nil, err
		}
		pol, err := s.b.PolicyShow(ctx, &api.PolicyShowParams{})
		if err != nil {
			return nil, err
		}
		return &appsView{Apps: apps.Apps, Capabilities: caps.Capabilities, Policy: pol.Capabilities,
			PolicyPath: pol.Path, PolicyLoaded: pol.Loaded, Tier3: pol.Tier3}, nil
	})
}
