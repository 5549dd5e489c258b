package core

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The core names its persistence through small interfaces (AppStore,
// AuditLog, Journal, JobStore) and the records of internal/stored, so its
// dependencies hold neither the store nor SQLite. A face or an adapter
// that imports the core must not inherit a database driver.
func TestCoreDependsOnNoStore(t *testing.T) {
	// go test puts its own go first on PATH.
	out, err := exec.Command("go", "list", "-deps", "github.com/pcp-dev/pcp/internal/core").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/pcp-dev/pcp/internal/stored") {
		t.Fatalf("go list -deps did not list internal/stored, which the core imports: %v", deps)
	}
	for _, d := range deps {
		if strings.Contains(strings.ToLower(d), "sqlite") || d == "github.com/pcp-dev/pcp/internal/store" || d == "database/sql" {
			t.Errorf("internal/core depends on %s", d)
		}
	}
}
