package pavo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pcp-dev/pcp/api"
)

// formDef is a form a view carries: the fields the host collects and what
// submitting them does. After a submit that went through, the view named
// by fresh is resolved again, with freshParams, and sent back in the
// result: freshSelf is the view the form lives in (with the submitted
// app_id as its param).
type formDef struct {
	id, title, submitOp, submitLabel string
	fields                           []FormField
	submit                           func(d *Driver, ctx context.Context, v fieldValues) (*SubmitResult, error)
	fresh                            string
	freshParams                      map[string]any
}

// pendingOnly shows what is left to decide after a decision. (The one
// just decided moves on from approved to used as soon as the agent acts,
// which is the agent's timing, not the user's.)
var pendingOnly = map[string]any{"state": api.ConfirmPending}

const freshSelf = "."

var (
	fReason = FormField{Key: "reason", Label: "Reason", Type: FieldString, Help: "Why, for the audit log (and the agent)."}

	approveForm = formDef{
		id: "approve", title: "Approve a confirmation", submitOp: api.MethodConfirmApprove, submitLabel: "Approve",
		fields: []FormField{
			{Key: "confirmation_id", Label: "Confirmation", Type: FieldString, Required: true, Help: "The pending confirmation's id."},
			fReason,
		},
		submit: decide(api.MethodConfirmApprove, "approved"),
		fresh:  "confirmations", freshParams: pendingOnly,
	}
	denyForm = formDef{
		id: "deny", title: "Deny a confirmation", submitOp: api.MethodConfirmDeny, submitLabel: "Deny",
		fields: []FormField{
			{Key: "confirmation_id", Label: "Confirmation", Type: FieldString, Required: true, Help: "The pending confirmation's id."},
			fReason,
		},
		submit: decide(api.MethodConfirmDeny, "denied"),
		fresh:  "confirmations", freshParams: pendingOnly,
	}
	undoForm = formDef{
		id: "undo", title: "Undo a deferred job", submitOp: api.MethodJobsUndo, submitLabel: "Undo",
		fields: []FormField{{Key: "job_id", Label: "Job", Type: FieldString, Required: true, Help: "A queued job's id; it will not run."}},
		submit: func(d *Driver, ctx context.Context, v fieldValues) (*SubmitResult, error) {
			var res api.JobsUndoResult
			if err := d.call(ctx, api.MethodJobsUndo, &api.JobsUndoParams{JobID: v.str("job_id")}, &res); err != nil {
				return nil, err
			}
			return &SubmitResult{
				Message: fmt.Sprintf("undid %s (%s); it will not run", res.Job.JobID, res.Job.CapabilityID),
				Data:    &res,
			}, nil
		},
		fresh: "jobs",
	}
	revokeForm = formDef{
		id: "revoke", title: "Revoke an app", submitOp: api.MethodRevokeApp, submitLabel: "Revoke",
		fields: []FormField{pAppID, fReason},
		submit: func(d *Driver, ctx context.Context, v fieldValues) (*SubmitResult, error) {
			var res api.RevokeAppResult
			if err := d.call(ctx, api.MethodRevokeApp, &api.RevokeAppParams{AppID: v.str("app_id"), Reason: v.str("reason")}, &res); err != nil {
				return nil, err
			}
			msg := fmt.Sprintf("%s was not revoked", v.str("app_id"))
			if res.Revoked {
				msg = fmt.Sprintf("revoked %s; %d subscriptions ended", v.str("app_id"), res.TerminatedSubscriptions)
			}
			return &SubmitResult{Message: msg, Data: &res}, nil
		},
		fresh: freshSelf,
	}
	allowForm = formDef{
		id: "allow", title: "Allow a revoked app again", submitOp: api.MethodAppsAllow, submitLabel: "Allow",
		fields: []FormField{pAppID},
		submit: func(d *Driver, ctx context.Context, v fieldValues) (*SubmitResult, error) {
			var res api.AppsAllowResult
			if err := d.call(ctx, api.MethodAppsAllow, &api.AppsAllowParams{AppID: v.str("app_id")}, &res); err != nil {
				return nil, err
			}
			msg := fmt.Sprintf("%s was not revoked; nothing to allow", v.str("app_id"))
			if res.WasRevoked {
				msg = fmt.Sprintf("allowed %s again", v.str("app_id"))
			}
			return &SubmitResult{Message: msg, Data: &res}, nil
		},
		fresh: freshSelf,
	}
)

// decide submits confirm.approve or confirm.deny.
func decide(method, verb string) func(d *Driver, ctx context.Context, v fieldValues) (*SubmitResult, error) {
	return func(d *Driver, ctx context.Context, v fieldValues) (*SubmitResult, error) {
		var res api.ConfirmDecisionResult
		p := &api.ConfirmDecisionParams{ConfirmationID: v.str("confirmation_id"), Reason: v.str("reason")}
		if err := d.call(ctx, method, p, &res); err != nil {
			return nil, err
		}
		return &SubmitResult{
			Message: fmt.Sprintf("%s %s (%s)", verb, res.Confirmation.ConfirmationID, res.Confirmation.CapabilityID),
			Data:    &res,
		}, nil
	}
}

// confirmKey is the invoke form's tick box for a capability whose trust
// level is confirm. Manifest parameter names cannot hold a dot, so it
// never shadows a parameter.
const confirmKey = "pcp.confirm"

// capabilityForm is the form that invokes c: one field per manifest
// parameter, and the confirm tick box when c asks for confirmation.
func capabilityForm(c *api.Capability) formDef {
	var fields []FormField
	for _, p := range c.Parameters {
		f := FormField{Key: p.Name, Label: p.Name, Required: p.IsRequired(), Help: p.Description}
		switch p.Type {
		case api.TypeString, api.TypeInteger, api.TypeNumber, api.TypeBoolean:
			f.Type = p.Type
		default: // object, array, any
			f.Type, f.jsonKind = FieldJSON, p.Type
			if f.Help == "" {
				f.Help = "JSON (" + p.Type + ")."
			} else {
				f.Help += " JSON (" + p.Type + ")."
			}
		}
		fields = append(fields, f)
	}
	if c.TrustLevel == api.TrustConfirm {
		what := c.ConfirmationType
		if what == "" {
			what = "run"
		}
		fields = append(fields, FormField{Key: confirmKey, Label: "Confirm", Type: FieldBoolean, Required: true,
			Help: fmt.Sprintf("%s asks for confirmation (%s); set to true to go ahead.", c.ID, what)})
	}
	id := c.ID
	appID := c.AppID
	return formDef{
		id: id, title: "Invoke " + id, submitOp: api.MethodInvokeCapability, submitLabel: "Invoke", fields: fields,
		submit: func(d *Driver, ctx context.Context, v fieldValues) (*SubmitResult, error) {
			if v.has(confirmKey) && v[confirmKey] != true {
				return rejected(map[string]string{confirmKey: "must be true: " + id + " asks for confirmation"}), nil
			}
			params := map[string]any{}
			for k, x := range v {
				if k != confirmKey {
					params[k] = x
				}
			}
			raw, err := marshal(params)
			if err != nil {
				return nil, err
			}
			// The user invokes for themselves (spec 001's admin): the form
			// and its confirm tick box are their decision.
			p := &api.InvokeCapabilityParams{CapabilityID: id, AppID: appID, Source: api.SourceSystemIntelligence,
				Params: raw, Admin: true}
			var res api.CapabilityResult
			if err := d.call(ctx, api.MethodInvokeCapability, p, &res); err != nil {
				return nil, err
			}
			return &SubmitResult{Message: fmt.Sprintf("%s: %s", id, res.Status), Data: &res}, nil
		},
	}
}

// invokeForm finds the invoke view's form: its id is the capability's.
func invokeForm(d *Driver, ctx context.Context, id string) (*formDef, error) {
	if id == "" {
		return nil, fmt.Errorf(`the invoke view's form is the capability: name it as "form" (e.g. "org.pcp.notes.create")`)
	}
	c, err := d.capability(ctx, id)
	if err != nil {
		return nil, err
	}
	f := capabilityForm(c)
	return &f, nil
}

func (d *Driver) submitOp(ctx context.Context, r *Request) (any, error) {
	v := findView(r.View)
	if v == nil {
		return nil, fmt.Errorf("submit: unknown view %s (known: %s)", quote(r.View), strings.Join(viewIDs(), ", "))
	}
	where := "submit " + v.id
	var f *formDef
	switch {
	case v.dynamicForm != nil:
		var err error
		if f, err = v.dynamicForm(d, ctx, r.Form); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	case len(v.forms) == 0:
		return nil, fmt.Errorf("%s: the view has no forms", where)
	case r.Form == "":
		f = &v.forms[0]
	default:
		for i := range v.forms {
			if v.forms[i].id == r.Form {
				f = &v.forms[i]
			}
		}
		if f == nil {
			var ids []string
			for _, x := range v.forms {
				ids = append(ids, x.id)
			}
			return nil, fmt.Errorf("%s: no form %s (forms: %s)", where, quote(r.Form), strings.Join(ids, ", "))
		}
	}
	where += "/" + f.id

	vals, errs := checkValues(f.fields, r.Values, true)
	if errs != nil {
		return rejected(errs), nil
	}
	res, err := f.submit(d, ctx, vals)
	if err != nil {
		// A parameter the daemon (or the app) refused is the user's to
		// fix in the form; anything else fails the submit.
		if key := fieldOf(pcpError(err), f); key != "" {
			msg := strings.TrimPrefix(pcpMessage(pcpError(err)), pcpField(pcpError(err))+": ")
			return rejected(map[string]string{key: msg}), nil
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if len(res.Errors) == 0 {
		switch f.fresh {
		case "":
		case freshSelf:
			params := map[string]json.RawMessage{}
			if vals.has("app_id") {
				params["app_id"], _ = marshal(vals.str("app_id"))
			}
			res.View = d.resolveView(ctx, v, params)
		default:
			res.View = d.resolveView(ctx, findView(f.fresh), mergeParams(f.freshParams, nil))
		}
	}
	return res, nil
}

// rejected is the SubmitResult of a form that did not pass.
func rejected(errs map[string]string) *SubmitResult {
	msg := "1 field needs attention"
	if len(errs) != 1 {
		msg = fmt.Sprintf("%d fields need attention", len(errs))
	}
	return &SubmitResult{Message: msg, Errors: errs}
}

// fieldOf maps an INVALID_PARAMS error's field to the form's key: the
// field itself ("job_id"), or for an invocation a capability parameter
// ("params.title"); "" when it names none of the form's fields.
func fieldOf(pe *api.Error, f *formDef) string {
	if pe == nil || pe.Code != api.CodeInvalidParams {
		return ""
	}
	name := pcpField(pe)
	if f.submitOp == api.MethodInvokeCapability {
		var ok bool
		if name, ok = strings.CutPrefix(name, "params."); !ok {
			return ""
		}
	}
	for _, x := range f.fields {
		if x.Key == name {
			return name
		}
	}
	return ""
}

// pcpField is the field an error's data names.
func pcpField(pe *api.Error) string {
	field, _ := pe.DataMap()["field"].(string)
	return field
}

// pcpMessage is a daemon error as a form shows it: the message alone, the
// catalogue's default when it has none.
func pcpMessage(pe *api.Error) string {
	if pe.Message != "" {
		return pe.Message
	}
	info, _ := pe.Code.Info()
	return info.Message
}
