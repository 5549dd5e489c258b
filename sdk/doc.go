// Package sdk is PCP's Go SDK for Tier 1 apps: programs that serve their
// own capabilities to agents through pcpd over a per-app socket (spec 001,
// "Per-App Socket Messages"), rather than over the JSON-RPC face that
// client.App uses.
//
// An app implements PcpServer, or fills in an App, which implements it
// from a signed manifest and one CapabilityFunc per capability name, and
// calls Serve:
//
//	app := &sdk.App{AppID: "org.example.todo", SignedManifest: signed,
//		Capabilities: map[string]sdk.CapabilityFunc{"add": add}}
//	err := sdk.Serve(ctx, app.AppID, app, nil)
//
// # Lifecycle
//
// Serve loops over connections until ctx is cancelled or the daemon
// refuses the app for good. Each connection:
//
//  1. Rendezvous. Serve calls PcpServer.Manifest once, connects to the
//     daemon's agent socket (Options.AgentSocket, by default
//     client.DefaultSocket()), calls apps.socket with the app id and that
//     manifest, and closes the JSON-RPC connection. The result names the
//     per-app socket.
//  2. Handshake. Serve dials the per-app socket. The daemon speaks first:
//     it sends GetManifest (within 10 s, or Serve drops the connection
//     and starts again), and Serve answers ManifestResponse with the
//     manifest of step 1 byte for byte, so the manifest checked at the
//     rendezvous and the one registered are the same. (The JSON-RPC call
//     may re-encode the manifest's whitespace; its signature covers the
//     canonical form.) Options.OnConnected is then called. The daemon
//     may still refuse the manifest; it then sends AppShutdown. A daemon
//     whose app is served by another connection sends AppShutdown
//     instead of GetManifest: that refusal is retried like a lost
//     connection (the socket may be held by another copy of the app, or
//     by a process squatting on it, which the daemon does not let win).
//  3. Serving. The daemon sends InvokeCapability, ValidateParamsMsg and
//     QueryState at any time, several at once; each runs PcpServer's
//     method on its own goroutine and is answered with the RequestID it
//     came with, in whatever order they finish. Ping is answered with a
//     zeroed Pong on the reading goroutine, so liveness checks are
//     answered while handlers are busy.
//
// When the connection is lost (the daemon restarted or closed it) Serve
// starts again at step 1 at once: the per-app socket's path may have
// changed. It does not wait for the handlers of the lost connection,
// only cancels their contexts (see Handlers). It waits between attempts,
// 100 ms at first, doubling up to 5 s, and back to 100 ms once a
// handshake succeeds.
//
// # Shutdown and revocation
//
// When the daemon sends AppShutdown after the handshake (the user
// revoked the app, the daemon refused its manifest, or another
// connection with a valid manifest registered the app first), Serve calls
// PcpServer.Shutdown with the reason and, by default, tries again: while
// the app is revoked apps.socket answers PERMISSION_DENIED with
// "revoked": true, which Serve retries with backoff, so the app serves
// again within 5 s of the user allowing it (pcpctl apps allow), without
// a relaunch. An app that should stop instead sets
// Options.StopOnShutdown: Serve then returns a *ShutdownError (matching
// ErrShutdown) after AppShutdown, and ErrPermanent when apps.socket says
// the app is revoked. An app may also decide case by case by cancelling
// ctx from PcpServer.Shutdown.
//
// Serve returns:
//   - nil when ctx is cancelled, after closing the connection and waiting
//     for every handler it started, whose contexts are cancelled, to
//     return;
//   - an error wrapping ErrPermanent when trying again cannot help: the
//     daemon answered apps.socket with MANIFEST_INVALID,
//     MANIFEST_SIGNATURE_INVALID, PERMISSION_DENIED (a reserved id; a
//     revoked app only with StopOnShutdown) or INVALID_PARAMS, or
//     PcpServer.Manifest failed;
//   - with StopOnShutdown, a *ShutdownError after AppShutdown.
//
// Every other failure (daemon not running, connection refused, a stale
// socket path, a lost connection, a connection refused because the app
// is served by another) is retried.
//
// # Handlers
//
// PcpServer's methods may be called concurrently. At most
// MaxConcurrentRequests of Invoke, ValidateParams and QueryState run at
// once per Serve call; further requests wait for one to return (or for
// their deadline), none is dropped. Only when MaxPendingRequests of a
// connection are read and unanswered does Serve stop reading the socket
// (and then a Ping waits too). A handler's context is cancelled when the
// connection ends, and for InvokeCapability it carries the request's
// deadline (DeadlineMS, counted from the request's arrival; 0 adds
// none). Nothing is sent for a request whose connection ended. A handler
// that ignores its context keeps running after its connection ended, and
// keeps its place among the MaxConcurrentRequests until it returns:
// Serve reconnects without waiting for it, and stuck handlers cannot
// pile up past that bound, however often the connection is lost; a new
// connection's requests then wait for a free place.
//
// Errors travel back inside the replies. An *api.Error keeps its code,
// message and data; a context.DeadlineExceeded becomes EXECUTION_TIMEOUT;
// any other error, a panic in one of those methods (recovered, and
// logged with its stack), or a
// result that cannot be sent (a status that is not success, partial or
// deferred, data that is not JSON, a reply over the 1 MiB payload limit)
// becomes INTERNAL_ERROR. A capability id that does not start with
// "<app_id>." is answered CAPABILITY_NOT_FOUND without calling the
// handler. StateResponse has no error field: when QueryState fails, or
// returns something that is not a JSON object, the reply's state is
// {"error": "<message>"} and the failure is logged.
//
// # Protocol errors
//
// The daemon's frames are checked like any peer's: a frame that does not
// decode, is larger than 1 MiB, has a type the daemon never sends on a
// per-app socket, or is a request sent before GetManifest, is logged and
// the connection closed; Serve then reconnects as after a lost
// connection. Writes are serialized by one mutex and bounded by a write
// timeout, so a daemon that stops reading costs a reconnect, not a hang.
package sdk
