package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// memory is the result of the memory scenario.
type memory struct {
	Scenario string  `json:"scenario"`
	Events   int     `json:"events"`
	Seconds  float64 `json:"seconds"`
	EPS      float64 `json:"eps"`
	PeakMiB  float64 `json:"relay_rss_mib"`
	Command  string  `json:"command"`
}

// runMemory drains a large backlog with the relay in its own process (the
// outbox CLI, built from this module, with default settings) and reads its
// peak resident set size (VmHWM) from /proc just before stopping it.
func runMemory(ctx context.Context, e *env, outboxBin string) (memory, error) {
	s, err := e.newSchema(ctx, "memory")
	if err != nil {
		return memory{}, err
	}
	defer s.close()
	n := e.opts.memoryEvents
	topic, err := e.topic(ctx, "bench.memory")
	if err != nil {
		return memory{}, err
	}
	if err := insertBacklog(ctx, s, topic, n, e.opts.aggregates, "pending", 0); err != nil {
		return memory{}, err
	}
	args := []string{"relay", "--database-url", s.URL, "--schema", s.Schema, "--brokers", strings.Join(e.brokers, ","), "--log-level", "warn", "--retention", "-1s",
		"--kafka-compression", e.opts.compression.String()}
	cmd := exec.Command(outboxBin, args...)
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return memory{}, fmt.Errorf("start relay process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	end, err := waitDrained(ctx, s, e.opts.timeout)
	if err != nil {
		stop()
		return memory{}, fmt.Errorf("memory: %w", err)
	}
	peak, err := vmHWM(cmd.Process.Pid)
	stop()
	if err != nil {
		return memory{}, err
	}
	took := end.Sub(start)
	return memory{Scenario: "memory", Events: n, Seconds: took.Seconds(), EPS: float64(n) / took.Seconds(),
		PeakMiB: float64(peak) / 1024, Command: "outbox " + strings.Join(redactURL(args), " ")}, nil
}

// vmHWM reads a process's peak resident set size in KiB.
func vmHWM(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read relay RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0, fmt.Errorf("parse VmHWM %q: %w", v, err)
			}
			return kib, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// redactURL replaces the database URL argument, which may carry a password.
func redactURL(args []string) []string {
	out := slices.Clone(args)
	for i := range out {
		if i > 0 && out[i-1] == "--database-url" {
			out[i] = "$DATABASE_URL"
		}
	}
	return out
}
