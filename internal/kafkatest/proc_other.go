//go:build !linux

package kafkatest

import "os/exec"

// DieWithParent does nothing here: only Linux kills a child when its
// parent exits (see proc_linux.go).
func DieWithParent(*exec.Cmd) {}
