package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
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
