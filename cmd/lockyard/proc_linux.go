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
// on as if it held it. With --on-lost none it does nothing, as it never
// signals the command.
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
	ack    *os.File // the reaper's stdout: "ok" once it watches the command
}

// onParentDeath sets the command's parent-death signal and starts the
// reaper, before the command starts: its pid is written to the reaper as
// soon as the command runs (started), so that lockyard dying in between
// leaves a window of microseconds, not a process start-up. If the reaper
// cannot start, the command keeps only its parent-death signal (logged).
func onParentDeath(cmd *exec.Cmd, sig os.Signal, grace time.Duration, log *slog.Logger) *parentDeath {
	g := &parentDeath{grace: grace, log: log}
	s, ok := sig.(syscall.Signal)
	if !ok {
		return g // --on-lost none
	}
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: s}
	g.unlock = runtime.UnlockOSThread
	exe, err := os.Executable()
	if err != nil {
		log.Warn("lockyard: no reaper for the command if lockyard dies", "err", err)
		return g
	}
	ack, out, err := os.Pipe()
	if err != nil {
		log.Warn("lockyard: no reaper for the command if lockyard dies", "err", err)
		return g
	}
	defer out.Close()
	// The reaper has no stderr: a caller that reads lockyard's output
	// ($(...), a CI log) must not wait for it.
	r := exec.Command(exe, "__reap")
	r.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a Ctrl-C or a kill of lockyard's group does not reach it
	r.Stdout = out
	in, err := r.StdinPipe()
	if err == nil {
		err = r.Start()
	}
	if err != nil {
		ack.Close()
		log.Warn("lockyard: no reaper for the command if lockyard dies", "err", err)
		return g
	}
	g.reaper, g.pipe, g.ack = r, in, ack
	return g
}

// reaperAck bounds the wait for the reaper to watch the command.
const reaperAck = 2 * time.Second

// started tells the reaper the command's pid, and waits until the reaper
// watches it: the caller reaps the command only afterwards, so that its
// pid cannot be reused by another process before the reaper has a pidfd
// of it.
func (g *parentDeath) started(pid int) {
	if g.pipe == nil {
		return
	}
	fmt.Fprintf(g.pipe, "%d %d\n", pid, int64(g.grace))
	_ = g.ack.SetReadDeadline(time.Now().Add(reaperAck))
	var b [3]byte
	if n, err := io.ReadFull(g.ack, b[:]); err != nil || string(b[:n]) != "ok\n" {
		g.log.Warn("lockyard: the reaper did not answer; it may not guard the command", "err", err)
	}
}

// done tells the reaper that the command ended, and waits for it.
func (g *parentDeath) done() {
	if g.pipe != nil {
		_, _ = io.WriteString(g.pipe, "done\n")
		_ = g.pipe.Close()
		_ = g.reaper.Wait()
		_ = g.ack.Close()
	}
	if g.unlock != nil {
		g.unlock()
	}
}

// cmdReap is `lockyard __reap`: it reads "PID GRACE" on stdin, answers
// "ok" on stdout once it watches the process, then waits for stdin to
// close. After "done", it exits; otherwise lockyard died, and it sends the
// process PID SIGKILL if it still runs GRACE later (a pidfd makes sure it
// is the same process, not one that reused its pid); it exits as soon as
// the process is gone. A stdin that closes before a pid (the command did
// not start, or lockyard died first) ends it.
func cmdReap() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	in := bufio.NewReader(os.Stdin)
	var pid int
	var grace int64
	if _, err := fmt.Fscanf(in, "%d %d\n", &pid, &grace); err != nil {
		return 0
	}
	target := watchProcess(pid)
	defer target.close()
	_, _ = io.WriteString(os.Stdout, "ok\n")
	_ = os.Stdout.Close()
	rest, _ := io.ReadAll(in) // until lockyard closes it, or dies
	if strings.HasPrefix(string(rest), "done") {
		return 0
	}
	// The command got the --on-lost signal at lockyard's death.
	if !target.exitsWithin(time.Duration(grace)) {
		target.kill()
	}
	return 0
}

// Linux's pidfd system calls (5.3 and later), by their numbers in the
// unified table. On mips, whose numbers differ, these are no system calls:
// ENOSYS, and the /proc fallback.
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

// exitsWithin waits up to d for the process to end, and reports whether
// it has. A pidfd becomes readable when its process ends; without one, it
// looks at /proc every 20ms.
func (p process) exitsWithin(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		if p.fd < 0 {
			if st := startTime(p.pid); st == "" || st != p.start {
				return true
			}
			time.Sleep(min(left, 20*time.Millisecond))
			continue
		}
		pfd := struct {
			fd              int32
			events, revents int16
		}{fd: int32(p.fd), events: 0x1} // POLLIN
		ts := syscall.NsecToTimespec(int64(left))
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch {
		case errno == syscall.EINTR:
		case errno != 0:
			time.Sleep(left) // cannot wait on it: wait out the grace
			return false
		case n > 0:
			return true
		}
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
