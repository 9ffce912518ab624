package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY returns the master and the slave of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no /dev/ptmx: this machine has no pseudo-terminals") // the only skip: no Redis involved
	}
	if err != nil {
		t.Fatalf("a pseudo-terminal: %v", err)
	}
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("ptsname: %v", e)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("the terminal's slave: %v", err)
	}
	return master, slave
}

// Ctrl-C (and Ctrl-\) in a terminal reaches every process of the
// foreground group: the command gets it from the terminal, and run does
// not send it a second time (a second SIGINT means "quit now" to many
// programs). SIGTERM, which no terminal sends, is still forwarded.
func TestRunCtrlCInTerminal(t *testing.T) {
	master, slave := openPTY(t)
	defer master.Close()
	quits := filepath.Join(t.TempDir(), "quits")
	cmd, f := startTrapped(t, 7, fmt.Sprintf("trap 'echo QUIT >> %q' QUIT", quits), func(cmd *exec.Cmd) {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}, "run", "-v", newKey(t))
	slave.Close()
	var out bytes.Buffer
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(&out, master) // until EIO, when the last slave closes
	}()

	if _, err := master.Write([]byte{3}); err != nil { // ^C, the terminal's VINTR
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the command's SIGINT trap", func() bool { return fileExists(f.ints) })
	if _, err := master.Write([]byte{0x1c}); err != nil { // ^\, the terminal's VQUIT
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the command's SIGQUIT trap", func() bool { return fileExists(quits) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	<-drained
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("lockyard run: %v, want exit 7 (the command's TERM trap)\n%s", err, out.String())
	}
	log := out.String()
	if strings.Contains(log, `signal forwarded" signal=interrupt`) || !strings.Contains(log, "not forwarded") {
		t.Fatalf("the terminal's SIGINT was forwarded as well:\n%s", log)
	}
	if strings.Contains(log, `signal forwarded" signal=quit`) || !strings.Contains(log, `not forwarded" signal=quit`) {
		t.Fatalf("the terminal's SIGQUIT was forwarded as well:\n%s", log)
	}
	if !strings.Contains(log, `signal forwarded" signal=terminated`) {
		t.Fatalf("SIGTERM was not forwarded:\n%s", log)
	}
}

// Without a controlling terminal (cron, systemd, a script in the
// background) SIGINT to run is forwarded like SIGTERM.
func TestRunForwardsSIGINTWithoutTerminal(t *testing.T) {
	cmd, f := startTrapped(t, 7, "", func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // a session of its own, without a terminal
	}, "run", newKey(t))
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the forwarded SIGINT", func() bool { return fileExists(f.ints) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("lockyard run: %v, want exit 7", err)
	}
}
