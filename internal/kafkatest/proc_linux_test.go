package kafkatest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A child started with DieWithParent is gone once the process that
// started it exits: here a copy of the test binary that starts `sleep`
// and exits at once, as a test binary ended by -timeout does.
func TestDieWithParentKillsTheChildWhenTheParentExits(t *testing.T) {
	if os.Getenv("TESTKIT_DIE_WITH_PARENT") == "1" {
		cmd := exec.Command("sleep", "60")
		DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("child", cmd.Process.Pid)
		os.Exit(0) // without waiting for it
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestDieWithParentKillsTheChildWhenTheParentExits$")
	parent.Env = append(os.Environ(), "TESTKIT_DIE_WITH_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "child "); ok {
			if pid, err = strconv.Atoi(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := parent.Wait(); err != nil || pid == 0 {
		t.Fatalf("parent: %v, child pid %d", err, pid)
	}
	// The orphan is reparented to init (or a subreaper), which reaps it.
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil && !zombie(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d still running 5s after its parent exited", pid)
		}
	}
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}
