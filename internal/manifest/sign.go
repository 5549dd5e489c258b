package manifest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/canonjson"
)

// signatureLen is the length of an Ed25519 signature in bytes.
const signatureLen = ed25519.SignatureSize

// PEM block types of the key files.
const (
	pemPrivateKey = "PRIVATE KEY"
	pemPublicKey  = "PUBLIC KEY"
)

// SigningPayload is the RFC 8785 canonical JSON of the manifest object raw
// with its "signature" member removed: the bytes a publisher signs. Any
// other member stays, so a signature covers members Parse would reject.
// A raw that is not an I-JSON object is a MANIFEST_INVALID error.
func SigningPayload(raw json.RawMessage) ([]byte, error) {
	obj, err := topMembers("", raw)
	if err != nil {
		return nil, err
	}
	delete(obj, "signature")
	return canonical(obj)
}

// Sign returns raw with "signature" set to the lowercase hex Ed25519
// signature by key over SigningPayload(raw). The result is in canonical
// form; any previous signature is replaced.
func Sign(raw json.RawMessage, key ed25519.PrivateKey) (json.RawMessage, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("manifest: sign: private key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	obj, err := topMembers("", raw)
	if err != nil {
		return nil, err
	}
	delete(obj, "signature")
	payload, err := canonical(obj)
	if err != nil {
		return nil, err
	}
	sig, err := json.Marshal(hex.EncodeToString(ed25519.Sign(key, payload)))
	if err != nil {
		return nil, err
	}
	obj["signature"] = sig
	return canonical(obj)
}

// topMembers decodes raw, which must be strict I-JSON, as an object. appID,
// when known, goes into error messages and data.
func topMembers(appID string, raw json.RawMessage) (map[string]json.RawMessage, error) {
	fail := func(format string, args ...any) error {
		if appID == "" {
			return api.Errorf(api.CodeManifestInvalid, nil, "manifest: "+format, args...)
		}
		return api.Errorf(api.CodeManifestInvalid, map[string]any{"app_id": appID},
			"manifest %s: "+format, append([]any{appID}, args...)...)
	}
	// Transform first: encoding/json would let a duplicate member or
	// invalid UTF-8 through, and the signer and verifier must agree on
	// exactly which object they mean.
	canon, err := canonjson.Transform(raw)
	if err != nil {
		return nil, fail("not valid I-JSON: %v", err)
	}
	if k := kindOf(canon); k != kindObject {
		return nil, fail("expected object, got %s", k)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(canon, &obj); err != nil {
		return nil, fail("%v", err)
	}
	return obj, nil
}

func canonical(obj map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, api.Errorf(api.CodeManifestInvalid, nil, "manifest: %v", err)
	}
	// json.Marshal sorts by bytes and escapes HTML; Transform puts both right.
	c, err := canonjson.Transform(b)
	if err != nil {
		return nil, api.Errorf(api.CodeManifestInvalid, nil, "manifest: %v", err)
	}
	return c, nil
}

// GenerateKey makes a new Ed25519 key pair, PEM-encoded as PKCS#8
// "PRIVATE KEY" and PKIX "PUBLIC KEY", the formats openssl uses.
func GenerateKey() (privPEM, pubPEM []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: generate key: %w", err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: encode private key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: privDER}),
		pem.EncodeToMemory(&pem.Block{Type: pemPublicKey, Bytes: pubDER}), nil
}

// ParsePrivateKey decodes a PEM "PRIVATE KEY" block holding a PKCS#8
// Ed25519 key. Encrypted keys are not supported.
func ParsePrivateKey(pemBytes []byte) (ed25519.PrivateKey, error) {
	der, err := pemBlock(pemBytes, pemPrivateKey)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("manifest: private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("manifest: private key is %T, want Ed25519", k)
	}
	return priv, nil
}

// ParsePublicKey decodes a PEM "PUBLIC KEY" block holding a PKIX Ed25519
// key.
func ParsePublicKey(pemBytes []byte) (ed25519.PublicKey, error) {
	der, err := pemBlock(pemBytes, pemPublicKey)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("manifest: public key: %w", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("manifest: public key is %T, want Ed25519", k)
	}
	return pub, nil
}

// pemBlock returns the contents of the single PEM block of type want.
func pemBlock(pemBytes []byte, want string) ([]byte, error) {
	block, rest := pem.Decode(pemBytes)
	if block == nil {
		return nil, fmt.Errorf("manifest: no PEM %q block found", want)
	}
	if block.Type != want {
		if block.Type == "ENCRYPTED PRIVATE KEY" {
			return nil, errors.New("manifest: encrypted private keys are not supported")
		}
		return nil, fmt.Errorf("manifest: PEM block is %q, want %q", block.Type, want)
	}
	if len(block.Headers) > 0 {
		return nil, fmt.Errorf("manifest: PEM %q block has headers (encrypted?)", want)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("manifest: data after the PEM %q block", want)
	}
	return block.Bytes, nil
}
