//go:build !linux

package main

import (
	"log/slog"
	"os"
	"os/exec"
	"time"
)

// parentDeath does nothing here: only Linux has a parent-death signal. If
// lockyard is killed, the command runs on unprotected.
type parentDeath struct{}

func onParentDeath(*exec.Cmd, os.Signal, time.Duration, *slog.Logger) *parentDeath {
	return &parentDeath{}
}

func (*parentDeath) started(int) {}
func (*parentDeath) done()       {}

// cmdReap is Linux only.
func cmdReap() int { return exitUsage }

// terminalForeground reports false here: SIGINT is always forwarded.
func terminalForeground() bool { return false }
