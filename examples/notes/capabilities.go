package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/sdk"
)

// AppID is the app id the notes app registers as. manifest.json says the
// same.
const AppID = "org.pcp.notes"

// handlers serves the notes capabilities from a Store. The daemon checks
// invocation parameters against the manifest before they get here; the
// handlers check them again, because a manifest and its code can drift
// and because the store's rules (lengths, non-empty title) are not
// expressible in a manifest.
type handlers struct{ store *Store }

// capabilities maps each capability name of manifest.json to its handler.
func capabilities(s *Store) map[string]sdk.CapabilityFunc {
	h := &handlers{store: s}
	return map[string]sdk.CapabilityFunc{
		"create": h.create,
		"delete": h.delete,
		"list":   h.list,
		"read":   h.read,
		"search": h.search,
		"update": h.update,
	}
}

// accepts lists the parameters each capability takes, in manifest.json's
// order. A test keeps it and the manifest in step.
var accepts = map[string][]string{
	"create": {"title", "body", "tags"},
	"delete": {"id"},
	"list":   {"tag", "limit"},
	"read":   {"id"},
	"search": {"query", "limit"},
	"update": {"id", "title", "body", "tags"},
}

// validators check each capability's parameters as its handler does,
// with the store's rules for the values, but without the database: an
// unknown note id passes here and fails at the invocation.
var validators = map[string]func(params json.RawMessage) error{
	"create": func(params json.RawMessage) error {
		r, err := parseCreate(params)
		if err != nil {
			return err
		}
		return storeError(checkNote(&r.title, &r.body, &r.tags))
	},
	"delete": func(params json.RawMessage) error { _, err := parseID("delete", params); return err },
	"list":   func(params json.RawMessage) error { _, err := parseList(params); return err },
	"read":   func(params json.RawMessage) error { _, err := parseID("read", params); return err },
	"search": func(params json.RawMessage) error {
		r, err := parseSearch(params)
		if err != nil {
			return err
		}
		return storeError(checkQuery(r.query))
	},
	"update": func(params json.RawMessage) error {
		r, err := parseUpdate(params)
		if err != nil {
			return err
		}
		if r.patch.Title == nil && r.patch.Body == nil && r.patch.Tags == nil {
			return storeError(errNothingToUpdate())
		}
		return storeError(checkNote(r.patch.Title, r.patch.Body, r.patch.Tags))
	},
}

// validate answers the daemon's ValidateParams for capability name.
func validate(ctx context.Context, name string, params json.RawMessage) error {
	if v := validators[name]; v != nil {
		return v(params)
	}
	return nil
}

// state reports the app's dynamic state: how many notes the store at db
// holds, and where it is.
func state(s *Store, db string) func(ctx context.Context) (map[string]any, error) {
	return func(ctx context.Context) (map[string]any, error) {
		n, err := s.Count(ctx)
		if err != nil {
			return nil, storeError(err)
		}
		return map[string]any{"notes": n, "db": db}, nil
	}
}

// CreateResult is the data of create.
type CreateResult struct {
	ID        int64     `json:"id"`
	CreatedAt time.Time `json:"created_at"`
}

// NotesResult is the data of list and search.
type NotesResult struct {
	Notes []Summary `json:"notes"`
}

// DeleteResult is the data of delete.
type DeleteResult struct {
	Deleted bool  `json:"deleted"`
	ID      int64 `json:"id"`
}

type createArgs struct {
	title, body string
	tags        []string
}

func parseCreate(params json.RawMessage) (*createArgs, error) {
	a, err := parseArgs(params, accepts["create"]...)
	if err != nil {
		return nil, err
	}
	var r createArgs
	if r.title, _, err = a.str("title", true); err != nil {
		return nil, err
	}
	if r.body, _, err = a.str("body", true); err != nil {
		return nil, err
	}
	if r.tags, _, err = a.strs("tags"); err != nil {
		return nil, err
	}
	return &r, nil
}

func (h *handlers) create(ctx context.Context, params json.RawMessage) (any, error) {
	r, err := parseCreate(params)
	if err != nil {
		return nil, err
	}
	n, err := h.store.Create(ctx, r.title, r.body, r.tags)
	if err != nil {
		return nil, storeError(err)
	}
	return &CreateResult{ID: n.ID, CreatedAt: n.CreatedAt}, nil
}

type listArgs struct {
	tag   string
	limit int
}

func parseList(params json.RawMessage) (*listArgs, error) {
	a, err := parseArgs(params, accepts["list"]...)
	if err != nil {
		return nil, err
	}
	var r listArgs
	if r.tag, _, err = a.str("tag", false); err != nil {
		return nil, err
	}
	if r.limit, err = a.limit(); err != nil {
		return nil, err
	}
	r.tag = strings.TrimSpace(r.tag)
	return &r, nil
}

func (h *handlers) list(ctx context.Context, params json.RawMessage) (any, error) {
	r, err := parseList(params)
	if err != nil {
		return nil, err
	}
	notes, err := h.store.List(ctx, r.tag, r.limit)
	if err != nil {
		return nil, storeError(err)
	}
	return &NotesResult{Notes: notes}, nil
}

type searchArgs struct {
	query string
	limit int
}

func parseSearch(params json.RawMessage) (*searchArgs, error) {
	a, err := parseArgs(params, accepts["search"]...)
	if err != nil {
		return nil, err
	}
	var r searchArgs
	if r.query, _, err = a.str("query", true); err != nil {
		return nil, err
	}
	if r.limit, err = a.limit(); err != nil {
		return nil, err
	}
	return &r, nil
}

func (h *handlers) search(ctx context.Context, params json.RawMessage) (any, error) {
	r, err := parseSearch(params)
	if err != nil {
		return nil, err
	}
	notes, err := h.store.Search(ctx, r.query, r.limit)
	if err != nil {
		return nil, storeError(err)
	}
	return &NotesResult{Notes: notes}, nil
}

// parseID parses the parameters of capability name, which takes the note
// id only.
func parseID(name string, params json.RawMessage) (int64, error) {
	a, err := parseArgs(params, accepts[name]...)
	if err != nil {
		return 0, err
	}
	return a.id()
}

func (h *handlers) read(ctx context.Context, params json.RawMessage) (any, error) {
	id, err := parseID("read", params)
	if err != nil {
		return nil, err
	}
	n, err := h.store.Get(ctx, id)
	if err != nil {
		return nil, storeError(err)
	}
	return n, nil
}

type updateArgs struct {
	id    int64
	patch Patch
}

func parseUpdate(params json.RawMessage) (*updateArgs, error) {
	a, err := parseArgs(params, accepts["update"]...)
	if err != nil {
		return nil, err
	}
	var r updateArgs
	if r.id, err = a.id(); err != nil {
		return nil, err
	}
	if title, ok, err := a.str("title", false); err != nil {
		return nil, err
	} else if ok {
		r.patch.Title = &title
	}
	if body, ok, err := a.str("body", false); err != nil {
		return nil, err
	} else if ok {
		r.patch.Body = &body
	}
	if tags, ok, err := a.strs("tags"); err != nil {
		return nil, err
	} else if ok {
		r.patch.Tags = &tags
	}
	return &r, nil
}

func (h *handlers) update(ctx context.Context, params json.RawMessage) (any, error) {
	r, err := parseUpdate(params)
	if err != nil {
		return nil, err
	}
	n, err := h.store.Update(ctx, r.id, r.patch)
	if err != nil {
		return nil, storeError(err)
	}
	return n, nil
}

func (h *handlers) delete(ctx context.Context, params json.RawMessage) (any, error) {
	id, err := parseID("delete", params)
	if err != nil {
		return nil, err
	}
	if err := h.store.Delete(ctx, id); err != nil {
		return nil, storeError(err)
	}
	return &DeleteResult{Deleted: true, ID: id}, nil
}

// storeError turns a Store error into the PCP error the agent sees; nil
// stays nil.
func storeError(err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	var nf *NotFoundError
	switch {
	case errors.As(err, &fe):
		if fe.Field == "" {
			return api.InvalidParam("params", "%s", fe.Msg)
		}
		return api.InvalidParam("params."+fe.Field, "%s", fe.Msg)
	case errors.As(err, &nf):
		return api.Errorf(api.CodeInvalidParams, map[string]any{"field": "params.id", "id": nf.ID}, "no note %d", nf.ID)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return api.Errorf(api.CodeInternalError, nil, "notes: %v", err)
}

// args are an invocation's parameters, checked against the names a
// capability accepts.
type args map[string]json.RawMessage

// parseArgs decodes params, which must be a JSON object (or absent), and
// rejects members not in allowed.
func parseArgs(params json.RawMessage, allowed ...string) (args, error) {
	a := args{}
	switch kindOf(params) {
	case "", "null":
		return a, nil
	case "object":
	default:
		return nil, api.InvalidParam("params", "expected object, got %s", kindOf(params))
	}
	if err := json.Unmarshal(params, &a); err != nil {
		return nil, api.InvalidParam("params", "%v", err)
	}
	var unknown []string
	for name := range a {
		if !slices.Contains(allowed, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, api.InvalidParam("params."+unknown[0], "unknown parameter (accepted: %s)", strings.Join(allowed, ", "))
	}
	return a, nil
}

// str returns the string parameter name; ok is false when it is absent.
func (a args) str(name string, required bool) (s string, ok bool, err error) {
	raw, ok := a[name]
	if !ok {
		if required {
			return "", false, api.MissingParam("params." + name)
		}
		return "", false, nil
	}
	if k := kindOf(raw); k != "string" {
		return "", false, api.InvalidParam("params."+name, "expected string, got %s", k)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, api.InvalidParam("params."+name, "%v", err)
	}
	return s, true, nil
}

// strs returns the optional array-of-strings parameter name.
func (a args) strs(name string) (ss []string, ok bool, err error) {
	raw, ok := a[name]
	if !ok {
		return nil, false, nil
	}
	if k := kindOf(raw); k != "array" {
		return nil, false, api.InvalidParam("params."+name, "expected array of strings, got %s", k)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, false, api.InvalidParam("params."+name, "%v", err)
	}
	ss = make([]string, len(items))
	for i, item := range items {
		if k := kindOf(item); k != "string" {
			return nil, false, api.InvalidParam("params."+name, "item %d: expected string, got %s", i, k)
		}
		if err := json.Unmarshal(item, &ss[i]); err != nil {
			return nil, false, api.InvalidParam("params."+name, "item %d: %v", i, err)
		}
	}
	return ss, true, nil
}

// integer returns the integer parameter name. Like the daemon's check, it
// accepts any whole number within int64, so 2 and 2.0 are both 2.
func (a args) integer(name string, required bool) (n int64, ok bool, err error) {
	raw, ok := a[name]
	if !ok {
		if required {
			return 0, false, api.MissingParam("params." + name)
		}
		return 0, false, nil
	}
	if k := kindOf(raw); k != "number" {
		return 0, false, api.InvalidParam("params."+name, "expected integer, got %s", k)
	}
	s := strings.TrimSpace(string(raw))
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	// ±2^63 are exact in float64; int64 holds [-2^63, 2^63).
	if err != nil || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false, api.InvalidParam("params."+name, "expected integer, got %s", s)
	}
	return int64(f), true, nil
}

// id returns the required note id parameter.
func (a args) id() (int64, error) {
	id, _, err := a.integer("id", true)
	if err != nil {
		return 0, err
	}
	if id < 1 {
		return 0, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "params.id", "id": id}, "no note %d: ids start at 1", id)
	}
	return id, nil
}

// limit returns the optional limit parameter, DefaultLimit when absent.
func (a args) limit() (int, error) {
	n, ok, err := a.integer("limit", false)
	if err != nil {
		return 0, err
	}
	if !ok {
		return DefaultLimit, nil
	}
	if n < 1 || n > MaxLimit {
		return 0, api.InvalidParam("params.limit", "must be between 1 and %d, got %d", MaxLimit, n)
	}
	return int(n), nil
}

// kindOf names the JSON type of raw by its first byte: "object", "array",
// "string", "number", "boolean", "null", or "" for nothing.
func kindOf(raw json.RawMessage) string {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	if s == "" {
		return ""
	}
	switch s[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
