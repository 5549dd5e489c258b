package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pcp-dev/pcp/internal/stored"
)

var errNoAppID = errors.New("store: empty app id")

// SaveApp inserts or replaces the app's record and returns once that is
// committed.
func (s *Store) SaveApp(ctx context.Context, a stored.App) error {
	if a.AppID == "" {
		return errNoAppID
	}
	if !json.Valid(a.Manifest) {
		return fmt.Errorf("store: app %s: manifest is not valid JSON", a.AppID)
	}
	if a.UpdatedAt.IsZero() {
		a.UpdatedAt = time.Now()
	}
	err := s.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO apps (app_id, manifest, publisher, signed, updated_at)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (app_id) DO UPDATE SET manifest = excluded.manifest,
				publisher = excluded.publisher, signed = excluded.signed, updated_at = excluded.updated_at`,
			a.AppID, string(a.Manifest), a.Publisher, a.Signed, formatTime(a.UpdatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: saving app %s: %w", a.AppID, err)
	}
	return nil
}

// DeleteApp removes the app's record, if any. Its revocation, if any,
// stays.
func (s *Store) DeleteApp(ctx context.Context, appID string) error {
	err := s.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM apps WHERE app_id = ?`, appID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: deleting app %s: %w", appID, err)
	}
	return nil
}

// LoadApps returns every saved app, ordered by app id.
func (s *Store) LoadApps(ctx context.Context) ([]stored.App, error) {
	rows, err := s.rdb.QueryContext(ctx,
		`SELECT app_id, manifest, publisher, signed, updated_at FROM apps ORDER BY app_id`)
	if err != nil {
		return nil, fmt.Errorf("store: loading apps: %w", err)
	}
	defer rows.Close()
	var out []stored.App
	for rows.Next() {
		var a stored.App
		var manifest, updated string
		if err := rows.Scan(&a.AppID, &manifest, &a.Publisher, &a.Signed, &updated); err != nil {
			return nil, fmt.Errorf("store: loading apps: %w", err)
		}
		a.Manifest = json.RawMessage(manifest)
		if a.UpdatedAt, err = parseTime("apps.updated_at", updated); err != nil {
			return nil, fmt.Errorf("store: loading app %s: %w", a.AppID, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: loading apps: %w", err)
	}
	return out, nil
}

// Revoke records that appID is revoked, replacing the reason and time of
// an earlier revocation. A zero at means now.
func (s *Store) Revoke(ctx context.Context, appID, reason string, at time.Time) error {
	if appID == "" {
		return errNoAppID
	}
	if at.IsZero() {
		at = time.Now()
	}
	err := s.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO revocations (app_id, reason, revoked_at) VALUES (?, ?, ?)
			ON CONFLICT (app_id) DO UPDATE SET reason = excluded.reason, revoked_at = excluded.revoked_at`,
			appID, reason, formatTime(at))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: revoking app %s: %w", appID, err)
	}
	return nil
}

// Allow lifts appID's revocation and reports whether there was one.
func (s *Store) Allow(ctx context.Context, appID string) (wasRevoked bool, err error) {
	var n int64
	err = s.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM revocations WHERE app_id = ?`, appID)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store: allowing app %s: %w", appID, err)
	}
	return n > 0, nil
}

// Revocations returns every revocation, ordered by app id.
func (s *Store) Revocations(ctx context.Context) ([]stored.Revocation, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT app_id, reason, revoked_at FROM revocations ORDER BY app_id`)
	if err != nil {
		return nil, fmt.Errorf("store: loading revocations: %w", err)
	}
	defer rows.Close()
	var out []stored.Revocation
	for rows.Next() {
		var r stored.Revocation
		var at string
		if err := rows.Scan(&r.AppID, &r.Reason, &at); err != nil {
			return nil, fmt.Errorf("store: loading revocations: %w", err)
		}
		if r.RevokedAt, err = parseTime("revocations.revoked_at", at); err != nil {
			return nil, fmt.Errorf("store: loading revocation of %s: %w", r.AppID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: loading revocations: %w", err)
	}
	return out, nil
}
