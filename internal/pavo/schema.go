package pavo

import _ "embed"

// Schema is the JSON Schema (2020-12) of the protocol as this driver
// speaks it: every request, every op's reply and every type, under
// $defs. The reply of op X is described by #/$defs/XReply (e.g.
// ManifestReply).
//
//go:embed schema/wire.schema.json
var Schema []byte
