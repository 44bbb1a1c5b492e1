package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 for user space whatever the kernel's HZ.
const clockTick = 10 * time.Millisecond

// cost is what a drain cost per event: CPU of the process that moved the
// events (this one), of the database server (PostgreSQL, or mysqld) and
// of the broker, and the WAL PostgreSQL wrote. A figure that could not be
// read is absent.
type cost struct {
	RelayUS  *float64 `json:"relay_cpu_us_per_event,omitempty"`
	PGUS     *float64 `json:"pg_cpu_us_per_event,omitempty"`
	MySQLdUS *float64 `json:"mysqld_cpu_us_per_event,omitempty"`
	BrokerUS *float64 `json:"broker_cpu_us_per_event,omitempty"`
	TotalUS  *float64 `json:"total_cpu_us_per_event,omitempty"`
	WALBytes *float64 `json:"wal_bytes_per_event,omitempty"`
	// Statements are the database's statements of the drain (-statements).
	Statements []stmtStat `json:"statements,omitempty"`
	// PGParts is PostgreSQL's CPU per event by kind of process (-statements).
	PGParts map[string]float64 `json:"pg_parts_us_per_event,omitempty"`
	// MySQLdStatus is mysqld's counters per event (mysqldStatusSQL),
	// server-wide.
	MySQLdStatus map[string]float64 `json:"mysqld_status_per_event,omitempty"`
}

// procStat is the part of /proc/<pid>/stat (or a thread's
// /proc/<pid>/task/<tid>/stat) the meters read.
type procStat struct {
	comm                        string // the command name, 15 bytes at most
	state                       byte   // R, S, Z (exited, not reaped), X (being reaped), ...
	ppid                        int
	utime, stime, cutime, cstim time.Duration
}

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	name := "/proc/" + strconv.Itoa(pid) + "/stat"
	b, err := os.ReadFile(name)
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(name, b)
}

// parseProcStat parses a stat line read from the file name. The command
// name (field 2) is in parentheses and may hold spaces and parentheses, so
// the fields are counted from the last closing parenthesis: state (3),
// ppid, ..., utime (14), stime, cutime, cstime.
func parseProcStat(name string, b []byte) (procStat, error) {
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return procStat{}, fmt.Errorf("%s: no command name", name)
	}
	f := strings.Fields(string(b[j+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("%s: %d fields after the command name", name, len(f))
	}
	var v [5]int64
	for k, idx := range []int{1, 11, 12, 13, 14} {
		var err error
		if v[k], err = strconv.ParseInt(f[idx], 10, 64); err != nil {
			return procStat{}, fmt.Errorf("%s field %d: %w", name, idx+3, err)
		}
	}
	t := func(ticks int64) time.Duration { return time.Duration(ticks) * clockTick }
	return procStat{comm: string(b[i+1 : j]), state: f[0][0], ppid: int(v[0]),
		utime: t(v[1]), stime: t(v[2]), cutime: t(v[3]), cstim: t(v[4])}, nil
}

// processCPU is the CPU time pid has used so far.
// processesCPU is processCPU summed over pids: the three nodes of the real
// cluster.
func processesCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		cpu, err := processCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += cpu
	}
	return sum, nil
}

func processCPU(pid int) (time.Duration, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return st.utime + st.stime, nil
}

// clusterCPU is the CPU time a PostgreSQL cluster has used so far: the
// postmaster's own, that of every live child (backends and auxiliary
// processes: checkpointer, walwriter, autovacuum workers, ...) with that of
// the children they reaped (a backend's COPY ... PROGRAM, the archiver's
// archive_command), and that of its children that exited, which the kernel
// adds to the postmaster's cutime and cstime when it reaps them. The
// difference of two readings is then exact whatever connections opened or
// closed in between.
//
// A child reaped while the children are listed would be in neither part:
// its time joins the postmaster's cutime after that was read, and its /proc
// entry is gone when the listing gets to it. The relays close their
// connections as they stop, just before a drain's second reading: one
// relay drain came out at 8.9 µs per event that way, against 15.5 to 22
// for the four others of its run. So a reading counts only if the
// postmaster's children's times were the same before the listing and
// after it (no child was reaped in between) and no child was in the midst
// of being reaped (state X: the kernel has added its times to the
// postmaster's but not yet taken it off the list, so it would count twice);
// it is taken again otherwise, up to clusterReadings times.
func clusterCPU(postmaster int) (time.Duration, error) {
	for range clusterReadings {
		before, err := readProcStat(postmaster)
		if err != nil {
			return 0, err
		}
		children, settled, err := childrenCPU(postmaster)
		if err != nil {
			return 0, err
		}
		after, err := readProcStat(postmaster)
		if err != nil {
			return 0, err
		}
		if reaped := after.cutime + after.cstim; settled && reaped == before.cutime+before.cstim {
			return after.utime + after.stime + reaped + children, nil
		}
	}
	return 0, fmt.Errorf("postmaster %d reaped a child during each of %d readings of its processes' CPU", postmaster, clusterReadings)
}

// clusterReadings bounds clusterCPU's attempts at a reading no reaped
// child falls out of. A drain's end closes a few connections at most, so a
// second reading nearly always does.
const clusterReadings = 20

// childrenCPU sums the CPU time of parent's child processes and of the
// children they reaped, live ones and those that exited and wait to be
// reaped (zombies keep their times). settled is false if a child was being
// reaped (see clusterCPU). It reads the children's list of each of
// parent's threads where the kernel keeps one (CONFIG_PROC_CHILDREN),
// which keeps clusterCPU's window short, and walks /proc otherwise.
func childrenCPU(parent int) (total time.Duration, settled bool, err error) {
	pids, err := childPIDs(parent)
	if err != nil {
		return 0, false, err
	}
	for pid := range pids {
		st, err := readProcStat(pid)
		if err != nil || st.ppid != parent {
			continue // gone since the listing, or not parent's
		}
		if st.state == 'X' {
			return 0, false, nil
		}
		total += st.utime + st.stime + st.cutime + st.cstim
	}
	return total, true, nil
}

// childPIDs lists parent's child processes, and where the kernel keeps no
// list of them, every process (childrenCPU checks the parent). It is a set:
// when a thread ends, the kernel moves its children to another thread's
// list, so one may show up on two.
func childPIDs(parent int) (map[int]bool, error) {
	dir := "/proc/" + strconv.Itoa(parent) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pids := map[int]bool{}
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/" + task.Name() + "/children")
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(dir + "/" + task.Name()); serr == nil {
				return allPIDs() // the thread is there, its list is not
			}
			continue // the thread ended
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids[pid] = true
			}
		}
	}
	return pids, nil
}

// allPIDs lists every process.
func allPIDs() (map[int]bool, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	pids := map[int]bool{}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids[pid] = true
		}
	}
	return pids, nil
}

// postmasterPID finds the postmaster of db's server on this host: the
// parent of the backend serving the query. It returns 0 when that backend
// is not a process here (a server on another host or in another PID
// namespace).
func postmasterPID(ctx context.Context, db *sql.DB) (int, error) {
	var backend int
	if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0, fmt.Errorf("backend pid: %w", err)
	}
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(backend) + "/cmdline")
	if err != nil || !bytes.HasPrefix(cmd, []byte("postgres:")) {
		return 0, nil
	}
	st, err := readProcStat(backend)
	if err != nil {
		return 0, nil
	}
	return st.ppid, nil
}

// meter reads the CPU and WAL counters around a drain.
type meter struct {
	db                    *sql.DB
	broker                []int // the broker's processes (none: not measurable here)
	postmaster            int   // 0: not measurable here
	mysqld                int   // 0: not measurable here, or PostgreSQL's run
	mysqld0               time.Duration
	mysqldOK              bool
	status0               map[string]int64 // mysqld's counters at the start
	self                  int
	wal0                  string
	pg0, broker0, self0   time.Duration
	pgOK, brokerOK, walOK bool
	excluded              map[int]time.Duration // server processes left out: CPU at the start
	statements            bool                  // read pg_stat_statements at stop
	parts0                *pgParts
}

// exclude leaves the server process pid (the backend of the harness's own
// connection, see poller) out of the PostgreSQL CPU from now to stop.
func (m *meter) exclude(pid int) *meter {
	if !m.pgOK {
		return m // the server's processes are not visible here
	}
	if cpu, err := processCPU(pid); err == nil {
		if m.excluded == nil {
			m.excluded = map[int]time.Duration{}
		}
		m.excluded[pid] = cpu
	} else {
		logf("backend %d not left out of the PostgreSQL CPU: %v", pid, err)
	}
	return m
}

// startMeter takes the first readings, the PostgreSQL and broker ones before
// this process's own, so reading /proc is not counted as the relay's work.
// A counter that cannot be read is left out of the cost, with a log line.
func (e *env) startMeter(ctx context.Context, db *sql.DB) *meter {
	m := &meter{db: db, broker: e.brokerPids, postmaster: e.postmaster, mysqld: e.mysqld, self: os.Getpid()}
	if e.mysql {
		var err error
		if m.status0, err = mysqldStatus(ctx, db); err != nil {
			logf("%v", err)
		}
		// mysqld's threads, live and ended, are one process's CPU: one
		// reading of /proc/<pid>/stat has them all.
		if m.mysqld != 0 {
			if m.mysqld0, err = processCPU(m.mysqld); err == nil {
				m.mysqldOK = true
			} else {
				logf("mysqld CPU not measured: %v", err)
			}
		}
		m.readBroker()
		m.self0, _ = m.relayCPU()
		return m
	}
	if e.opts.statements {
		if err := statementsReset(ctx, db); err != nil {
			logf("%v", err)
		} else {
			m.statements = true
		}
		if e.postmaster != 0 {
			if p, err := readPGParts(e.postmaster); err == nil {
				m.parts0 = &p
			}
		}
	}
	if err := db.QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&m.wal0); err != nil {
		logf("WAL not measured: %v", err)
	} else {
		m.walOK = true
	}
	if m.postmaster != 0 {
		var err error
		if m.pg0, err = clusterCPU(m.postmaster); err == nil {
			m.pgOK = true
		} else {
			logf("PostgreSQL CPU not measured: %v", err)
		}
	}
	m.readBroker()
	m.self0, _ = m.relayCPU()
	return m
}

// readBroker takes the broker's first reading.
func (m *meter) readBroker() {
	if len(m.broker) == 0 {
		return
	}
	var err error
	if m.broker0, err = processesCPU(m.broker); err == nil {
		m.brokerOK = true
	} else {
		logf("broker CPU not measured: %v", err)
	}
}

// relayPID makes the relay's CPU that of process pid (a relay in its own
// process, Debezium's JVM) instead of this process's.
func (m *meter) relayPID(pid int) *meter {
	m.self = pid
	m.self0, _ = m.relayCPU()
	return m
}

func (m *meter) relayCPU() (time.Duration, error) { return processCPU(m.self) }

// stop takes the second readings and divides the differences by events.
func (m *meter) stop(ctx context.Context, events int) *cost {
	self1, selfErr := m.relayCPU()
	per := func(d time.Duration) *float64 {
		v := float64(d.Microseconds()) / float64(events)
		return &v
	}
	c := &cost{}
	var total time.Duration
	parts := 0
	if selfErr == nil {
		c.RelayUS = per(self1 - m.self0)
		total += self1 - m.self0
		parts++
	}
	if m.brokerOK {
		if b1, err := processesCPU(m.broker); err == nil {
			c.BrokerUS = per(b1 - m.broker0)
			total += b1 - m.broker0
			parts++
		} else {
			logf("broker CPU not measured: %v", err)
		}
	}
	if m.mysqldOK {
		if d1, err := processCPU(m.mysqld); err == nil {
			c.MySQLdUS = per(d1 - m.mysqld0)
			total += d1 - m.mysqld0
			parts++
		} else {
			logf("mysqld CPU not measured: %v", err)
		}
	}
	if m.pgOK {
		if p1, err := clusterCPU(m.postmaster); err == nil {
			for pid, cpu0 := range m.excluded {
				if cpu1, err := processCPU(pid); err == nil {
					p1 -= cpu1 - cpu0
				} else {
					logf("backend %d not left out of the PostgreSQL CPU: %v", pid, err)
				}
			}
			c.PGUS = per(p1 - m.pg0)
			total += p1 - m.pg0
			parts++
		} else {
			logf("PostgreSQL CPU not measured: %v", err)
		}
	}
	if parts == 3 {
		c.TotalUS = per(total)
	}
	if m.status0 != nil {
		if st, err := mysqldStatus(ctx, m.db); err == nil {
			c.MySQLdStatus = statusPerEvent(m.status0, st, events)
		} else {
			logf("%v", err)
		}
	}
	if m.statements {
		var err error
		if c.Statements, err = statementsRead(ctx, m.db); err != nil {
			logf("%v", err)
		}
		if m.parts0 != nil {
			if p, err := readPGParts(m.postmaster); err == nil {
				c.PGParts = pgPartsPerEvent(*m.parts0, p, events)
			}
		}
	}
	if m.walOK {
		var bytes float64
		if err := m.db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8`, m.wal0).Scan(&bytes); err != nil {
			logf("WAL not measured: %v", err)
		} else {
			v := bytes / float64(events)
			c.WALBytes = &v
		}
	}
	return c
}

// idleCluster reports how much CPU the PostgreSQL cluster used per second
// while the bench did nothing: other sessions on a shared server, which
// every PostgreSQL figure of the run then includes.
func (e *env) idleCluster(d time.Duration) (float64, error) {
	if e.postmaster == 0 {
		return 0, fmt.Errorf("PostgreSQL is not on this host")
	}
	return idleCPU(d, func() (time.Duration, error) { return clusterCPU(e.postmaster) })
}

// idleCPU is the CPU per second, in µs, that cpu (a server's total)
// grew by over d.
func idleCPU(d time.Duration, cpu func() (time.Duration, error)) (float64, error) {
	a, err := cpu()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	b, err := cpu()
	if err != nil {
		return 0, err
	}
	return float64((b - a).Microseconds()) / d.Seconds(), nil
}
