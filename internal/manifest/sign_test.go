package manifest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

// newKey returns a fresh private key and its PEM public key.
func newKey(t *testing.T) (ed25519.PrivateKey, []byte) {
	t.Helper()
	privPEM, pubPEM, err := GenerateKey()
	if err != nil {
		t.Fatalf("GenerateKey: %v", err)
	}
	priv, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatalf("ParsePrivateKey: %v", err)
	}
	return priv, pubPEM
}

// trustDir writes the PEM files to a new directory and loads it.
func trustDir(t *testing.T, files map[string][]byte) (*TrustStore, string) {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ts, errs := LoadTrustDir(dir)
	for _, err := range errs {
		t.Errorf("LoadTrustDir: %v", err)
	}
	return ts, dir
}

func TestSigningPayload(t *testing.T) {
	raw := `{ "signature": "abcd", "version": "1.0", "b": 1E2, "capabilities": [{"name":"x","d":"<é>"}] }`
	got, err := SigningPayload(json.RawMessage(raw))
	if err != nil {
		t.Fatalf("SigningPayload: %v", err)
	}
	want := `{"b":100,"capabilities":[{"d":"<é>","name":"x"}],"version":"1.0"}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}

	// With or without a signature, signed or not, the payload is the same.
	for _, r := range []string{
		`{"version":"1.0","b":100,"capabilities":[{"name":"x","d":"\u003cé\u003e"}]}`,
		`{"version":"1.0","b":100,"capabilities":[{"name":"x","d":"<\u00e9>"}],"signature":""}`,
	} {
		got2, err := SigningPayload(json.RawMessage(r))
		if err != nil || string(got2) != want {
			t.Errorf("SigningPayload(%s) = %s, %v, want %s", r, got2, err, want)
		}
	}

	for _, bad := range []string{`[]`, `{"a":1,"a":2}`, `{"a":`, "{\"a\":\"\xff\"}", `"x"`} {
		_, err := SigningPayload(json.RawMessage(bad))
		checkError(t, err, api.CodeManifestInvalid, "", "")
	}
}

func TestSignVerify(t *testing.T) {
	priv, pubPEM := newKey(t)
	ts, _ := trustDir(t, map[string][]byte{"example.pem": pubPEM})
	if ts.Len() != 1 {
		t.Fatalf("got Len %d, want 1", ts.Len())
	}

	signed, err := Sign(json.RawMessage(specExample), priv)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	m, err := Parse(testApp, signed)
	if err != nil {
		t.Fatalf("Parse(signed): %v", err)
	}
	if len(m.Signature) != 128 || m.Signature != strings.ToLower(m.Signature) {
		t.Errorf("got signature %q, want 128 lowercase hex digits", m.Signature)
	}
	pub, err := verifyApp(ts, signed)
	if err != nil || pub != "example" {
		t.Fatalf("Verify = %q, %v, want %q, nil", pub, err, "example")
	}

	// Re-signing replaces the signature; whitespace and member order do
	// not matter to the signature.
	resigned, err := Sign(signed, priv)
	if err != nil || !bytes.Equal(resigned, signed) {
		t.Errorf("Sign(signed) = %s, %v, want %s", resigned, err, signed)
	}
	var obj map[string]any
	if err := json.Unmarshal(signed, &obj); err != nil {
		t.Fatal(err)
	}
	indented, _ := json.MarshalIndent(obj, "", "    ")
	if _, err := verifyApp(ts, indented); err != nil {
		t.Errorf("Verify(reformatted) = %v, want nil", err)
	}
	upper := strings.Replace(string(signed), m.Signature, strings.ToUpper(m.Signature), 1)
	if _, err := verifyApp(ts, json.RawMessage(upper)); err != nil {
		t.Errorf("Verify(uppercase hex) = %v, want nil", err)
	}
}

// verifyApp is TrustStore.Verify for testApp.
func verifyApp(ts *TrustStore, raw json.RawMessage) (string, error) {
	return ts.Verify(testApp, raw)
}

func TestVerifyFailures(t *testing.T) {
	priv, pubPEM := newKey(t)
	otherPriv, _ := newKey(t)
	ts, _ := trustDir(t, map[string][]byte{"example.pem": pubPEM})

	signed, err := Sign(json.RawMessage(specExample), priv)
	if err != nil {
		t.Fatal(err)
	}
	bySomeoneElse, err := Sign(json.RawMessage(specExample), otherPriv)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := Parse(testApp, signed)
	sig := m.Signature
	replace := func(old, new string) json.RawMessage {
		if !strings.Contains(string(signed), old) {
			t.Fatalf("%q not in %s", old, signed)
		}
		return json.RawMessage(strings.Replace(string(signed), old, new, 1))
	}
	empty, _ := LoadTrustDir(filepath.Join(t.TempDir(), "missing"))

	tests := []struct {
		name string
		ts   *TrustStore
		raw  json.RawMessage
		code api.Code
		msg  string
	}{
		{"tampered capability", ts, replace(`"trust_level":"confirm"`, `"trust_level":"auto"`), api.CodeManifestSignatureInvalid, "does not verify with any of the 1 trusted publisher keys"},
		{"tampered parameter", ts, replace(`"recipient"`, `"recipients"`), api.CodeManifestSignatureInvalid, "does not verify"},
		{"added member", ts, replace(`"version":"1.0"`, `"version":"1.0","publisher":"x"`), api.CodeManifestSignatureInvalid, "does not verify"},
		{"untrusted key", ts, bySomeoneElse, api.CodeManifestSignatureInvalid, "does not verify"},
		{"no signature member", ts, replace(`,"signature":"`+sig+`"`, ""), api.CodeManifestSignatureInvalid, "unsigned: no signature member"},
		{"empty signature", ts, replace(sig, ""), api.CodeManifestSignatureInvalid, "unsigned: signature is empty"},
		{"signature not string", ts, replace(`"`+sig+`"`, "1"), api.CodeManifestSignatureInvalid, "signature is a JSON number"},
		{"signature not hex", ts, replace(sig, "zz"+sig[2:]), api.CodeManifestSignatureInvalid, "not hex"},
		{"signature odd length", ts, replace(sig, sig[1:]), api.CodeManifestSignatureInvalid, "not hex"},
		{"signature short", ts, replace(sig, sig[2:]), api.CodeManifestSignatureInvalid, "signature is 63 bytes, want 64"},
		{"signature long", ts, replace(sig, sig+"00"), api.CodeManifestSignatureInvalid, "signature is 65 bytes"},
		{"signature flipped", ts, replace(sig, flipFirstByte(sig)), api.CodeManifestSignatureInvalid, "does not verify"},
		{"no trusted keys", empty, signed, api.CodeManifestSignatureInvalid, "no trusted publisher keys"},
		{"nil store", nil, signed, api.CodeManifestSignatureInvalid, "no trusted publisher keys"},
		{"not json", ts, json.RawMessage(`{"signature":`), api.CodeManifestInvalid, "not valid I-JSON"},
		{"duplicate member", ts, replace(`"version":"1.0"`, `"version":"1.0","version":"2.0"`), api.CodeManifestInvalid, "duplicate member"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub, err := tt.ts.Verify(testApp, tt.raw)
			if err == nil {
				t.Fatalf("Verify = %q, want error", pub)
			}
			checkError(t, err, tt.code, "", "", tt.msg)
			if got := err.(*api.Error).DataMap()["app_id"]; got != testApp {
				t.Errorf("got Data app_id %v, want %q", got, testApp)
			}
			if !strings.Contains(err.Error(), "manifest "+testApp+": ") {
				t.Errorf("got %q, want it to name the app", err)
			}
		})
	}
}

func TestVerifyPicksMatchingPublisher(t *testing.T) {
	_, pubA := newKey(t)
	privB, pubB := newKey(t)
	_, pubC := newKey(t)
	ts, _ := trustDir(t, map[string][]byte{"a.pem": pubA, "b.pub": pubB, "c.pub.pem": pubC})
	if got, want := strings.Join(ts.Publishers(), ","), "a,b,c"; got != want {
		t.Errorf("got publishers %s, want %s", got, want)
	}
	signed, err := Sign(json.RawMessage(specExample), privB)
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := verifyApp(ts, signed); err != nil || pub != "b" {
		t.Errorf("Verify = %q, %v, want %q, nil", pub, err, "b")
	}
}

func TestLoadTrustDir(t *testing.T) {
	privPEM, pubPEM, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	_, pub2PEM, _ := GenerateKey()
	dir := t.TempDir()
	files := map[string][]byte{
		"good.pem":    pubPEM,
		"good.pub":    pub2PEM, // same publisher as good.pem
		"garbage.pem": []byte("not a key"),
		"private.pem": privPEM, // a private key is not a trusted key
		".pem":        pub2PEM,
		"README":      []byte("ignored"),
		"other.txt":   pubPEM,
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.pem"), 0o755); err != nil {
		t.Fatal(err)
	}
	ts, errs := LoadTrustDir(dir)
	if got, want := strings.Join(ts.Publishers(), ","), "good"; got != want {
		t.Errorf("got publishers %q, want %q", got, want)
	}
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		".pem: file name gives no publisher name",
		`garbage.pem: manifest: no PEM "PUBLIC KEY" block found`,
		`private.pem: manifest: PEM block is "PRIVATE KEY", want "PUBLIC KEY"`,
		`good.pub: publisher "good" already loaded from`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("got errors:\n%s\nwant one containing %q", all, want)
		}
	}
	if len(errs) != 4 {
		t.Errorf("got %d errors, want 4:\n%s", len(errs), all)
	}
}

func TestLoadTrustDirMissingAndEmpty(t *testing.T) {
	ts, errs := LoadTrustDir(filepath.Join(t.TempDir(), "nope"))
	if ts == nil || ts.Len() != 0 || len(errs) != 0 {
		t.Errorf("LoadTrustDir(missing) = %v (Len %d), %v, want empty store, no errors", ts, ts.Len(), errs)
	}
	ts, errs = LoadTrustDir(t.TempDir())
	if ts.Len() != 0 || len(errs) != 0 {
		t.Errorf("LoadTrustDir(empty) = Len %d, %v, want empty store, no errors", ts.Len(), errs)
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	ts, errs = LoadTrustDir(f)
	if ts.Len() != 0 || len(errs) != 1 {
		t.Errorf("LoadTrustDir(a file) = Len %d, %v, want empty store, one error", ts.Len(), errs)
	}
}

func TestNewTrustStore(t *testing.T) {
	priv, pubPEM := newKey(t)
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := NewTrustStore(map[string]ed25519.PublicKey{"acme": pub})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewTrustStore(map[string]ed25519.PublicKey{"short": pub[:31]}); err == nil {
		t.Errorf("NewTrustStore(31-byte key) succeeded, want error")
	}
	if _, err := NewTrustStore(map[string]ed25519.PublicKey{"": pub}); err == nil {
		t.Errorf("NewTrustStore(empty name) succeeded, want error")
	}
	signed, err := Sign(json.RawMessage(specExample), priv)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := verifyApp(ts, signed); err != nil || got != "acme" {
		t.Errorf("Verify = %q, %v, want acme", got, err)
	}
}

func TestParseKeys(t *testing.T) {
	privPEM, pubPEM, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatalf("ParsePrivateKey: %v", err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatalf("ParsePublicKey: %v", err)
	}
	if !pub.Equal(priv.Public()) {
		t.Errorf("public key does not match private key")
	}
	tests := []struct {
		name  string
		parse func([]byte) error
		in    string
		msg   string
	}{
		{"empty", parsePub, "", "no PEM"},
		{"private as public", parsePub, string(privPEM), `PEM block is "PRIVATE KEY", want "PUBLIC KEY"`},
		{"public as private", parsePriv, string(pubPEM), `PEM block is "PUBLIC KEY", want "PRIVATE KEY"`},
		{"encrypted", parsePriv, "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n", "encrypted"},
		{"trailing", parsePub, string(pubPEM) + string(pubPEM), "data after"},
		{"bad der", parsePub, "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "public key:"},
		{"ecdsa", parsePub, ecdsaPublicPEM(t), "want Ed25519"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parse([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v, want error containing %q", err, tt.msg)
			}
		})
	}
}

func ecdsaPublicPEM(t *testing.T) string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func parsePub(b []byte) error  { _, err := ParsePublicKey(b); return err }
func parsePriv(b []byte) error { _, err := ParsePrivateKey(b); return err }

// openssl returns the path of the openssl binary. The interop tests must
// run against the real tool, so its absence fails them.
func openssl(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl not found on PATH (%v): install openssl (e.g. apt-get install openssl) to run the key interop tests", err)
	}
	return path
}

func run(t *testing.T, dir, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// TestOpenSSLInterop signs with a key openssl made, verifies with the
// public key openssl derived, and checks that a signature openssl itself
// makes over SigningPayload verifies, and ours verifies in openssl.
func TestOpenSSLInterop(t *testing.T) {
	ossl := openssl(t)
	dir := t.TempDir()
	run(t, dir, ossl, "genpkey", "-algorithm", "ed25519", "-out", "k.pem")
	run(t, dir, ossl, "pkey", "-in", "k.pem", "-pubout", "-out", "k.pub.pem")

	privPEM, err := os.ReadFile(filepath.Join(dir, "k.pem"))
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatalf("ParsePrivateKey(openssl key): %v", err)
	}
	pubPEM, err := os.ReadFile(filepath.Join(dir, "k.pub.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := trustDir(t, map[string][]byte{"k.pub.pem": pubPEM})
	if got := strings.Join(ts.Publishers(), ","); got != "k" {
		t.Errorf("got publishers %q, want %q", got, "k")
	}

	// Our Sign with openssl's key, our Verify with openssl's public key.
	signed, err := Sign(json.RawMessage(specExample), priv)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if pub, err := verifyApp(ts, signed); err != nil || pub != "k" {
		t.Fatalf("Verify(Sign with openssl key) = %q, %v, want k", pub, err)
	}

	// openssl's signature over our payload, verified by us.
	payload, err := SigningPayload(json.RawMessage(specExample))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "payload"), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, ossl, "pkeyutl", "-sign", "-rawin", "-inkey", "k.pem", "-in", "payload", "-out", "sig")
	osslSig, err := os.ReadFile(filepath.Join(dir, "sig"))
	if err != nil {
		t.Fatal(err)
	}
	if len(osslSig) != ed25519.SignatureSize {
		t.Fatalf("openssl wrote a %d-byte signature, want %d", len(osslSig), ed25519.SignatureSize)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(specExample), &obj); err != nil {
		t.Fatal(err)
	}
	obj["signature"], _ = json.Marshal(hex.EncodeToString(osslSig))
	osslSigned, _ := json.Marshal(obj)
	if pub, err := verifyApp(ts, osslSigned); err != nil || pub != "k" {
		t.Errorf("Verify(openssl signature) = %q, %v, want k", pub, err)
	}
	// Ed25519 is deterministic: openssl and we sign the payload alike.
	var ours struct{ Signature string }
	json.Unmarshal(signed, &ours)
	if got, want := ours.Signature, hex.EncodeToString(osslSig); got != want {
		t.Errorf("our signature %s, openssl's %s, want equal", got, want)
	}

	// Our signature verified by openssl.
	oursRaw, _ := hex.DecodeString(ours.Signature)
	if err := os.WriteFile(filepath.Join(dir, "oursig"), oursRaw, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, ossl, "pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", "k.pub.pem", "-in", "payload", "-sigfile", "oursig")
}

// TestOpenSSLReadsGeneratedKeys checks that openssl accepts the PEM files
// GenerateKey writes and derives the same public key.
func TestOpenSSLReadsGeneratedKeys(t *testing.T) {
	ossl := openssl(t)
	dir := t.TempDir()
	privPEM, pubPEM, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "priv.pem"), privPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "pub.pem"), pubPEM, 0o644)
	run(t, dir, ossl, "pkey", "-pubin", "-in", "pub.pem", "-noout")
	run(t, dir, ossl, "pkey", "-in", "priv.pem", "-noout")
	derived := run(t, dir, ossl, "pkey", "-in", "priv.pem", "-pubout")
	if !bytes.Equal(derived, pubPEM) {
		t.Errorf("openssl derived public key\n%s\nwant\n%s", derived, pubPEM)
	}
}

// flipFirstByte changes the first byte of a hex signature, whatever it is
// (keys are random: replacing it with a constant would leave one
// signature in 256 unchanged).
func flipFirstByte(sig string) string {
	if sig[:2] == "00" {
		return "01" + sig[2:]
	}
	return "00" + sig[2:]
}
