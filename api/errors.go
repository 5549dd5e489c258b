package api

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Code is a PCP error code in the JSON-RPC numbering of spec 000.
type Code int

// The catalogue of spec 000. Every face maps errors through ErrorInfo; none
// invents a code of its own.
const (
	CodeParseError     Code = -32700
	CodeInvalidRequest Code = -32600
	CodeMethodNotFound Code = -32601
	CodeInvalidParams  Code = -32602
	CodeInternalError  Code = -32603

	CodeAppNotFound              Code = -32000
	CodeSurfaceNotFound          Code = -32001
	CodeElementNotFound          Code = -32002
	CodeActionNotSupported       Code = -32003
	CodePermissionDenied         Code = -32004
	CodeConfirmationRequired     Code = -32005
	CodeConfirmationDenied       Code = -32006
	CodeConfirmationExpired      Code = -32007
	CodeTargetAmbiguous          Code = -32008
	CodeExecutionTimeout         Code = -32009
	CodeAppUnresponsive          Code = -32010
	CodeNoATSPI2Support          Code = -32011
	CodeInputSimulationFailed    Code = -32012
	CodeCapabilityNotFound       Code = -32015
	CodeManifestInvalid          Code = -32016
	CodeManifestSignatureInvalid Code = -32017
	CodeRateLimited              Code = -32018
	CodeCaptureFailed            Code = -32019
	CodeTextTooLarge             Code = -32020
	CodeWineBridgeError          Code = -32025
)

// ErrorInfo describes one entry of the error catalogue.
type ErrorInfo struct {
	Code Code
	// Name is the spec's symbolic name, e.g. "APP_NOT_FOUND".
	Name string
	// Message is the default human-readable message.
	Message string
	// StreamCode is the ErrorResponse code of the framed stream face
	// (spec 001): 400, 404, 429, 500 and 504 as the spec lists them, 403
	// and 409 where none of those fits.
	StreamCode uint16
}

var catalogue = []ErrorInfo{
	{CodeParseError, "PARSE_ERROR", "Parse error", 400},
	{CodeInvalidRequest, "INVALID_REQUEST", "Invalid request", 400},
	{CodeMethodNotFound, "METHOD_NOT_FOUND", "Method not found", 400},
	{CodeInvalidParams, "INVALID_PARAMS", "Invalid params", 400},
	{CodeInternalError, "INTERNAL_ERROR", "Internal error", 500},
	{CodeAppNotFound, "APP_NOT_FOUND", "Application not found", 404},
	{CodeSurfaceNotFound, "SURFACE_NOT_FOUND", "Surface not found", 404},
	{CodeElementNotFound, "ELEMENT_NOT_FOUND", "Element not found", 404},
	{CodeActionNotSupported, "ACTION_NOT_SUPPORTED", "Action not supported", 400},
	{CodePermissionDenied, "PERMISSION_DENIED", "Permission denied", 403},
	{CodeConfirmationRequired, "CONFIRMATION_REQUIRED", "Confirmation required", 403},
	{CodeConfirmationDenied, "CONFIRMATION_DENIED", "Confirmation denied", 403},
	{CodeConfirmationExpired, "CONFIRMATION_EXPIRED", "Confirmation expired", 403},
	{CodeTargetAmbiguous, "TARGET_AMBIGUOUS", "Target ambiguous", 409},
	{CodeExecutionTimeout, "EXECUTION_TIMEOUT", "Execution timed out", 504},
	{CodeAppUnresponsive, "APP_UNRESPONSIVE", "Application not responding", 504},
	{CodeNoATSPI2Support, "NO_ATSPI2_SUPPORT", "AT-SPI2 not available", 500},
	{CodeInputSimulationFailed, "INPUT_SIMULATION_FAILED", "Input simulation failed", 500},
	{CodeCapabilityNotFound, "CAPABILITY_NOT_FOUND", "Capability not found", 404},
	{CodeManifestInvalid, "MANIFEST_INVALID", "Manifest invalid", 400},
	{CodeManifestSignatureInvalid, "MANIFEST_SIGNATURE_INVALID", "Manifest signature invalid", 403},
	{CodeRateLimited, "RATE_LIMITED", "Rate limited", 429},
	{CodeCaptureFailed, "CAPTURE_FAILED", "Capture failed", 500},
	{CodeTextTooLarge, "TEXT_TOO_LARGE", "Text too large", 400},
	{CodeWineBridgeError, "WINE_BRIDGE_ERROR", "Wine bridge error", 500},
}

var byCode = func() map[Code]ErrorInfo {
	m := make(map[Code]ErrorInfo, len(catalogue))
	for _, e := range catalogue {
		m[e.Code] = e
	}
	return m
}()

// Catalogue returns every error of spec 000, in the spec's order.
func Catalogue() []ErrorInfo { return append([]ErrorInfo(nil), catalogue...) }

// Info returns the catalogue entry for c. Unknown codes (an app may send
// any code in the reserved range) report ok=false and a generic entry.
func (c Code) Info() (ErrorInfo, bool) {
	e, ok := byCode[c]
	if !ok {
		return ErrorInfo{Code: c, Name: fmt.Sprintf("ERROR_%d", int(c)), Message: "Error", StreamCode: 500}, false
	}
	return e, true
}

// Name is the symbolic name of the code, e.g. "RATE_LIMITED".
func (c Code) Name() string { e, _ := c.Info(); return e.Name }

func (c Code) String() string { return c.Name() }

// Error is a PCP error as it travels on every face: a code from the
// catalogue, a message for humans, and structured data for programs.
//
// errors.Is(err, &Error{Code: X}) matches any *Error with code X, so callers
// compare codes, not messages, and the comparison survives a round trip.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Data is structured context: the identifier that failed to resolve,
	// the parameter that was wrong, the retry hint. It is any value that
	// encodes to JSON; after decoding it is a json.RawMessage.
	Data any `json:"data,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "pcp: " + e.Code.Name()
	}
	return fmt.Sprintf("pcp: %s: %s", e.Code.Name(), e.Message)
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// DataMap decodes Data into a map, whatever form it is held in.
func (e *Error) DataMap() map[string]any {
	if e == nil || e.Data == nil {
		return nil
	}
	var raw []byte
	switch d := e.Data.(type) {
	case map[string]any:
		return d
	case json.RawMessage:
		raw = d
	default:
		var err error
		if raw, err = json.Marshal(d); err != nil {
			return nil
		}
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

// Errorf builds an *Error with a formatted message and optional data.
func Errorf(code Code, data any, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Data: data}
}

// Sentinels for errors.Is.
var (
	ErrParse                    = &Error{Code: CodeParseError}
	ErrInvalidRequest           = &Error{Code: CodeInvalidRequest}
	ErrMethodNotFound           = &Error{Code: CodeMethodNotFound}
	ErrInvalidParams            = &Error{Code: CodeInvalidParams}
	ErrInternal                 = &Error{Code: CodeInternalError}
	ErrAppNotFound              = &Error{Code: CodeAppNotFound}
	ErrSurfaceNotFound          = &Error{Code: CodeSurfaceNotFound}
	ErrElementNotFound          = &Error{Code: CodeElementNotFound}
	ErrActionNotSupported       = &Error{Code: CodeActionNotSupported}
	ErrPermissionDenied         = &Error{Code: CodePermissionDenied}
	ErrConfirmationRequired     = &Error{Code: CodeConfirmationRequired}
	ErrConfirmationDenied       = &Error{Code: CodeConfirmationDenied}
	ErrConfirmationExpired      = &Error{Code: CodeConfirmationExpired}
	ErrTargetAmbiguous          = &Error{Code: CodeTargetAmbiguous}
	ErrExecutionTimeout         = &Error{Code: CodeExecutionTimeout}
	ErrAppUnresponsive          = &Error{Code: CodeAppUnresponsive}
	ErrNoATSPI2Support          = &Error{Code: CodeNoATSPI2Support}
	ErrInputSimulationFailed    = &Error{Code: CodeInputSimulationFailed}
	ErrCapabilityNotFound       = &Error{Code: CodeCapabilityNotFound}
	ErrManifestInvalid          = &Error{Code: CodeManifestInvalid}
	ErrManifestSignatureInvalid = &Error{Code: CodeManifestSignatureInvalid}
	ErrRateLimited              = &Error{Code: CodeRateLimited}
	ErrCaptureFailed            = &Error{Code: CodeCaptureFailed}
	ErrTextTooLarge             = &Error{Code: CodeTextTooLarge}
	ErrWineBridge               = &Error{Code: CodeWineBridgeError}
)

// AsError converts any error into an *Error. A context deadline becomes
// EXECUTION_TIMEOUT; anything not already coded becomes INTERNAL_ERROR with
// the error's text as the message.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Code: CodeInternalError, Message: err.Error()}
}

// InvalidParam is the INVALID_PARAMS error naming the offending field.
func InvalidParam(field, format string, args ...any) *Error {
	return &Error{
		Code:    CodeInvalidParams,
		Message: field + ": " + fmt.Sprintf(format, args...),
		Data:    map[string]any{"field": field},
	}
}

// MissingParam is the INVALID_PARAMS error for a required field left out.
func MissingParam(field string) *Error {
	return InvalidParam(field, "required")
}
