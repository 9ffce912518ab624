//go:build !linux

package main

import (
	"os"
	"os/exec"
)

// onParentDeath does nothing here: only Linux has a parent-death signal.
// If lockyard is killed, the command runs on unprotected.
func onParentDeath(*exec.Cmd, os.Signal) (release func()) { return func() {} }

// terminalForeground reports false here: SIGINT is always forwarded.
func terminalForeground() bool { return false }
