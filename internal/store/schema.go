package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations[i] takes the schema from version i to i+1; PRAGMA
// user_version holds the version. Append new steps; never edit old ones.
var migrations = []string{
	// 1: initial schema. Timestamps are TEXT in audit.TimeFormat.
	`
CREATE TABLE apps (
	app_id     TEXT PRIMARY KEY,
	manifest   TEXT NOT NULL,
	publisher  TEXT NOT NULL DEFAULT '',
	signed     INTEGER NOT NULL DEFAULT 0 CHECK (signed IN (0, 1)),
	updated_at TEXT NOT NULL
) STRICT;

CREATE TABLE revocations (
	app_id     TEXT PRIMARY KEY,
	reason     TEXT NOT NULL DEFAULT '',
	revoked_at TEXT NOT NULL
) STRICT;

CREATE TABLE events (
	seq        INTEGER PRIMARY KEY,
	type       TEXT NOT NULL,
	timestamp  INTEGER NOT NULL,
	app_id     TEXT NOT NULL DEFAULT '',
	surface_id TEXT NOT NULL DEFAULT '',
	data       TEXT
) STRICT;

CREATE TABLE audit (
	seq           INTEGER PRIMARY KEY,
	time          TEXT NOT NULL,
	kind          TEXT NOT NULL,
	source        TEXT NOT NULL DEFAULT '',
	actor         TEXT NOT NULL DEFAULT '',
	app_id        TEXT NOT NULL DEFAULT '',
	capability_id TEXT NOT NULL DEFAULT '',
	params_digest TEXT NOT NULL DEFAULT '',
	outcome       TEXT NOT NULL DEFAULT '',
	duration_us   INTEGER NOT NULL DEFAULT 0,
	detail        TEXT,
	prev_hash     TEXT NOT NULL,
	hash          TEXT NOT NULL
) STRICT;
`,
	// 2: deferred jobs (see jobs.go). params, result and error hold JSON
	// or NULL; timestamps use the same layout as version 1.
	`
CREATE TABLE jobs (
	id            TEXT PRIMARY KEY,
	capability_id TEXT NOT NULL,
	app_id        TEXT NOT NULL,
	source        TEXT NOT NULL,
	actor         TEXT NOT NULL,
	params        TEXT,
	state         TEXT NOT NULL,
	run_at        TEXT NOT NULL,
	created_at    TEXT NOT NULL,
	updated_at    TEXT NOT NULL,
	result        TEXT,
	error         TEXT,
	reason        TEXT NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX jobs_state ON jobs (state);
`,
}

// schemaVersion is the schema version this build writes.
var schemaVersion = len(migrations)

// migrate brings db to schemaVersion, one transaction per step. Each step
// re-reads the version inside its (immediate) transaction, so two
// processes opening a new file at once do not both apply it.
func migrate(ctx context.Context, db *sql.DB) error {
	for {
		done, err := migrateStep(ctx, db)
		if err != nil || done {
			return err
		}
	}
}

func migrateStep(ctx context.Context, db *sql.DB) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrating schema: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return false, fmt.Errorf("reading schema version: %w", err)
	}
	switch {
	case v == schemaVersion:
		return true, nil
	case v > schemaVersion:
		return false, fmt.Errorf("schema version %d is newer than this build's %d", v, schemaVersion)
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, err)
	}
	return false, nil
}
