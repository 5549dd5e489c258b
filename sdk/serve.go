package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// Options configure Serve. A nil *Options is the zero value.
type Options struct {
	// AgentSocket is the daemon's agent socket, where the rendezvous
	// (apps.socket) happens; "" means client.DefaultSocket().
	AgentSocket string
	// Logger receives connection events, protocol errors and handler
	// panics; nil discards them.
	Logger *slog.Logger
	// OnConnected, if set, is called with the per-app socket's path after
	// each handshake (the ManifestResponse has been sent). It runs on the
	// goroutine that reads the socket, so it must return promptly.
	OnConnected func(socket string)
	// StopOnShutdown makes Serve return when the daemon shuts the app
	// down: a *ShutdownError after an AppShutdown that follows the
	// handshake (a revocation), and an error wrapping ErrPermanent when
	// apps.socket answers that the app is revoked. Without it Serve
	// tries again, with backoff, and so serves again once the user
	// allows the app. (PcpServer.Shutdown is called either way; an app
	// may also cancel ctx from there.)
	StopOnShutdown bool
}

// MaxConcurrentRequests bounds the handlers (Invoke, ValidateParams,
// QueryState) running at once in one Serve call, those of connections
// that ended and still run included. Requests past it wait for a running
// one to return.
const MaxConcurrentRequests = 64

// MaxPendingRequests bounds the requests read from one connection and not
// yet answered, running or waiting. While it is reached Serve stops
// reading the socket, so the daemon's writes back up instead of the app's
// memory growing; until then Pings are answered and a closed connection
// is noticed even when every handler is busy.
const MaxPendingRequests = 4 * MaxConcurrentRequests

// Timing of Serve. The backoff applies between connection attempts.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// dialTimeout bounds the rendezvous (dial and apps.socket) and the
	// dial of the per-app socket.
	dialTimeout = 10 * time.Second
	// handshakeTimeout bounds the wait for the daemon's GetManifest.
	handshakeTimeout = 10 * time.Second
	// writeTimeout closes a connection whose daemon does not read a reply
	// for this long.
	writeTimeout = 30 * time.Second
	// shutdownTimeout bounds PcpServer.Shutdown's context.
	shutdownTimeout = 10 * time.Second
)

// Serve serves srv as the Tier 1 app appID until ctx is cancelled (it
// returns nil) or the daemon refuses the app for good (an error wrapping
// ErrPermanent). It reconnects whenever the connection is lost or the
// daemon refuses it for now, and, unless Options.StopOnShutdown is set
// (then it returns a *ShutdownError), after the daemon shut the app down.
// Before it returns every handler it started has returned. The package
// doc describes the whole lifecycle. opts may be nil.
func Serve(ctx context.Context, appID string, srv PcpServer, opts *Options) error {
	if appID == "" {
		return fmt.Errorf("%w: sdk: Serve: empty app id", ErrPermanent)
	}
	if srv == nil {
		return fmt.Errorf("%w: sdk: Serve %s: nil PcpServer", ErrPermanent, appID)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	log := o.Logger.With("app_id", appID)
	hs := newHandlers()
	defer hs.wg.Wait() // handlers of ended connections, cancelled
	backoff := minBackoff
	for {
		connected, err := serveOnce(ctx, appID, srv, &o, hs, log)
		if errors.Is(err, ErrPermanent) || o.StopOnShutdown && errors.Is(err, ErrShutdown) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			backoff = minBackoff
		}
		log.Info("not connected to pcpd; retrying", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// serveOnce makes one connection and serves it until it ends. connected
// reports whether the handshake succeeded.
func serveOnce(ctx context.Context, appID string, srv PcpServer, o *Options, hs *handlers, log *slog.Logger) (connected bool, err error) {
	manifest, err := srv.Manifest(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false, err
		}
		return false, fmt.Errorf("%w: sdk: manifest of %s: %w", ErrPermanent, appID, err)
	}
	if !isJSONObject(manifest) {
		return false, fmt.Errorf("%w: sdk: manifest of %s: not a JSON object", ErrPermanent, appID)
	}
	sock, err := rendezvous(ctx, o.AgentSocket, appID, manifest, o.StopOnShutdown)
	if err != nil {
		return false, err
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	var d net.Dialer
	nc, err := d.DialContext(dctx, "unix", sock)
	cancel()
	if err != nil {
		return false, fmt.Errorf("sdk: connecting to the per-app socket of %s: %w", appID, err)
	}
	if err := checkServer(nc, sock); err != nil {
		nc.Close()
		return false, err
	}
	c := &conn{
		appID:          appID,
		prefix:         appID + ".",
		srv:            srv,
		nc:             nc,
		socket:         sock,
		manifest:       manifest,
		log:            log.With("socket", sock),
		onConnected:    o.OnConnected,
		stopOnShutdown: o.StopOnShutdown,
		handlers:       hs,
	}
	return c.serve(ctx)
}

// rendezvous asks the daemon at agentSocket for appID's per-app socket
// (apps.socket) and returns its path. Refusals that trying again cannot
// change wrap ErrPermanent; a revocation does only when stopWhenRevoked.
func rendezvous(ctx context.Context, agentSocket, appID string, manifest json.RawMessage, stopWhenRevoked bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	cl, err := client.Dial(ctx, agentSocket, client.Options{OnNotify: func(client.Notification) {}})
	if err != nil {
		return "", err
	}
	defer func() {
		cl.Close()
		<-cl.Done() // the client's reading goroutine has exited
	}()
	res, err := cl.AppSocket(ctx, &api.AppsSocketParams{AppID: appID, Manifest: manifest})
	if err != nil {
		if permanent(err) && (stopWhenRevoked || !revoked(err)) {
			return "", fmt.Errorf("%w: apps.socket for %s: %w", ErrPermanent, appID, err)
		}
		return "", fmt.Errorf("sdk: apps.socket for %s: %w", appID, err)
	}
	if !filepath.IsAbs(res.Socket) {
		return "", fmt.Errorf("sdk: apps.socket for %s: socket %q is not an absolute path", appID, res.Socket)
	}
	return res.Socket, nil
}

// permanent reports whether err, from apps.socket, refuses the app for a
// reason a retry with the same app id and manifest cannot change.
func permanent(err error) bool {
	var pe *api.Error
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case api.CodeManifestInvalid, api.CodeManifestSignatureInvalid, api.CodePermissionDenied, api.CodeInvalidParams:
		return true
	}
	return false
}

// revoked reports whether err, from apps.socket, says the user revoked the
// app: PERMISSION_DENIED with "revoked": true in its data, which lasts
// until the user allows the app again.
func revoked(err error) bool {
	var pe *api.Error
	return errors.As(err, &pe) && pe.Code == api.CodePermissionDenied && pe.DataMap()["revoked"] == true
}

func isJSONObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// checkServer refuses a per-app socket that another user serves
// (SO_PEERCRED names the process that listened): it would see every
// invocation and forge the results. The daemon's agent socket is checked
// the same way by client.Dial.
func checkServer(nc net.Conn, sock string) error {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("sdk: %s is not a Unix socket", sock)
	}
	uid, pid, err := unixsock.PeerCred(uc)
	if err != nil {
		return fmt.Errorf("sdk: %s: cannot read the server's credentials: %w", sock, err)
	}
	if self := os.Getuid(); !unixsock.AllowPeer(uid, self) {
		return fmt.Errorf("sdk: %s is served by uid %d (pid %d), not by this user (uid %d); refusing to serve on it", sock, uid, pid, self)
	}
	return nil
}
