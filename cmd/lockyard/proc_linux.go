package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// parentDeath guards the command against lockyard's own death (even by
// SIGKILL): nothing renews the lock any more, so the command must not go
// on as if it held it.
//   - The kernel sends the command the --on-lost signal at once (its
//     parent-death signal). It is tied to the OS thread that forks, so the
//     caller stays on it until the command ends: done undoes that.
//   - A reaper, this program run as `lockyard __reap` in a process group of
//     its own, sends SIGKILL grace later if the command still runs, before
//     the key can lapse. It learns of lockyard's death when its stdin, a
//     pipe from lockyard, closes without "done".
type parentDeath struct {
	grace  time.Duration
	log    *slog.Logger
	unlock func()
	reaper *exec.Cmd
	pipe   io.WriteCloser
}

// onParentDeath sets the command's parent-death signal and starts the
// reaper, before the command starts: its pid is written to the reaper as
// soon as the command runs (started), so that lockyard dying in between
// leaves a window of microseconds, not a process start-up. If the reaper
// cannot start, the command keeps only its parent-death signal (logged).
func onParentDeath(cmd *exec.Cmd, sig os.Signal, grace time.Duration, log *slog.Logger) *parentDeath {
	g := &parentDeath{grace: grace, log: log}
	if s, ok := sig.(syscall.Signal); ok {
		runtime.LockOSThread()
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: s}
		g.unlock = runtime.UnlockOSThread
	}
	exe, err := os.Executable()
	if err != nil {
		log.Warn("lockyard: no reaper for the command if lockyard dies", "err", err)
		return g
	}
	r := exec.Command(exe, "__reap")
	r.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a Ctrl-C or a kill of lockyard's group does not reach it
	r.Stderr = os.Stderr
	in, err := r.StdinPipe()
	if err == nil {
		err = r.Start()
	}
	if err != nil {
		log.Warn("lockyard: no reaper for the command if lockyard dies", "err", err)
		return g
	}
	g.reaper, g.pipe = r, in
	return g
}

// started tells the reaper the command's pid.
func (g *parentDeath) started(pid int) {
	if g.pipe != nil {
		fmt.Fprintf(g.pipe, "%d %d\n", pid, int64(g.grace))
	}
}

// done tells the reaper that the command ended, and waits for it.
func (g *parentDeath) done() {
	if g.pipe != nil {
		_, _ = io.WriteString(g.pipe, "done\n")
		_ = g.pipe.Close()
		_ = g.reaper.Wait()
	}
	if g.unlock != nil {
		g.unlock()
	}
}

// cmdReap is `lockyard __reap`: it reads "PID GRACE" on stdin, then waits
// for stdin to close. After "done", it exits; otherwise lockyard died, and
// it sends the process PID SIGKILL GRACE later, if it still runs (a pidfd
// makes sure it is the same process, not one that reused its pid). A
// stdin that closes before a pid (the command did not start, or lockyard
// died first) ends it.
func cmdReap() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	in := bufio.NewReader(os.Stdin)
	var pid int
	var grace int64
	if _, err := fmt.Fscanf(in, "%d %d\n", &pid, &grace); err != nil {
		return 0
	}
	target := watchProcess(pid)
	defer target.close()
	rest, _ := io.ReadAll(in) // until lockyard closes it, or dies
	if strings.HasPrefix(string(rest), "done") {
		return 0
	}
	time.Sleep(time.Duration(grace)) // the command got the --on-lost signal at lockyard's death
	target.kill()
	return 0
}

// Linux's pidfd system calls (5.3 and later; the numbers are the same on
// every architecture).
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

// process is a process to kill later: by a pidfd where the kernel has
// them, else by its pid and start time.
type process struct {
	pid, fd int
	start   string // field 22 of /proc/PID/stat
}

func watchProcess(pid int) process {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno == 0 {
		return process{pid: pid, fd: int(fd)}
	}
	return process{pid: pid, fd: -1, start: startTime(pid)}
}

func (p process) kill() {
	if p.fd >= 0 {
		_, _, _ = syscall.Syscall6(sysPidfdSendSignal, uintptr(p.fd), uintptr(syscall.SIGKILL), 0, 0, 0, 0)
		return
	}
	if st := startTime(p.pid); st != "" && st == p.start {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

func (p process) close() {
	if p.fd >= 0 {
		_ = syscall.Close(p.fd)
	}
}

// startTime returns the start time of process pid (field 22 of its stat),
// or "" if it is gone.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 { // the command name may hold spaces
		if f := strings.Fields(s[i+1:]); len(f) > 19 {
			return f[19]
		}
	}
	return ""
}

// terminalForeground reports whether lockyard's process group is the
// foreground group of its controlling terminal. A Ctrl-C there reaches
// every process of the group, the command included, so forwarding it would
// deliver it twice (and many programs take a second one as "quit now").
func terminalForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}
