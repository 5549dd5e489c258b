package mcp

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills cmd if this process dies without stopping
// it; pcpd does not watch its standard input as the re-executed children
// do.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
