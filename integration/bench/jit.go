package main

import (
	"bytes"
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
			b, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // the thread ended since the listing
			}
			if err != nil {
				return 0, err
			}
			if !isCompilerThread(b) {
				continue
			}
			cpu, err := statCPU(b)
			if err != nil {
				return 0, err
			}
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

// isCompilerThread reports whether a /proc/<pid>/task/<tid>/stat line is
// that of a HotSpot JIT compiler thread.
func isCompilerThread(stat []byte) bool {
	i, j := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if i < 0 || j < i {
		return false
	}
	comm := string(stat[i+1 : j])
	return strings.HasPrefix(comm, "C1 CompilerThre") || strings.HasPrefix(comm, "C2 CompilerThre")
}

// statCPU is utime + stime of a /proc stat line, fields 14 and 15 counted
// from the last closing parenthesis, as readProcStat counts them.
func statCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat line")
	}
	var ticks int64
	for _, idx := range []int{11, 12} {
		v, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}
