package main

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// jitMeter reads the CPU a set of JVMs' JIT compiler threads have used.
// HotSpot names them "C2 CompilerThreadN" and "C1 CompilerThreadN", which
// /proc/<pid>/task/<tid>/comm truncates to 15 bytes ("C2 CompilerThre").
// It starts and retires compiler threads as the compile queue grows and
// drains (-XX:+UseDynamicNumberOfCompilerThreads, on by default), so a sum
// over the threads alive now would drop when one ends: the meter keeps
// each thread's last reading and adds only what a thread used since, a
// new thread's whole time. What a thread used between its last reading
// and its end is missed; threads retire after idling, so that is little.
type jitMeter struct {
	proc string // "/proc"; a tree of the same shape in tests
	pids []int
	seen map[string]time.Duration // "pid/tid": CPU at the last reading
}

func newJITMeter(pids []int) *jitMeter {
	return &jitMeter{proc: "/proc", pids: pids, seen: map[string]time.Duration{}}
}

// since is the CPU the compiler threads have used since the last call
// (since the threads started, on the first).
func (m *jitMeter) since() (time.Duration, error) {
	var sum time.Duration
	for _, pid := range m.pids {
		dir := m.proc + "/" + strconv.Itoa(pid) + "/task"
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return 0, err
		}
		for _, task := range tasks {
			name := dir + "/" + task.Name() + "/stat"
			b, err := os.ReadFile(name)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // the thread ended since the listing
			}
			if err != nil {
				return 0, err
			}
			st, err := parseProcStat(name, b)
			if err != nil {
				return 0, err
			}
			if !strings.HasPrefix(st.comm, "C1 CompilerThre") && !strings.HasPrefix(st.comm, "C2 CompilerThre") {
				continue
			}
			cpu := st.utime + st.stime
			key := strconv.Itoa(pid) + "/" + task.Name()
			if last, ok := m.seen[key]; ok && cpu >= last {
				sum += cpu - last
			} else { // new, or a thread id the kernel gave out again
				sum += cpu
			}
			m.seen[key] = cpu
		}
	}
	return sum, nil
}
