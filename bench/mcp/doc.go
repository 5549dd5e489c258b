// Package mcp measures a PCP invocation against the same round trip made
// with the Model Context Protocol's Go SDK: an MCP tools/call of a ping
// tool served over a Unix socket with the SDK's newline-delimited JSON
// transport, PCP's invoke.capability of pcp.inspection.ping on a real
// pcpd, and a raw line echo as the floor both are measured against. Every
// server runs in a child process; the package has only benchmarks.
//
// It is a module of its own, which it was to keep the SDK out of PCP's
// go.mod; pcpd's MCP face (internal/face/mcp) now uses the SDK, and its
// benchmarks there compare that face with a bare SDK server.
// Run it with scripts/bench, or:
//
//	go test -run '^$' -bench . ./mcp
package mcp
