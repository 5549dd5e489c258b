package daemon

import (
	"errors"
	"fmt"
	"net"
)

// loopbackOnly refuses TCP listen addresses that are not loopback.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("tcp address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errors.New("tcp address " + addr + " is not loopback; PCP listens on 127.0.0.1 or ::1 only")
	}
	return nil
}
