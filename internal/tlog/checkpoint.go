package tlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Checkpoint is a C2SP tlog-checkpoint: the log's origin, a tree size and
// the root hash of the tree of that size.
type Checkpoint struct {
	Origin string
	Size   uint64
	Root   [HashSize]byte
}

// Body is the checkpoint's note text: origin, size and base64 root, each
// on its own line.
func (c Checkpoint) Body() string {
	return fmt.Sprintf("%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// ParseCheckpoint reads a checkpoint's note text. Extension lines after
// the root are allowed and ignored, as C2SP tlog-checkpoint says.
func ParseCheckpoint(text string) (Checkpoint, error) {
	lines := strings.SplitAfter(text, "\n")
	if len(lines) < 4 || !strings.HasSuffix(lines[2], "\n") {
		return Checkpoint{}, errors.New("a checkpoint has an origin, a size and a root hash, each on its own line")
	}
	var c Checkpoint
	c.Origin = strings.TrimSuffix(lines[0], "\n")
	if c.Origin == "" {
		return Checkpoint{}, errors.New("the checkpoint's origin line is empty")
	}
	sz := strings.TrimSuffix(lines[1], "\n")
	n, err := strconv.ParseUint(sz, 10, 64)
	if err != nil || (len(sz) > 1 && sz[0] == '0') {
		return Checkpoint{}, fmt.Errorf("the checkpoint's size %q is not a decimal number", sz)
	}
	c.Size = n
	root, err := base64.StdEncoding.Strict().DecodeString(strings.TrimSuffix(lines[2], "\n"))
	if err != nil || len(root) != HashSize {
		return Checkpoint{}, fmt.Errorf("the checkpoint's root hash %q is not %d bytes in base64", strings.TrimSuffix(lines[2], "\n"), HashSize)
	}
	copy(c.Root[:], root)
	return c, nil
}

// Key signs the log's checkpoints: an Ed25519 key whose note name is the
// log's origin.
type Key struct {
	signer   note.Signer
	verifier note.Verifier
	// VerifierKey is the public key in note verifier-key form
	// ("origin+hash+base64"), which anyone may hold to check checkpoints.
	VerifierKey string
}

// Origin is the log's origin line, the key's name.
func (k *Key) Origin() string { return k.signer.Name() }

// LoadOrCreateKey reads the signing key at path, creating it (mode 0600,
// origin "pcp.local/audit/" and 16 random hex digits) if there is none.
func LoadOrCreateKey(path string) (*Key, error) {
	_, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		var id [8]byte
		if _, err := rand.Read(id[:]); err != nil {
			return nil, fmt.Errorf("tlog: %w", err)
		}
		skey, _, err := note.GenerateKey(rand.Reader, "pcp.local/audit/"+hex.EncodeToString(id[:]))
		if err != nil {
			return nil, fmt.Errorf("tlog: generating the checkpoint key: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("tlog: %w", err)
		}
		if _, err := f.WriteString(skey + "\n"); err != nil {
			f.Close()
			os.Remove(path)
			return nil, fmt.Errorf("tlog: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("tlog: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("tlog: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	return ReadKey(path)
}

// ReadKey reads the signing key at path, which must not be readable by
// others.
func ReadKey(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("tlog: the checkpoint key %s is readable by others (mode %o); make it 0600", path, fi.Mode().Perm())
	}
	s, err := note.NewSigner(string(bytes.TrimSpace(b)))
	if err != nil {
		return nil, fmt.Errorf("tlog: the checkpoint key %s: %w", path, err)
	}
	vkey, err := verifierKey(string(bytes.TrimSpace(b)))
	if err != nil {
		return nil, fmt.Errorf("tlog: the checkpoint key %s: %w", path, err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("tlog: the checkpoint key %s: %w", path, err)
	}
	return &Key{signer: s, verifier: v, VerifierKey: vkey}, nil
}

// verifierKey derives the verifier key from a note signer key
// "PRIVATE+KEY+name+hash+base64(0x01 || seed)".
func verifierKey(skey string) (string, error) {
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 || parts[0] != "PRIVATE" || parts[1] != "KEY" {
		return "", errors.New("not a note signer key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 33 || raw[0] != 1 {
		return "", errors.New("not an Ed25519 note signer key")
	}
	return note.NewEd25519VerifierKey(parts[2], ed25519Public(raw[1:]))
}

// Sign returns the signed note of c.
func (k *Key) Sign(c Checkpoint) (string, error) {
	b, err := note.Sign(&note.Note{Text: c.Body()}, k.signer)
	if err != nil {
		return "", fmt.Errorf("tlog: signing the checkpoint: %w", err)
	}
	return string(b), nil
}

// OpenCheckpoint checks the signed checkpoint text against the verifier
// key vkey and parses it.
func OpenCheckpoint(text, vkey string) (Checkpoint, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("the verifier key: %w", err)
	}
	return openWith(text, v)
}

// Open checks a signed checkpoint against this key and parses it.
func (k *Key) Open(text string) (Checkpoint, error) { return openWith(text, k.verifier) }

func openWith(text string, v note.Verifier) (Checkpoint, error) {
	n, err := note.Open([]byte(text), note.VerifierList(v))
	if err != nil {
		var unknown *note.UnverifiedNoteError
		if errors.As(err, &unknown) {
			return Checkpoint{}, fmt.Errorf("the checkpoint is not signed by this log's key %s", v.Name())
		}
		return Checkpoint{}, fmt.Errorf("the checkpoint is not a signed note of this log: %w", err)
	}
	c, err := ParseCheckpoint(n.Text)
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != v.Name() {
		return Checkpoint{}, fmt.Errorf("the checkpoint's origin %q is not this log's %q", c.Origin, v.Name())
	}
	return c, nil
}

// ed25519Public returns the public key of an Ed25519 seed.
func ed25519Public(seed []byte) ed25519.PublicKey {
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
}
