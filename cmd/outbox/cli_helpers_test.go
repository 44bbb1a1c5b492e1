package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// testProcess is the process of one run: only the variables of env are
// set, whatever the test process's environment holds, and the output goes
// to stdout and stderr.
func testProcess(env map[string]string, stdout, stderr io.Writer) *process {
	return &process{lookupEnv: mapEnv(env), stdout: stdout, stderr: stderr}
}

// mapEnv is an environment for one run: only these variables are set.
func mapEnv(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// outboxEnv runs the CLI to completion in the environment env (and nothing
// of the test process's).
func outboxEnv(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	// Locked: goroutines of a failed Kafka client may still log after run.
	var stdout, stderr testkit.SyncBuffer
	code := run(context.Background(), testProcess(env, &stdout, &stderr), args)
	return code, stdout.String(), stderr.String()
}

// background is a command running until the test stops it.
type background struct {
	stdout, stderr *testkit.SyncBuffer
	cancel         context.CancelFunc
	done           chan int
}

// startOutbox runs the CLI in env until stop is called or the test ends.
func startOutbox(t *testing.T, env map[string]string, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{stdout: &testkit.SyncBuffer{}, stderr: &testkit.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		b.done <- run(ctx, testProcess(env, b.stdout, b.stderr), args)
	}()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// stop ends the command as SIGTERM does and returns its exit code.
func (b *background) stop(t *testing.T) int {
	t.Helper()
	b.cancel()
	select {
	case code := <-b.done:
		b.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("command did not stop within 30s; stderr:\n%s", b.stderr)
		return -1
	}
}

// usageCase is a command line the CLI must refuse as bad usage (exit 2),
// with a message mentioning msg.
type usageCase struct {
	args []string
	msg  string
}

// wantUsageErrors runs every case with run (outbox, or an opsEnv's run)
// and wants exit 2 and the case's message on stderr.
func wantUsageErrors(t *testing.T, run func(*testing.T, ...string) (int, string, string), cases []usageCase) {
	t.Helper()
	for _, tc := range cases {
		code, _, errOut := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("outbox %v = exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.msg)
		}
	}
}

// wantCleanStop stops the command as SIGTERM does and wants exit 0.
func (b *background) wantCleanStop(t *testing.T) {
	t.Helper()
	if code := b.stop(t); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0; stderr:\n%s", code, b.stderr)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, timeout, what, cond)
}

// waitOutput waits until the command printed want on stdout or stderr.
func (b *background) waitOutput(t *testing.T, want string) {
	t.Helper()
	waitFor(t, 20*time.Second, "output "+want, func() bool {
		return strings.Contains(b.stdout.String(), want) || strings.Contains(b.stderr.String(), want)
	})
}

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
