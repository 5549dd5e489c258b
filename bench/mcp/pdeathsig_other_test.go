//go:build !linux

package mcp

import "os/exec"

func setParentDeathSignal(*exec.Cmd) {}
