package e2e

import (
	"database/sql"
	"encoding/binary"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	_ "modernc.org/sqlite" // registers the "sqlite" driver, to delete index rows as a tamperer would

	"github.com/pcp-dev/pcp/api"
)

// TestAuditCheckpointTruncation keeps a checkpoint, lets the log grow
// (which verifies against it), then stops pcpd, deletes the newest
// records from the log's file and their rows from the index, and starts
// pcpd again: the chain alone still verifies, and pcpctl audit verify
// --checkpoint names the entries removed, through pcpd and offline.
func TestAuditCheckpointTruncation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPCPD()
	w.startNotes()
	for range 3 {
		var c created
		w.invoke(&c, "create", "title=kept", "body=b")
	}
	cp := w.mustPCPCTL("audit", "checkpoint").stdout
	file := filepath.Join(w.dir, "checkpoint.txt")
	if err := os.WriteFile(file, []byte(cp), 0o600); err != nil {
		t.Fatal(err)
	}
	var kept api.AuditCheckpointResult
	w.pcpctlJSON(&kept, "audit", "checkpoint")
	for range 2 {
		var c created
		w.invoke(&c, "create", "title=later", "body=b")
	}
	honest := w.mustPCPCTL("audit", "verify", "--checkpoint", file)
	if !strings.HasPrefix(honest.stdout, "audit log extends the checkpoint: ") {
		t.Fatalf("the honest log against the checkpoint: %v", honest)
	}
	var p api.AuditProveResult
	w.pcpctlJSON(&p, "audit", "prove", "2")
	if p.LeafIndex != 1 || p.TreeSize < kept.Size {
		t.Errorf("audit prove 2 = %+v", p)
	}

	if err := w.stop(w.notes, syscall.SIGTERM); err != nil {
		t.Errorf("notes: %v", err)
	}
	if err := w.stop(w.pcpd, syscall.SIGTERM); err != nil {
		t.Errorf("pcpd: %v", err)
	}
	// Cut the log to two entries fewer than the checkpoint covers, and
	// the index with it.
	keep := int(kept.Size) - 2
	seg := filepath.Join(w.stateDir, "audit", "00000000000000000000.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	off := 16
	for range keep {
		off += 8 + int(binary.BigEndian.Uint32(b[off:]))
	}
	if err := os.WriteFile(seg, b[:off], 0o600); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(w.stateDir, "pcp.db")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", OmitHost: true, Path: dbPath, RawQuery: "_pragma=busy_timeout(5000)"}).String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM audit WHERE seq > ?`, keep); err != nil {
		db.Close()
		t.Fatal(err)
	}
	db.Close()

	w.startPCPD()
	if v := w.auditVerify(); v.Entries < int64(keep) {
		t.Fatalf("audit verify after truncating: %+v", v)
	}
	// pcpd's own start may have appended an entry since: the log is
	// shorter than the checkpoint by one or two.
	want := "but the checkpoint was signed over " + strconv.Itoa(int(kept.Size)) + ": entr"
	for _, args := range [][]string{{"audit", "verify", "--checkpoint", file}, {"audit", "verify", "--db", dbPath, "--checkpoint", file}} {
		r := w.pcpctl(args...)
		if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "removed") {
			t.Errorf("%v after truncating: %v; want a failure naming the entries removed", args, r)
		}
	}
}
