package main

import (
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// burnEnv makes the test binary a child that burns CPU for the duration it
// names and exits (see TestClusterCPUKeepsReapedChildren).
const burnEnv = "BENCH_TEST_BURN"

func TestMain(m *testing.M) {
	if d, err := time.ParseDuration(os.Getenv(burnEnv)); err == nil {
		for end := time.Now().Add(d); time.Now().Before(end); {
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestClusterCPUKeepsReapedChildren reads the CPU of this process and its
// children, as clusterCPU reads a postmaster's, while children burn CPU,
// exit and are reaped all the time. A process tree's CPU time only grows,
// so no reading may come out below the one before: a child reaped while
// the children were listed, left out of both parts, would make it drop by
// that child's time.
func TestClusterCPUKeepsReapedChildren(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cmd := exec.Command(self, "-test.run=^$")
				cmd.Env = append(os.Environ(), burnEnv+"=30ms")
				if err := cmd.Run(); err != nil { // Run waits: the child is reaped here
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	prev, err := clusterCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		cur, err := clusterCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if cur < prev {
			t.Fatalf("the process tree's CPU went down from %s to %s between two readings", prev, cur)
		}
		prev = cur
	}
}

// TestChildPIDs finds a child started from any of the process's threads.
func TestChildPIDs(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), burnEnv+"=300ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait() //nolint:errcheck // the child only burns CPU
	pids, err := childPIDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !pids[cmd.Process.Pid] {
		t.Errorf("child %d not among %v", cmd.Process.Pid, pids)
	}
}
