package scomp

import "context"

type agentKey struct{}

// WithAgent marks a connection's context (http.Server.ConnContext) as
// accepted on contained agent name's own scomp.sock: UnixHandler opens
// its sessions with SessionInfo.Agent set to name. The daemon says who
// the agent is; nothing the peer sends can.
func WithAgent(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, agentKey{}, name)
}

func agentOf(ctx context.Context) string {
	name, _ := ctx.Value(agentKey{}).(string)
	return name
}
