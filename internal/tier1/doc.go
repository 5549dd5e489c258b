// Package tier1 is the payload codec of the per-app Tier 1 sockets of
// spec 001: the CBOR bodies of the frames the daemon and an app serving
// the PcpServer contract exchange.
//
// The frame layer (internal/frame) carries a type tag and opaque bytes;
// this package gives those bytes a schema. Each Tier 1 message type, and
// Ping and Pong, has a Go struct here (GetManifest, InvokeCapability, …);
// Encode turns one into a frame payload with core deterministic CBOR, and
// Decode turns a frame's tag and payload back into the struct, refusing
// anything malformed with an *api.Error coded INVALID_REQUEST.
//
// Every map key is a small unsigned integer, fixed per field and never
// reused; docs/tier1.md lists the schema in CDDL. Parameters, results and
// state stay JSON inside CBOR byte strings, so the core, which speaks
// JSON, passes them through without a second model of them.
//
// Decode treats the payload as hostile: it bounds the payload size, the
// nesting depth, array and map sizes, and refuses duplicate keys,
// indefinite lengths, tags, unknown keys, wrong types and JSON fields that
// are not JSON. Encode checks the same rules, so a payload this package
// produces is always one it accepts.
//
// The package is a codec only: no socket, connection or SDK uses it yet.
package tier1
