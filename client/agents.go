package client

import (
	"context"

	"github.com/pcp-dev/pcp/api"
)

// OpenAgent opens the named contained agent's own socket (agents.open,
// on the control socket). It stays open until CloseAgent or until this
// connection closes.
func (c *Client) OpenAgent(ctx context.Context, name string) (*api.AgentsOpenResult, error) {
	return call[api.AgentsOpenResult](ctx, c, api.MethodAgentsOpen, &api.AgentsOpenParams{Name: name})
}

// CloseAgent closes an agent's socket and its connections.
func (c *Client) CloseAgent(ctx context.Context, name string) (*api.AgentsCloseResult, error) {
	return call[api.AgentsCloseResult](ctx, c, api.MethodAgentsClose, &api.AgentsCloseParams{Name: name})
}

// DashboardLogin asks for a one-time login URL of the web dashboard
// (dashboard.login, on the control socket; pcpd --dashboard).
func (c *Client) DashboardLogin(ctx context.Context) (*api.DashboardLoginResult, error) {
	return call[api.DashboardLoginResult](ctx, c, api.MethodDashboardLogin, nil)
}
