package golden

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/testkit"
)

// wait bounds every read, write and hang-up a transcript waits for, so
// a face that stops answering fails the test instead of hanging it.
const wait = 5 * time.Second

// Lines is a Conns and a Closer over connections that carry one message
// a line (JSON-RPC, MCP): a connection's first use opens a socket pair
// and serves its far end with the face's serve function, on a goroutine
// Lines owns until CloseAll. Like the Conns it is, it is used from one
// goroutine.
type Lines struct {
	t *testing.T
	// serve serves the face's end of connection name until it closes.
	serve func(name string, c net.Conn)
	conns map[string]*LineConn
	wg    sync.WaitGroup
}

// LineConn is the test's end of one connection of Lines, for tests
// that drive a connection by hand. Closing it makes the face let go.
type LineConn struct {
	net.Conn
	rd *bufio.Reader
	// served is closed when serve has returned: the face has finished
	// with the connection (its session closed).
	served chan struct{}
}

// NewLines returns the line connections of a test whose face serves
// each with serve. Call CloseAll before the face itself closes.
func NewLines(t *testing.T, serve func(name string, c net.Conn)) *Lines {
	return &Lines{t: t, serve: serve, conns: map[string]*LineConn{}}
}

// Conn returns connection name, opening it at its first use.
func (l *Lines) Conn(name string) *LineConn {
	if c, ok := l.conns[name]; ok {
		return c
	}
	client, server := testkit.SocketPair(l.t)
	lc := &LineConn{Conn: client, rd: bufio.NewReaderSize(client, 1<<20), served: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(lc.served)
		l.serve(name, server)
	}()
	l.conns[name] = lc
	return lc
}

// Send writes text and a newline on name.
func (l *Lines) Send(name, text string) error { return l.Conn(name).Send(text) }

// Recv reads name's next line, without its newline.
func (l *Lines) Recv(name string) (string, error) { return l.Conn(name).Recv() }

// Send writes text and a newline.
func (c *LineConn) Send(text string) error {
	c.SetWriteDeadline(time.Now().Add(wait))
	_, err := c.Write([]byte(text + "\n"))
	return err
}

// Recv reads the next line, without its newline.
func (c *LineConn) Recv() (string, error) {
	c.SetReadDeadline(time.Now().Add(wait))
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// Served is closed once the face has finished with the connection.
func (c *LineConn) Served() <-chan struct{} { return c.served }

// Close closes name and waits until the face has finished serving it.
func (l *Lines) Close(name string) error {
	c := l.Conn(name)
	c.Close()
	delete(l.conns, name)
	select {
	case <-c.served:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("the face still serves %s %v after it closed", name, wait)
	}
}

// Closed reports whether the face has hung up name: name reads end of
// file. Then it closes name.
func (l *Lines) Closed(name string) error {
	c := l.Conn(name)
	c.SetReadDeadline(time.Now().Add(wait))
	if extra, err := c.rd.ReadString('\n'); err != io.EOF {
		return fmt.Errorf("got %q, %v; want the face to have closed the connection", extra, err)
	}
	c.Close()
	delete(l.conns, name)
	return nil
}

// CloseAll closes every connection still open and waits for the face
// to finish serving them all.
func (l *Lines) CloseAll() {
	for _, c := range l.conns {
		c.Close()
	}
	l.wg.Wait()
}
