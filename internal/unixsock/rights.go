package unixsock

import "syscall"

// ParseRights returns the descriptors of the SCM_RIGHTS messages in oob,
// the control data of a recvmsg; other control messages, and messages
// that do not parse, are ignored. The caller owns the descriptors.
func ParseRights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != syscall.SOL_SOCKET || msgs[i].Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		got, err := syscall.ParseUnixRights(&msgs[i])
		if err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}
