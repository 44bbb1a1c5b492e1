package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestJITMeter reads a /proc tree of two JVMs through threads starting,
// working and ending: only compiler threads count, a new one with its
// whole time, and one that ended takes nothing back.
func TestJITMeter(t *testing.T) {
	root := t.TempDir()
	// thread writes /proc/<pid>/task/<tid>/stat with utime and stime in
	// clock ticks (10 ms).
	thread := func(pid, tid int, comm string, utime, stime int) {
		t.Helper()
		dir := filepath.Join(root, fmt.Sprint(pid), "task", fmt.Sprint(tid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194368 100 0 0 0 %d %d 0 0 20 0 40 0 123 0 0\n", tid, comm, pid, pid, utime, stime)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	end := func(pid, tid int) {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(root, fmt.Sprint(pid), "task", fmt.Sprint(tid))); err != nil {
			t.Fatal(err)
		}
	}
	thread(10, 10, "java", 500, 100)
	thread(10, 11, "C2 CompilerThre", 300, 20)
	thread(10, 12, "C1 CompilerThre", 50, 5)
	thread(10, 13, "data-plane-kafk", 900, 90) // a broker thread, not the JIT's
	thread(20, 21, "C2 CompilerThre", 100, 0)
	thread(20, 22, "kafka (log) ) x", 700, 0) // parentheses in a name

	m := newJITMeter([]int{10, 20})
	m.proc = root
	want := func(d time.Duration) {
		t.Helper()
		got, err := m.since()
		if err != nil {
			t.Fatal(err)
		}
		if got != d {
			t.Fatalf("since() = %s, want %s", got, d)
		}
	}
	want((300 + 20 + 50 + 5 + 100) * clockTick) // since the threads started

	thread(10, 11, "C2 CompilerThre", 340, 25) // +45 ticks
	thread(10, 13, "data-plane-kafk", 5000, 900)
	want(45 * clockTick)

	end(10, 11)                               // retired: nothing taken back
	thread(10, 14, "C2 CompilerThre", 7, 1)   // a new one: its whole time
	thread(20, 21, "C2 CompilerThre", 110, 2) // +12
	want((8 + 12) * clockTick)

	want(0)

	end(20, 21)                              // retired, and its id given to a new
	thread(20, 21, "C2 CompilerThre", 30, 0) // compiler thread with less time
	want(30 * clockTick)

	m.pids = append(m.pids, 99) // a JVM that is gone
	if _, err := m.since(); err == nil {
		t.Fatal("since() with a pid that has no /proc entry: no error")
	}
}
