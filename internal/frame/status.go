package frame

// Status codes of the ErrorResponse payload (tag 17, code: u16). The first
// five are spec 001's; 403 and 409 are added where none of them fits. The
// mapping of every PCP error to one of these is api.ErrorInfo.StreamCode.
const (
	StatusUnsupported    uint16 = 400 // unsupported message type, malformed or oversized frame
	StatusForbidden      uint16 = 403 // refused by policy or by the user
	StatusNotFound       uint16 = 404 // capability or app not found
	StatusConflict       uint16 = 409 // ambiguous target
	StatusRateLimited    uint16 = 429 // rate-limited, slow down
	StatusAdapterFailure uint16 = 500 // adapter failure
	StatusTimeout        uint16 = 504 // execution timed out (30s default)
)
