package main

import (
	"net"
	"os"
)

// notifyManager tells the service manager of a state change
// (sd_notify(3): "READY=1", "STOPPING=1") on $NOTIFY_SOCKET, which
// pcpd.service's Type=notify sets; without it, it does nothing. An
// address beginning with '@' is in the abstract namespace.
func notifyManager(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
