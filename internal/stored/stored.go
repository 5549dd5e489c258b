// Package stored holds the durable records the broker keeps and the store
// persists: registered apps, revocations and deferred jobs. It is a leaf
// (standard library only) so that internal/core can name these records
// without importing internal/store and, through it, SQLite; the store
// imports it to read and write them. It is not in internal/core because
// the core's own tests run against the real store, which would then be an
// import cycle.
package stored

import (
	"encoding/json"
	"time"
)

// App is a registered app as persisted.
type App struct {
	AppID string
	// Manifest is the manifest as registered (JSON).
	Manifest  json.RawMessage
	Publisher string
	Signed    bool
	// UpdatedAt is when the record was last saved; the store sets a zero
	// value to the current time.
	UpdatedAt time.Time
}

// Revocation records that an app may not register or be invoked.
type Revocation struct {
	AppID     string
	Reason    string
	RevokedAt time.Time
}

// Job is a deferred invocation as stored.
type Job struct {
	ID, CapabilityID, AppID, Source, Actor string
	// Params is the invocation's parameters (JSON); nil is stored as NULL.
	Params json.RawMessage
	// State is "queued", "running", "done", "failed", "undone" or
	// "cancelled" (api.JobQueued and its siblings); the store rejects any
	// other value.
	State string
	// RunAt is when the job's undo window closes and it may run.
	RunAt time.Time
	// CreatedAt is when the job was first saved; the store sets a zero
	// value to the current time, and an update keeps the stored one.
	CreatedAt time.Time
	// UpdatedAt is when the job was last saved; the store sets a zero
	// value to the current time.
	UpdatedAt time.Time
	// Result is the CapabilityResult JSON once the job is done.
	Result json.RawMessage
	// Error is the api.Error JSON once the job has failed.
	Error json.RawMessage
	// Reason says, in free text, why the job was undone, cancelled or
	// failed.
	Reason string
}
