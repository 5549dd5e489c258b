// Package jsonrpc is PCP's JSON-RPC 2.0 layer over newline-delimited JSON
// (spec 000's external transport). It has three parts:
//
//   - wire.go decodes one line into messages and encodes replies; it knows
//     JSON-RPC's rules (ids, batches, notifications, error objects) but
//     nothing of PCP's methods.
//   - frame.go reads bounded lines from a byte stream.
//   - conn.go runs a connection in both directions: it serves the peer's
//     requests through a Handler and lets this side call the peer.
//   - fds.go passes file descriptors beside lines on Unix sockets (a
//     result's memfd attachments) and assigns received ones to the line
//     they came with.
//
// Business rules live in the core; faces decode, call the core and encode.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/pcp-dev/pcp/api"
)

// Message is one decoded JSON-RPC 2.0 message: a request (Method set, ID
// set), a notification (Method set, ID nil) or a response (Method empty).
type Message struct {
	// ID is the raw JSON text of the id: a string, a number or null. It is
	// nil when the member is absent, which makes a request a notification.
	ID     json.RawMessage
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  *api.Error
	// FDs are the file descriptors that came with a response's line
	// (Options.ReceiveFDs); whoever holds the Message owns them.
	FDs []int
}

// IsRequest reports whether m expects a response.
func (m *Message) IsRequest() bool { return m.Method != "" && m.ID != nil }

// IsNotification reports whether m is a request without an id.
func (m *Message) IsNotification() bool { return m.Method != "" && m.ID == nil }

// IsResponse reports whether m answers a request this side sent.
func (m *Message) IsResponse() bool { return m.Method == "" }

// nullID is the id of replies to messages whose id could not be read.
var nullID = json.RawMessage("null")

type wireMessage struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// DecodeError is a message that could not be accepted, with the id to
// answer it under (null when the id could not be read).
type DecodeError struct {
	ID  json.RawMessage
	Err *api.Error
}

// Decoded is the outcome of decoding one line.
type Decoded struct {
	// Batch is true when the line held a JSON array.
	Batch bool
	// Messages are the valid messages, in order.
	Messages []*Message
	// Errors are the invalid ones, each to be answered.
	Errors []DecodeError
}

// Decode parses one line. A line that is not JSON yields one PARSE_ERROR
// with a null id; an empty batch yields one INVALID_REQUEST.
func Decode(line []byte) Decoded {
	line = bytes.TrimSpace(line)
	if len(line) > 0 && line[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(line, &elems); err != nil {
			// Invalid JSON is one parse error, never a batch reply.
			return Decoded{Errors: []DecodeError{parseError(err)}}
		}
		if len(elems) == 0 {
			return Decoded{Errors: []DecodeError{{ID: nullID, Err: invalidRequest("empty batch")}}}
		}
		d := Decoded{Batch: true}
		for _, e := range elems {
			m, derr := decodeOne(e)
			if derr != nil {
				d.Errors = append(d.Errors, *derr)
				continue
			}
			d.Messages = append(d.Messages, m)
		}
		return d
	}
	var d Decoded
	m, derr := decodeOne(line)
	if derr != nil {
		d.Errors = []DecodeError{*derr}
	} else {
		d.Messages = []*Message{m}
	}
	return d
}

func parseError(err error) DecodeError {
	return DecodeError{ID: nullID, Err: &api.Error{Code: api.CodeParseError, Message: "invalid JSON: " + err.Error()}}
}

func invalidRequest(why string) *api.Error {
	return &api.Error{Code: api.CodeInvalidRequest, Message: why}
}

func decodeOne(raw []byte) (*Message, *DecodeError) {
	var w wireMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			d := parseError(err)
			return nil, &d
		}
		// Valid JSON of the wrong shape: not an object.
		return nil, &DecodeError{ID: nullID, Err: invalidRequest("a message must be a JSON object")}
	}
	id := w.ID
	if id != nil && !validID(id) {
		return nil, &DecodeError{ID: nullID, Err: invalidRequest("id must be a string, a number or null")}
	}
	replyID := id
	if replyID == nil {
		replyID = nullID
	}
	if string(w.JSONRPC) != `"2.0"` {
		return nil, &DecodeError{ID: replyID, Err: invalidRequest(`jsonrpc must be "2.0"`)}
	}
	m := &Message{ID: id}
	if w.Method != nil {
		var method string
		if json.Unmarshal(w.Method, &method) != nil || method == "" {
			return nil, &DecodeError{ID: replyID, Err: invalidRequest("method must be a non-empty string")}
		}
		if w.Result != nil || w.Error != nil {
			return nil, &DecodeError{ID: replyID, Err: invalidRequest("a request cannot carry result or error")}
		}
		if w.Params != nil {
			switch firstByte(w.Params) {
			case '{', '[':
			default:
				return nil, &DecodeError{ID: replyID, Err: invalidRequest("params must be an object or an array")}
			}
		}
		m.Method = method
		m.Params = w.Params
		return m, nil
	}
	// A response to a call this side made.
	if id == nil {
		return nil, &DecodeError{ID: nullID, Err: invalidRequest("message has neither method nor id")}
	}
	switch {
	case w.Result != nil && w.Error == nil:
		m.Result = w.Result
	case w.Error != nil && w.Result == nil:
		var e api.Error
		var data json.RawMessage
		ew := struct {
			Code    *int            `json:"code"`
			Message *string         `json:"message"`
			Data    json.RawMessage `json:"data"`
		}{}
		if json.Unmarshal(w.Error, &ew) != nil || ew.Code == nil || ew.Message == nil {
			return nil, &DecodeError{ID: replyID, Err: invalidRequest("error must be an object with an integer code and a string message")}
		}
		e.Code, e.Message = api.Code(*ew.Code), *ew.Message
		if ew.Data != nil && string(ew.Data) != "null" {
			data = ew.Data
			e.Data = data
		}
		m.Error = &e
	default:
		return nil, &DecodeError{ID: replyID, Err: invalidRequest("a response needs exactly one of result and error")}
	}
	return m, nil
}

func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

func validID(id json.RawMessage) bool {
	switch c := firstByte(id); {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	case c == 'n':
		return string(id) == "null"
	}
	return false
}

// IDKey is a map key for an id: its JSON text with numbers normalised, so
// 1 and 1.0 match.
func IDKey(id json.RawMessage) string {
	if c := firstByte(id); c == '-' || (c >= '0' && c <= '9') {
		if f, err := strconv.ParseFloat(string(id), 64); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	return string(id)
}

// AppendResult appends a success response line (without the newline).
func AppendResult(buf []byte, id json.RawMessage, result []byte) []byte {
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = append(buf, id...)
	buf = append(buf, `,"result":`...)
	buf = append(buf, result...)
	return append(buf, '}')
}

// AppendError appends an error response line (without the newline).
func AppendError(buf []byte, id json.RawMessage, e *api.Error) []byte {
	if id == nil {
		id = nullID
	}
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = append(buf, id...)
	buf = append(buf, `,"error":`...)
	buf = append(buf, EncodeError(e)...)
	return append(buf, '}')
}

// EncodeError encodes e as a JSON-RPC error object. The message defaults to
// the catalogue's message for the code.
func EncodeError(e *api.Error) []byte {
	msg := e.Message
	if msg == "" {
		info, _ := e.Code.Info()
		msg = info.Message
	}
	out := struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}{int(e.Code), msg, e.Data}
	b, err := Marshal(out)
	if err != nil {
		// Data that cannot be encoded is dropped rather than the error.
		out.Data = nil
		b, _ = Marshal(out)
	}
	return b
}

// AppendRequest appends a request or notification line (without the
// newline); id nil makes a notification.
func AppendRequest(buf []byte, id json.RawMessage, method string, params []byte) []byte {
	buf = append(buf, `{"jsonrpc":"2.0",`...)
	if id != nil {
		buf = append(buf, `"id":`...)
		buf = append(buf, id...)
		buf = append(buf, ',')
	}
	buf = append(buf, `"method":`...)
	mb, _ := Marshal(method)
	buf = append(buf, mb...)
	if params != nil {
		buf = append(buf, `,"params":`...)
		buf = append(buf, params...)
	}
	return append(buf, '}')
}

// Marshal encodes v as JSON without HTML escaping and without a trailing
// newline. A json.RawMessage passes through unchanged.
func Marshal(v any) ([]byte, error) {
	if r, ok := v.(json.RawMessage); ok {
		if r == nil {
			return []byte("null"), nil
		}
		return r, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil
}

// RecoverID reads the id of a request from the start of a line that was
// too long to decode, so the error can be answered under the request's
// id. It returns null when the id is not among the members the prefix
// holds in full.
func RecoverID(prefix []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nullID
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nullID
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nullID
		}
		if key == "id" {
			if validID(v) {
				return v
			}
			return nullID
		}
	}
	return nullID
}
