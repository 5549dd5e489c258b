package pavo

import (
	"context"
	"encoding/json"

	"github.com/pcp-dev/pcp/api"
)

// viewDef is one view: what the views op lists, the bindings view
// resolves, the root tree built from the caller's params and the resolved
// data, and the forms submit posts to.
type viewDef struct {
	id, title, description string
	params                 []FormField
	queries                []QueryBinding
	root                   func(params map[string]json.RawMessage, data map[string]any) ViewNode
	forms                  []formDef
	// dynamicForm resolves a form whose id is not known in advance (the
	// invoke view's form is the capability's id).
	dynamicForm func(d *Driver, ctx context.Context, id string) (*formDef, error)
}

func (v *viewDef) route() string { return "/pcp/" + v.id }

func (v *viewDef) summary() ViewSummary {
	return ViewSummary{ID: v.id, Title: v.title, Route: v.route(), Description: v.description, Queries: v.queries, Params: v.params}
}

// binding is a QueryBinding of a named query, under its own name.
func binding(name string, static map[string]any) QueryBinding {
	return QueryBinding{Name: name, Op: OpQuery, Query: name, Params: static}
}

func stack(children ...ViewNode) ViewNode { return ViewNode{Kind: "stack", Children: children} }

func table(id, title, query string, cols ...Column) ViewNode {
	return ViewNode{Kind: "table", ID: id, Title: title, Query: query, Columns: cols}
}

func properties(id, title, query string, cols ...Column) ViewNode {
	return ViewNode{Kind: "properties", ID: id, Title: title, Query: query, Columns: cols}
}

func col(key, label string) Column { return Column{Key: key, Label: label} }

func rcol(key, label string) Column { return Column{Key: key, Label: label, Align: "right"} }

// Columns shared by several views.
var (
	appColumns = []Column{col("app_id", "App"), col("state", "State"), rcol("tier", "Tier"), col("via", "Via"), rcol("capabilities", "Capabilities"),
		col("signed", "Signed"), col("publisher", "Publisher"), col("revoked_at", "Revoked at"), col("reason", "Reason")}
	capabilityColumns = []Column{col("id", "Capability"), col("trust_level", "Trust"), rcol("tier", "Tier"),
		col("available", "Available"), col("description", "Description")}
)

// views lists every view, in the order the views op lists them.
var views = []*viewDef{
	{
		id: "health", title: "Health",
		description: "Whether pcpd is well: its status, version, uptime and counters.",
		queries:     []QueryBinding{binding("health", nil)},
		root: func(map[string]json.RawMessage, map[string]any) ViewNode {
			return properties("health", "pcpd", "health",
				col("status", "Status"), col("version", "Version"), rcol("uptime_ms", "Uptime (ms)"),
				rcol("app_count", "Apps"), rcol("capability_count", "Capabilities"),
				rcol("pending_confirmations", "Pending confirmations"), rcol("active_sessions", "Sessions"),
				rcol("subscription_count", "Subscriptions"), rcol("journal_length", "Journal length"),
				col("allow_unsigned", "Unsigned manifests allowed"))
		},
	},
	{
		id: "apps", title: "Apps",
		description: "Every app pcpd knows, running or not, built in or revoked; revoke one, or allow a revoked one again.",
		params:      queryParams("apps"),
		queries:     []QueryBinding{binding("apps", nil)},
		root: func(map[string]json.RawMessage, map[string]any) ViewNode {
			return stack(table("apps", "Apps", "apps", appColumns...), revokeForm.node(""), allowForm.node(""))
		},
		forms: []formDef{revokeForm, allowForm},
	},
	{
		id: "app", title: "App",
		description: "One app: its state and its capabilities; revoke it, or allow it again.",
		params:      []FormField{pAppID},
		queries:     []QueryBinding{binding("app", nil), binding("capabilities", nil)},
		root: func(params map[string]json.RawMessage, _ map[string]any) ViewNode {
			var appID string
			json.Unmarshal(params["app_id"], &appID)
			return stack(
				properties("app", "App", "app", appColumns...),
				table("capabilities", "Capabilities", "capabilities", capabilityColumns...),
				revokeForm.node(appID), allowForm.node(appID))
		},
		forms: []formDef{revokeForm, allowForm},
	},
	{
		id: "capabilities", title: "Capabilities",
		description: "Registered capabilities, filterable by app, tier, trust level and availability.",
		params:      queryParams("capabilities"),
		queries:     []QueryBinding{binding("capabilities", nil)},
		root: func(map[string]json.RawMessage, map[string]any) ViewNode {
			return table("capabilities", "Capabilities", "capabilities",
				append([]Column{col("app_id", "App")}, capabilityColumns...)...)
		},
	},
	{
		id: "invoke", title: "Invoke",
		description: "Invoke a capability as the user, with a form built from its manifest's parameters.",
		params:      []FormField{pCapID},
		queries:     []QueryBinding{binding("capability", nil)},
		root:        invokeRoot,
		dynamicForm: invokeForm,
	},
	{
		id: "events", title: "Events",
		description: "The event journal, newest first: registrations, invocations, confirmations, jobs, apps, surfaces.",
		params:      queryParams("events"),
		queries:     []QueryBinding{binding("events", map[string]any{"limit": defaultEvents})},
		root: func(map[string]json.RawMessage, map[string]any) ViewNode {
			return table("events", "Events", "events", rcol("sequence", "Seq"), col("time", "Time"), col("type", "Type"),
				col("app_id", "App"), col("surface_id", "Surface"), col("summary", "Details"))
		},
	},
	{
		id: "audit", title: "Audit",
		description: "The hash-chained audit log, newest first, and whether the chain verifies.",
		params:      queryParams("audit"),
		queries:     []QueryBinding{binding("audit_chain", nil), binding("audit", map[string]any{"limit": defaultAudit})},
		root: func(map[string]json.RawMessage, map[string]any) ViewNode {
			return stack(
				ViewNode{Kind: KindAuditChain, ID: "chain", Title: "Chain", Query: "audit_chain"},
				ViewNode{Kind: KindAuditLog, ID: "entries", Title: "Entries", Query: "audit"})
		},
	},
	{
		id: "confirmations", title: "Confirmations",
		description: "What the agent asked to do and waits for you to decide, pending first; approve or deny.",
		params:      queryParams("confirmations"),
		queries:     []QueryBinding{binding("confirmations", nil)},
		root: func(map[string]json.RawMessage, map[string]any) ViewNode {
			return stack(
				table("confirmations", "Confirmations", "confirmations",
					col("confirmation_id", "ID"), col("state", "State"), col("capability_id", "Capability"),
					col("description", "Description"), col("requester", "Requested by"), col("expires_at", "Expires at")),
				approveForm.node(""), denyForm.node(""))
		},
		forms: []formDef{approveForm, denyForm},
	},
	{
		id: "jobs", title: "Jobs",
		description: "Approved actions waiting out their undo window (undo them before they run), and recent executions.",
		params:      queryParams("jobs"),
		queries:     []QueryBinding{binding("jobs", nil), binding("executions", nil)},
		root: func(map[string]json.RawMessage, map[string]any) ViewNode {
			return stack(
				table("jobs", "Deferred jobs", "jobs", col("job_id", "ID"), col("state", "State"),
					col("capability_id", "Capability"), col("run_at", "Runs at"), col("updated_at", "Updated at"), col("reason", "Reason")),
				undoForm.node(""),
				table("executions", "Recent executions", "executions", rcol("seq", "Seq"), col("time", "Time"),
					col("capability_id", "Capability"), col("outcome", "Outcome"), col("actor", "Actor"), col("route", "Route")))
		},
		forms: []formDef{undoForm},
	},
	{
		id: "elements", title: "Elements",
		description: "A surface's semantic element tree, drawn as a wireframe of the elements' bounds.",
		params:      queryParams("elements"),
		queries:     []QueryBinding{binding("surface", nil), binding("elements", nil)},
		root: func(map[string]json.RawMessage, map[string]any) ViewNode {
			return stack(
				properties("surface", "Surface", "surface", col("surface_id", "Surface"), col("app_id", "App"),
					col("title", "Title"), col("state", "State"), rcol("tier", "Tier")),
				ViewNode{Kind: KindElementTree, ID: "tree", Title: "Element tree", Query: "elements"})
		},
	},
}

func queryParams(name string) []FormField { return findQuery(name).params }

func findView(id string) *viewDef {
	for _, v := range views {
		if v.id == id {
			return v
		}
	}
	return nil
}

func viewIDs() []string {
	var out []string
	for _, v := range views {
		out = append(out, v.id)
	}
	return out
}

func summaries() []ViewSummary {
	out := make([]ViewSummary, 0, len(views))
	for _, v := range views {
		out = append(out, v.summary())
	}
	return out
}

// resolveView runs every binding of v (static params under the caller's)
// and builds its tree. A binding that fails is {"error": "…"} in data.
func (d *Driver) resolveView(ctx context.Context, v *viewDef, caller map[string]json.RawMessage) *ViewResult {
	data := make(map[string]any, len(v.queries))
	for _, b := range v.queries {
		res, err := d.runQuery(ctx, b.Query, mergeParams(b.Params, caller))
		if err != nil {
			data[b.Name] = BindingError{Error: err.Error()}
			continue
		}
		data[b.Name] = res
	}
	s := v.summary()
	return &ViewResult{
		View: ViewSpec{ID: s.ID, Title: s.Title, Route: s.Route, Description: s.Description, Queries: s.Queries, Params: s.Params,
			Root: v.root(caller, data)},
		Data: data,
	}
}

// invokeRoot is the invoke view's tree: the capability and its form, or
// a hint when there is no capability to show.
func invokeRoot(_ map[string]json.RawMessage, data map[string]any) ViewNode {
	c, ok := data["capability"].(*api.Capability)
	if !ok {
		msg := `Name a capability with the param capability_id; the capabilities view lists them.`
		if be, ok := data["capability"].(BindingError); ok {
			msg = "No form: " + be.Error
		}
		return ViewNode{Kind: "text", ID: "hint", Text: msg}
	}
	f := capabilityForm(c)
	return stack(
		properties("capability", "Capability", "capability", col("id", "Capability"), col("description", "Description"),
			col("trust_level", "Trust"), rcol("tier", "Tier"), col("available", "Available"),
			col("confirmation_type", "Confirmation"), rcol("undo_window_ms", "Undo window (ms)")),
		f.node(""))
}

// node is the form as a view node; appID, when set, is the default of
// its app_id field.
func (f formDef) node(appID string) ViewNode {
	fields := make([]FormField, len(f.fields))
	copy(fields, f.fields)
	for i := range fields {
		if fields[i].Key == "app_id" && appID != "" {
			fields[i].Default = appID
		}
	}
	return ViewNode{Kind: "form", ID: f.id, Title: f.title, Fields: fields, SubmitOp: f.submitOp, SubmitLabel: f.submitLabel}
}
