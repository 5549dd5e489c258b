package tier1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/fxamacker/cbor/v2"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
)

// Limits of Decode. MaxPayload matches the frame reader's default bound;
// a payload this package would accept never needs a larger reader.
const (
	MaxPayload      = frame.DefaultMaxPayload
	MaxNestedLevels = 16
	MaxArrayLen     = 4096
	MaxMapPairs     = 4096
)

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	eo := cbor.CoreDetEncOptions() // RFC 8949 §4.2.1: shortest forms, sorted keys
	eo.IndefLength = cbor.IndefLengthForbidden
	eo.TagsMd = cbor.TagsForbidden
	var err error
	if encMode, err = eo.EncMode(); err != nil {
		panic(err)
	}
	do := cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		MaxNestedLevels:   MaxNestedLevels,
		MaxArrayElements:  MaxArrayLen,
		MaxMapPairs:       MaxMapPairs,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		UTF8:              cbor.UTF8RejectInvalid,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
	}
	if decMode, err = do.DecMode(); err != nil {
		panic(err)
	}
}

// invalid is the error of a malformed message of type t.
func invalid(t frame.Type, format string, args ...any) *api.Error {
	return api.Errorf(api.CodeInvalidRequest, map[string]any{"type": t.String()},
		"tier1: %s: %s", t, fmt.Sprintf(format, args...))
}

// Encode returns the payload of m, which must be one of this package's
// message types (a value or a pointer). Ping encodes to the empty payload,
// every other message to a core deterministic CBOR map. A message that
// breaks the schema (a missing capability id, JSON fields that are not
// JSON, …) is refused with an *api.Error coded INVALID_REQUEST, as Decode
// would refuse it.
func Encode(v any) ([]byte, error) {
	m, ok := v.(Message)
	if !ok || v == nil || isNilPointer(m) {
		return nil, api.Errorf(api.CodeInvalidRequest, nil, "tier1: cannot encode %T: not a Tier 1 message", v)
	}
	t := m.Type()
	if err := m.check(); err != nil {
		return nil, invalid(t, "%v", err)
	}
	if t == frame.Ping {
		return nil, nil
	}
	b, err := encMode.Marshal(m)
	if err != nil {
		return nil, invalid(t, "%v", err)
	}
	if len(b) > MaxPayload {
		return nil, invalid(t, "payload of %d bytes exceeds the maximum of %d", len(b), MaxPayload)
	}
	return b, nil
}

func isNilPointer(m Message) bool {
	v := reflect.ValueOf(m)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Decode returns the message of type t carried by payload, as a pointer
// (*InvokeCapability for frame.InvokeCapability, …). t is a Tier 1 type
// (19..27), Ping or Pong. An empty payload stands for the empty map.
//
// Every failure is an *api.Error coded INVALID_REQUEST whose message
// names the type and whose data is {"type": name}: a type with no Tier 1
// payload, a payload over MaxPayload, CBOR that is malformed, nested
// deeper than MaxNestedLevels, longer than MaxArrayLen or MaxMapPairs,
// of indefinite length, tagged, with a duplicate or unknown key or a
// value of the wrong type, followed by trailing bytes, or a message that
// breaks the schema (see docs/tier1.md).
func Decode(t frame.Type, payload []byte) (any, error) {
	m := newMessage(t)
	if m == nil {
		return nil, invalid(t, "not a per-app socket message type")
	}
	if len(payload) > MaxPayload {
		return nil, invalid(t, "payload of %d bytes exceeds the maximum of %d", len(payload), MaxPayload)
	}
	if len(payload) > 0 {
		if err := decMode.Unmarshal(payload, m); err != nil {
			return nil, invalid(t, "%s", describe(err))
		}
	}
	if err := m.check(); err != nil {
		return nil, invalid(t, "%v", err)
	}
	return m, nil
}

// describe rewords the CBOR library's errors that would otherwise name
// Go types only.
func describe(err error) string {
	var uf *cbor.UnknownFieldError
	var dk *cbor.DupMapKeyError
	var ut *cbor.UnmarshalTypeError
	switch {
	case errors.As(err, &ut) && ut.StructFieldName != "":
		key := ut.StructFieldName[strings.LastIndexByte(ut.StructFieldName, '.')+1:]
		return fmt.Sprintf("key %s: %s where %s was expected", key, ut.CBORType, ut.GoType)
	case errors.As(err, &uf):
		return fmt.Sprintf("unknown key (map entry %d)", uf.Index+1)
	case errors.As(err, &dk):
		return fmt.Sprintf("duplicate key %v", dk.Key)
	}
	return err.Error()
}

// checkJSON reports whether b, when present, is valid JSON, and an object
// when object is set.
func checkJSON(field string, b []byte, object bool) error {
	if len(b) == 0 {
		return nil
	}
	if !json.Valid(b) {
		return fmt.Errorf("%s: not valid JSON", field)
	}
	if object && bytes.TrimLeft(b, " \t\r\n")[0] != '{' {
		return fmt.Errorf("%s: not a JSON object", field)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func required(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: required", field)
	}
	return nil
}

func (GetManifest) check() error { return nil }
func (Ping) check() error        { return nil }
func (Pong) check() error        { return nil }
func (AppShutdown) check() error { return nil }

func (m ManifestResponse) check() error {
	if err := required("app_id", m.AppID); err != nil {
		return err
	}
	if len(m.Manifest) == 0 {
		return errors.New("manifest: required")
	}
	return checkJSON("manifest", m.Manifest, true)
}

func (m InvokeCapability) check() error {
	return firstErr(
		required("capability_id", m.CapabilityID),
		required("source", string(m.Source)),
		checkJSON("params", m.Params, true),
	)
}

func (m CapabilityResultMsg) check() error {
	if m.Error != nil {
		if m.Status != "" || len(m.Data) > 0 {
			return errors.New("error: set together with a result")
		}
		return m.Error.check("error")
	}
	if !api.ValidStatus(m.Status) {
		return fmt.Errorf("status: %q is not success, partial or deferred", m.Status)
	}
	return checkJSON("data", m.Data, false)
}

func (e ErrorInfo) check(field string) error {
	if e.Code == 0 {
		return fmt.Errorf("%s: code: required", field)
	}
	return checkJSON(field+": data", e.Data, false)
}

func (m ValidateParamsMsg) check() error {
	return firstErr(
		required("capability_id", m.CapabilityID),
		checkJSON("params", m.Params, true),
	)
}

func (m ValidateResultMsg) check() error {
	switch {
	case m.Valid && m.Error != nil:
		return errors.New("error: set although valid is true")
	case !m.Valid && m.Error == nil:
		return errors.New("error: required when valid is false")
	case m.Error != nil:
		return m.Error.check("error")
	}
	return nil
}

func (m QueryState) check() error {
	for i, k := range m.Keys {
		if k == "" {
			return fmt.Errorf("keys[%d]: empty", i)
		}
	}
	return nil
}

func (m StateResponse) check() error {
	if len(m.State) == 0 {
		return errors.New("state: required")
	}
	return checkJSON("state", m.State, true)
}
