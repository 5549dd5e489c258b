// Package rpc is the JSON-RPC 2.0 face of spec 000: ndjson over a stream
// socket. It decodes each request, calls one typed core method, and
// encodes the result. It holds no business rule.
package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// method is one entry of the face's method table.
type method struct {
	name string
	// userOnly methods are refused on agent connections: api.Methods
	// gives them the user's role (withRoles).
	userOnly bool
	call     func(ctx context.Context, b *core.Broker, params json.RawMessage) (any, error)
}

// withRoles sets each method's role from api.Methods, the one list of
// who may call what. A method missing there is a programming error.
func withRoles(ms []method) []method {
	for i := range ms {
		info, ok := api.LookupMethod(ms[i].name)
		if !ok {
			panic("rpc: method " + ms[i].name + " is not in api.Methods")
		}
		ms[i].userOnly = info.Role == api.RoleUser
	}
	return ms
}

// typed adapts a core method to the table: it decodes params into P,
// naming the field on a type error.
func typed[P, R any](f func(b *core.Broker, ctx context.Context, p *P) (*R, error)) func(context.Context, *core.Broker, json.RawMessage) (any, error) {
	return func(ctx context.Context, b *core.Broker, raw json.RawMessage) (any, error) {
		p := new(P)
		if err := decodeParams(raw, p); err != nil {
			return nil, err
		}
		r, err := f(b, ctx, p)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
}

// noParams adapts a core method that takes no parameters; any params
// object is accepted and ignored, an array is refused.
func noParams[R any](f func(b *core.Broker, ctx context.Context) (*R, error)) func(context.Context, *core.Broker, json.RawMessage) (any, error) {
	return func(ctx context.Context, b *core.Broker, raw json.RawMessage) (any, error) {
		var ignored map[string]json.RawMessage
		if err := decodeParams(raw, &ignored); err != nil {
			return nil, err
		}
		r, err := f(b, ctx)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
}

// methods is the face's method table, sorted by name (a test keeps it
// sorted and complete against api.Methods). session.authenticate is not in
// it: the connection's handler serves it before any other.
var methods = withRoles([]method{
	{name: api.MethodAgentsClose, call: typed((*core.Broker).CloseAgent)},
	{name: api.MethodAgentsOpen, call: typed((*core.Broker).OpenAgent)},
	{name: api.MethodAppsAllow, call: typed((*core.Broker).AllowApp)},
	{name: api.MethodAppsList, call: noParams((*core.Broker).Apps)},
	{name: api.MethodAppsSocket, call: typed((*core.Broker).AppSocket)},
	{name: api.MethodAppsState, call: typed((*core.Broker).AppState)},
	{name: api.MethodAuditCheckpoint, call: noParams((*core.Broker).AuditCheckpoint)},
	{name: api.MethodAuditConsistency, call: typed((*core.Broker).AuditConsistency)},
	{name: api.MethodAuditProve, call: typed((*core.Broker).AuditProve)},
	{name: api.MethodAuditTail, call: typed((*core.Broker).AuditTail)},
	{name: api.MethodAuditVerify, call: noParams((*core.Broker).AuditVerify)},
	{name: api.MethodConfirmApprove, call: typed((*core.Broker).ApproveConfirmation)},
	{name: api.MethodConfirmDeny, call: typed((*core.Broker).DenyConfirmation)},
	{name: api.MethodConfirmList, call: noParams((*core.Broker).Confirmations)},
	{name: api.MethodDashboardLogin, call: noParams((*core.Broker).DashboardLogin)},
	{name: api.MethodEventsHistory, call: typed((*core.Broker).EventHistory)},
	{name: api.MethodHealthCheck, call: noParams((*core.Broker).Health)},
	{name: api.MethodInvokeAction, call: typed((*core.Broker).InvokeAction)},
	{name: api.MethodInvokeCapability, call: invokeCapability},
	{name: api.MethodJobsList, call: typed((*core.Broker).Jobs)},
	{name: api.MethodJobsUndo, call: typed((*core.Broker).UndoJob)},
	{name: api.MethodPolicyReload, call: noParams((*core.Broker).ReloadPolicy)},
	{name: api.MethodPolicyShow, call: typed((*core.Broker).PolicyShow)},
	{name: api.MethodQueryCapabilities, call: typed((*core.Broker).QueryCapabilities)},
	{name: api.MethodQueryElements, call: typed((*core.Broker).QueryElements)},
	{name: api.MethodQuerySessionContext, call: noParams((*core.Broker).SessionContext)},
	{name: api.MethodQuerySurface, call: typed((*core.Broker).QuerySurface)},
	{name: api.MethodRegisterAdapter, call: typed((*core.Broker).RegisterAdapter)},
	{name: api.MethodRegisterCapability, call: typed((*core.Broker).RegisterCapability)},
	{name: api.MethodRevokeApp, call: typed((*core.Broker).RevokeApp)},
	{name: api.MethodSubscribeEvents, call: typed((*core.Broker).Subscribe)},
	{name: api.MethodUnsubscribeEvents, call: typed((*core.Broker).Unsubscribe)},
})

func lookup(name string) *method {
	i := sort.Search(len(methods), func(i int) bool { return methods[i].name >= name })
	if i < len(methods) && methods[i].name == name {
		return &methods[i]
	}
	return nil
}

// decodeParams decodes a params object into v. Absent or null params
// decode as an empty object; an array is refused (PCP's methods take
// named parameters).
func decodeParams(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '[' {
		return &api.Error{Code: api.CodeInvalidParams, Message: "params must be an object (PCP methods take named parameters)", Data: map[string]any{"field": "params"}}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = "params"
			}
			return api.InvalidParam(field, "expected %s, got JSON %s", goTypeName(te.Type.Kind().String(), te.Type.String()), te.Value)
		}
		return &api.Error{Code: api.CodeInvalidParams, Message: err.Error(), Data: map[string]any{"field": "params"}}
	}
	return nil
}

// goTypeName names a Go type the way a JSON user thinks of it.
func goTypeName(kind, typ string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "integer"
	case strings.HasPrefix(kind, "float"):
		return "number"
	case kind == "string":
		return "string"
	case kind == "bool":
		return "boolean"
	case kind == "slice", kind == "array":
		if typ == "json.RawMessage" {
			return "JSON value"
		}
		return "array"
	case kind == "map", kind == "struct", kind == "ptr":
		return "object"
	}
	return typ
}
