package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// actionFunc is one form post: the form's fields onto one core call.
type actionFunc func(ctx context.Context, b *core.Broker, f url.Values) (any, error)

// actions are the dashboard's form posts, POST /action/<name>.
var actions = map[string]actionFunc{
	"approve": func(ctx context.Context, b *core.Broker, f url.Values) (any, error) {
		return b.ApproveConfirmation(ctx, &api.ConfirmDecisionParams{ConfirmationID: f.Get("confirmation_id"), Reason: f.Get("reason")})
	},
	"deny": func(ctx context.Context, b *core.Broker, f url.Values) (any, error) {
		reason := f.Get("reason")
		if reason == "" {
			reason = "denied on the dashboard"
		}
		return b.DenyConfirmation(ctx, &api.ConfirmDecisionParams{ConfirmationID: f.Get("confirmation_id"), Reason: reason})
	},
	"undo": func(ctx context.Context, b *core.Broker, f url.Values) (any, error) {
		return b.UndoJob(ctx, &api.JobsUndoParams{JobID: f.Get("job_id")})
	},
	"revoke": func(ctx context.Context, b *core.Broker, f url.Values) (any, error) {
		reason := f.Get("reason")
		if reason == "" {
			reason = "revoked on the dashboard"
		}
		return b.RevokeApp(ctx, &api.RevokeAppParams{AppID: f.Get("app_id"), Reason: reason})
	},
	"allow": func(ctx context.Context, b *core.Broker, f url.Values) (any, error) {
		return b.AllowApp(ctx, &api.AppsAllowParams{AppID: f.Get("app_id")})
	},
}

type actionResult struct {
	OK     bool `json:"ok"`
	Result any  `json:"result"`
}

// action serves a form post. A page's script posts with Accept:
// application/json and shows the answer; a plain form (no script) is
// sent back to the page it came from.
func (s *Server) action(a actionFunc) func(w http.ResponseWriter, r *http.Request, se *session) {
	return func(w http.ResponseWriter, r *http.Request, se *session) {
		if !s.checkForm(w, r, se) {
			return
		}
		ctx, sess := s.userContext(r.Context(), core.Endpoint{})
		res, err := a(ctx, s.b, r.PostForm)
		sess.Close()
		if strings.Contains(r.Header.Get("Accept"), "application/json") {
			if err != nil {
				writeError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, &actionResult{OK: true, Result: res})
			return
		}
		back := "/" + r.PostForm.Get("page")
		if !validPage(r.PostForm.Get("page")) {
			back = "/confirmations"
		}
		if err != nil {
			writeError(w, err)
			return
		}
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
}

func validPage(p string) bool {
	for _, n := range pageNames {
		if n == p {
			return true
		}
	}
	return false
}
