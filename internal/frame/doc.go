// Package frame is the byte layer of the framed stream of spec 001: the
// daemon's native client socket and the per-app Tier 1 sockets.
//
// A frame is a one-byte type tag, a four-byte big-endian payload length
// and the payload:
//
//	+------+----------------+------------------+
//	| tag  | length N (u32, | payload          |
//	| (u8) | big-endian)    | (N bytes)        |
//	+------+----------------+------------------+
//
// The payload is JSON on the client socket and CBOR on per-app sockets;
// this package never looks inside it. It knows the 27 message types of
// the spec (Registry), which of them a client may send (AcceptedOnClientSocket),
// and the ErrorResponse status codes, but it decodes no payload and
// dispatches nothing: that is the connection layer's job.
//
// Reader bounds every frame by a maximum payload length. A frame that is
// too long, or whose tag is not a message type, is skipped so the stream
// stays in sync, and Next reports it as a *TooLargeError or an
// *UnknownTypeError for the caller to answer with an ErrorResponse.
// docs/framed.md describes the wire format byte by byte.
package frame
