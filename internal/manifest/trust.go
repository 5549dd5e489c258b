package manifest

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pcp-dev/pcp/api"
)

// maxKeyFile bounds how much of a trust directory file is read; a PEM
// Ed25519 public key is 113 bytes.
const maxKeyFile = 64 << 10

// TrustStore holds the public keys of trusted publishers. It is immutable
// once loaded and safe for concurrent use. A nil *TrustStore is empty.
type TrustStore struct {
	keys []trustedKey // sorted by publisher
}

type trustedKey struct {
	publisher string
	key       ed25519.PublicKey
}

// NewTrustStore returns a store trusting keys, a map from publisher name
// to public key.
func NewTrustStore(keys map[string]ed25519.PublicKey) (*TrustStore, error) {
	t := &TrustStore{}
	for name, k := range keys {
		if name == "" {
			return nil, errors.New("manifest: trust store: empty publisher name")
		}
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("manifest: trust store: publisher %q: key is %d bytes, want %d", name, len(k), ed25519.PublicKeySize)
		}
		t.keys = append(t.keys, trustedKey{publisher: name, key: slices.Clone(k)})
	}
	slices.SortFunc(t.keys, func(a, b trustedKey) int { return strings.Compare(a.publisher, b.publisher) })
	return t, nil
}

// LoadTrustDir loads every *.pem and *.pub file in dir as a PEM "PUBLIC
// KEY" of the publisher the file is named after: the base name without
// its ".pem" and ".pub" extensions, so "acme.pem", "acme.pub" and
// "acme.pub.pem" all name publisher "acme". Other files and
// subdirectories are ignored.
//
// A file that cannot be read or parsed, or that names a publisher already
// loaded, is skipped and reported in errs; the rest still load. A missing
// dir is an empty store and no error.
func LoadTrustDir(dir string) (t *TrustStore, errs []error) {
	t = &TrustStore{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return t, nil
		}
		return t, []error{fmt.Errorf("manifest: trust dir: %w", err)}
	}
	seen := make(map[string]string)
	for _, e := range entries { // sorted by file name
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".pem") || strings.HasSuffix(name, ".pub")) {
			continue
		}
		path := filepath.Join(dir, name)
		publisher := PublisherName(name)
		if publisher == "" {
			errs = append(errs, fmt.Errorf("manifest: trust dir: %s: file name gives no publisher name", path))
			continue
		}
		if prev, dup := seen[publisher]; dup {
			errs = append(errs, fmt.Errorf("manifest: trust dir: %s: publisher %q already loaded from %s", path, publisher, prev))
			continue
		}
		key, err := readKeyFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("manifest: trust dir: %s: %w", path, err))
			continue
		}
		seen[publisher] = path
		t.keys = append(t.keys, trustedKey{publisher: publisher, key: key})
	}
	slices.SortFunc(t.keys, func(a, b trustedKey) int { return strings.Compare(a.publisher, b.publisher) })
	return t, errs
}

// PublisherName is the publisher a trust directory file name stands for.
func PublisherName(fileName string) string {
	base := filepath.Base(fileName)
	for _, ext := range []string{".pem", ".pub"} {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}

func readKeyFile(path string) (ed25519.PublicKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("larger than %d bytes", maxKeyFile)
	}
	return ParsePublicKey(b)
}

// Len is the number of trusted keys.
func (t *TrustStore) Len() int {
	if t == nil {
		return 0
	}
	return len(t.keys)
}

// Publishers lists the trusted publishers in sorted order.
func (t *TrustStore) Publishers() []string {
	if t == nil {
		return nil
	}
	names := make([]string, len(t.keys))
	for i, k := range t.keys {
		names[i] = k.publisher
	}
	return names
}

// Verify checks the "signature" of the manifest raw over
// SigningPayload(raw) against every trusted key and returns the publisher
// whose key verifies it; when several do, the first in sorted order.
//
// A missing, empty, non-hex or wrong-length signature, an empty store, or
// no matching key is a MANIFEST_SIGNATURE_INVALID error whose message says
// which, with Data {"app_id": appID}. A raw that is not an I-JSON object
// is MANIFEST_INVALID; call Parse first to get field-level errors.
func (t *TrustStore) Verify(appID string, raw json.RawMessage) (publisher string, err error) {
	obj, err := topMembers(appID, raw)
	if err != nil {
		return "", err
	}
	sigErr := func(format string, args ...any) error {
		return api.Errorf(api.CodeManifestSignatureInvalid, map[string]any{"app_id": appID},
			"manifest %s: "+format, append([]any{appID}, args...)...)
	}
	rawSig, ok := obj["signature"]
	if !ok {
		return "", sigErr("unsigned: no signature member")
	}
	var hexSig string
	if kindOf(rawSig) != kindString || json.Unmarshal(rawSig, &hexSig) != nil {
		return "", sigErr("signature is a JSON %s, want a hex string", kindOf(rawSig))
	}
	if hexSig == "" {
		return "", sigErr("unsigned: signature is empty")
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil {
		return "", sigErr("signature is not hex: %v", err)
	}
	if len(sig) != signatureLen {
		return "", sigErr("signature is %d bytes, want %d (%d hex digits)", len(sig), signatureLen, 2*signatureLen)
	}
	if t.Len() == 0 {
		return "", sigErr("no trusted publisher keys to verify the signature with")
	}
	delete(obj, "signature")
	payload, err := canonical(obj)
	if err != nil {
		return "", err
	}
	for _, k := range t.keys {
		if ed25519.Verify(k.key, payload, sig) {
			return k.publisher, nil
		}
	}
	return "", sigErr("signature does not verify with any of the %d trusted publisher keys", len(t.keys))
}
