package kafkatest

import (
	"os/exec"
	"syscall"
)

// DieWithParent has the kernel SIGKILL cmd's process when the process
// that starts it exits, a test binary that `go test -timeout` ends
// included: a relay or broker left running (one of them SIGSTOPped) loads
// every later run on the machine. Call it before cmd.Start. The signal
// follows the OS thread that starts cmd; Go ends a thread only when a
// goroutine locked to it returns, which the tests do not do.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
