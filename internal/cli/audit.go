package cli

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	merkleproof "github.com/transparency-dev/merkle/proof"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/tlog"
)

// hashPrefix is how many hex digits of an entry hash a table shows.
const hashPrefix = 12

func (e *env) auditCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read, verify and prove the audit log",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(e.auditTailCommand(), e.auditVerifyCommand(), e.auditCheckpointCommand(), e.auditProveCommand())
	return cmd
}

func (e *env) auditTailCommand() *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "tail [-n N]",
		Short: "Show the newest audit entries (audit.tail)",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().IntVarP(&n, "lines", "n", 20, "how many entries")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		if n < 0 {
			return usagef("-n must not be negative")
		}
		res, err := once(ctx, e, false, api.MethodAuditTail, func(ctx context.Context, cl *client.Client) (*api.AuditTailResult, error) {
			return cl.AuditTail(ctx, n)
		})
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		if len(res.Entries) == 0 {
			_, err := fmt.Fprintln(e.stdout, "no audit entries")
			return err
		}
		t := newTable(e.stdout, "SEQ", "TIME", "KIND", "ACTOR", "APP", "CAPABILITY", "OUTCOME", "DURATION", "HASH")
		t.fit("ACTOR", "APP")
		t.fitStart("CAPABILITY")
		for _, a := range res.Entries {
			h := a.Hash
			if len(h) > hashPrefix {
				h = h[:hashPrefix]
			}
			t.row(strconv.FormatInt(a.Seq, 10), auditTime(a.Time), a.Kind, orDash(a.Actor), orDash(a.AppID), orDash(a.CapabilityID),
				orDash(a.Outcome), (time.Duration(a.DurationUS) * time.Microsecond).String(), h)
		}
		return t.flush()
	})
	return cmd
}

func (e *env) auditVerifyCommand() *cobra.Command {
	var db, checkpoint string
	cmd := &cobra.Command{
		Use:   "verify [--db FILE] [--checkpoint FILE]",
		Short: "Verify the audit log's hash chain, or that it extends a checkpoint",
		Long: `Verify the audit log's hash chain. Without --db pcpd does it (audit.verify,
over the control socket) and also checks the log against the newest entry
it wrote, so removed trailing entries are caught. With --db the audit log
of that state database (the audit directory beside pcp.db in pcpd's state
directory) is checked offline, read-only; pcpd may be running.

With --checkpoint FILE, a checkpoint printed earlier by "pcpctl audit
checkpoint", it checks instead that the log still holds the tree that
checkpoint signed: pcpd (or, with --db, pcpctl itself) rereads the log and
returns a consistency proof from the checkpoint's tree to the log's, and
pcpctl checks that proof itself (RFC 9162). Removing or rewriting any
entry the checkpoint covers is caught and named, whatever the chain shows.

Exits non-zero, naming the first broken entry, when the chain is broken or
the log does not extend the checkpoint.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&db, "db", "", "verify the audit log of this state database file offline instead of asking pcpd")
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "", "prove that the log extends the signed checkpoint in this file")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		if checkpoint != "" {
			return e.verifyCheckpoint(ctx, db, checkpoint)
		}
		var (
			res *api.AuditVerifyResult
			err error
		)
		if db != "" {
			var r api.AuditVerifyResult
			r, err = store.VerifyFile(ctx, db)
			res = &r
		} else {
			res, err = once(ctx, e, true, api.MethodAuditVerify, func(ctx context.Context, cl *client.Client) (*api.AuditVerifyResult, error) {
				return cl.AuditVerify(ctx)
			})
		}
		if err != nil {
			return err
		}
		if e.json {
			if err := printJSON(e.stdout, res); err != nil {
				return err
			}
		} else if res.OK {
			if _, err := fmt.Fprintf(e.stdout, "audit chain intact: %d entries, head %s\n", res.Entries, orDash(res.Head)); err != nil {
				return err
			}
		}
		if !res.OK {
			return fmt.Errorf("audit chain broken at entry %d: %s", res.BrokenSeq, res.Problem)
		}
		return nil
	})
	return cmd
}

// verifyCheckpoint is audit verify --checkpoint: the consistency proof is
// asked of pcpd (or computed from the files with --db) and checked here.
func (e *env) verifyCheckpoint(ctx context.Context, db, file string) error {
	text, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading the checkpoint: %w", err)
	}
	old, err := tlog.ParseCheckpoint(checkpointBody(string(text)))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var res *api.AuditConsistencyResult
	if db != "" {
		var r api.AuditConsistencyResult
		r, err = store.VerifyCheckpointFile(ctx, db, string(text))
		res = &r
	} else {
		res, err = once(ctx, e, true, api.MethodAuditConsistency, func(ctx context.Context, cl *client.Client) (*api.AuditConsistencyResult, error) {
			return cl.AuditConsistency(ctx, string(text))
		})
	}
	if err != nil {
		return err
	}
	if res.OK {
		// Check the proof here rather than take the answer's word.
		if err := checkConsistency(string(text), old, res); err != nil {
			return err
		}
	}
	if e.json {
		if err := printJSON(e.stdout, res); err != nil {
			return err
		}
	} else if res.OK {
		if _, err := fmt.Fprintf(e.stdout, "audit log extends the checkpoint: %d entries then, %d now; consistency proof of %d hashes checked\n%s",
			res.OldSize, res.Size, len(res.Proof), res.Checkpoint.Checkpoint); err != nil {
			return err
		}
	}
	if !res.OK {
		if res.BrokenSeq > 0 {
			return fmt.Errorf("audit log does not extend the checkpoint (entry %d): %s", res.BrokenSeq, res.Problem)
		}
		return fmt.Errorf("audit log does not extend the checkpoint: %s", res.Problem)
	}
	return nil
}

// checkpointBody is the note text of a signed checkpoint: everything up
// to the blank line before the signatures.
func checkpointBody(text string) string {
	if i := strings.Index(text, "\n\n"); i >= 0 {
		return text[:i+1]
	}
	return text
}

// checkConsistency checks res's proof from the checkpoint old to the tree
// res's checkpoint signs, with transparency-dev/merkle's RFC 9162
// verifier.
func checkConsistency(text string, old tlog.Checkpoint, res *api.AuditConsistencyResult) error {
	if res.Checkpoint == nil {
		return errors.New("the answer holds no checkpoint of the log as it is now")
	}
	// Both checkpoints must be signed by one key.
	if _, err := tlog.OpenCheckpoint(text, res.Checkpoint.Key); err != nil {
		return fmt.Errorf("the checkpoint given: %w", err)
	}
	now, err := tlog.OpenCheckpoint(res.Checkpoint.Checkpoint, res.Checkpoint.Key)
	if err != nil {
		return fmt.Errorf("the log's checkpoint: %w", err)
	}
	if now.Origin != old.Origin {
		return fmt.Errorf("the log's origin is %q, the checkpoint's %q: not the same log", now.Origin, old.Origin)
	}
	proof, err := unhex(res.Proof)
	if err != nil {
		return err
	}
	if err := merkleproof.VerifyConsistency(tlog.Hasher, old.Size, now.Size, proof, old.Root[:], now.Root[:]); err != nil {
		return fmt.Errorf("the consistency proof from %d to %d entries does not verify: %w", old.Size, now.Size, err)
	}
	return nil
}

func unhex(hs []string) ([][]byte, error) {
	out := make([][]byte, len(hs))
	for i, h := range hs {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != tlog.HashSize {
			return nil, fmt.Errorf("proof hash %d (%q) is not %d bytes of hex", i, h, tlog.HashSize)
		}
		out[i] = b
	}
	return out, nil
}

func (e *env) auditCheckpointCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Print a signed checkpoint of the audit log (audit.checkpoint)",
		Long: `Print a signed checkpoint of the audit log: a C2SP tlog-checkpoint note
(origin, tree size, base64 RFC 6962 root hash) signed with the Ed25519 key
pcpd keeps in its state directory. Keep it somewhere pcpd cannot reach
(another machine, a paste); "pcpctl audit verify --checkpoint FILE" later
proves that the log still holds every entry it covers.`,
		Args: cobra.NoArgs,
	}
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		res, err := once(ctx, e, false, api.MethodAuditCheckpoint, func(ctx context.Context, cl *client.Client) (*api.AuditCheckpointResult, error) {
			return cl.AuditCheckpoint(ctx)
		})
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		_, err = fmt.Fprint(e.stdout, res.Checkpoint)
		return err
	})
	return cmd
}

func (e *env) auditProveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prove ENTRY",
		Short: "Print an inclusion proof of one audit entry (audit.prove)",
		Long: `Print an RFC 9162 inclusion proof that audit entry ENTRY (its seq) is in the
log's Merkle tree: its leaf index, its leaf hash (SHA-256 of 0x00 and the
entry's canonical form), the proof path in hex from the leaf up, and the
signed checkpoint of the tree it is against. pcpctl checks the proof
before printing it.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
		seq, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil || seq < 1 {
			return usagef("ENTRY must be an entry's seq, a positive integer, not %q", args[0])
		}
		res, err := once(ctx, e, false, api.MethodAuditProve, func(ctx context.Context, cl *client.Client) (*api.AuditProveResult, error) {
			return cl.AuditProve(ctx, seq)
		})
		if err != nil {
			return err
		}
		if err := checkInclusion(res); err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "entry:      %d\nleaf index: %d\nleaf hash:  %s\ntree size:  %d\nroot:       %s\nproof:      %d hashes\n",
			res.Entry.Seq, res.LeafIndex, res.LeafHash, res.TreeSize, res.Checkpoint.Root, len(res.Proof))
		for _, h := range res.Proof {
			fmt.Fprintf(&b, "  %s\n", h)
		}
		fmt.Fprintf(&b, "checkpoint:\n%s", res.Checkpoint.Checkpoint)
		_, err = fmt.Fprint(e.stdout, b.String())
		return err
	})
	return cmd
}

// checkInclusion checks an inclusion proof: the leaf hash is the entry's,
// the checkpoint is signed, and the path leads to its root.
func checkInclusion(res *api.AuditProveResult) error {
	c, err := audit.Canonical(res.Entry)
	if err != nil {
		return err
	}
	leaf := tlog.LeafHash(c)
	if hex.EncodeToString(leaf[:]) != res.LeafHash {
		return fmt.Errorf("the entry hashes to leaf %x, not the %s given", leaf, res.LeafHash)
	}
	cp, err := tlog.OpenCheckpoint(res.Checkpoint.Checkpoint, res.Checkpoint.Key)
	if err != nil {
		return fmt.Errorf("the proof's checkpoint: %w", err)
	}
	if cp.Size != res.TreeSize {
		return fmt.Errorf("the checkpoint is of %d entries, the proof of %d", cp.Size, res.TreeSize)
	}
	proof, err := unhex(res.Proof)
	if err != nil {
		return err
	}
	if err := merkleproof.VerifyInclusion(tlog.Hasher, res.LeafIndex, res.TreeSize, leaf[:], proof, cp.Root[:]); err != nil {
		return fmt.Errorf("the inclusion proof of entry %d does not verify: %w", res.Entry.Seq, err)
	}
	return nil
}

// auditTime shortens an audit entry's RFC 3339 time to milliseconds, in
// local time; a time that does not parse is shown as it is.
func auditTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.Local().Format("2006-01-02T15:04:05.000Z07:00")
}
