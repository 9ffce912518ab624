package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"
)

// onParentDeath asks the kernel to send sig to the command if lockyard
// dies first, even by SIGKILL: nothing renews the lock any more, so the
// command must not go on as if it held it. The signal is tied to the OS
// thread that forks, so the caller stays on it until the command ends:
// release undoes that.
func onParentDeath(cmd *exec.Cmd, sig os.Signal) (release func()) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return func() {}
	}
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: s}
	return runtime.UnlockOSThread
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
