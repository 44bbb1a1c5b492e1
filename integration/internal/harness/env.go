package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// DB is the scenario's PostgreSQL schema: a pool whose connections use
// Schema as their search_path, the URL that does the same (for the ORMs and
// the relay processes), and the outbox migrated into it.
type DB = testkit.DB

// Binaries are the programs a scenario runs as child processes.
type Binaries struct {
	Outbox string // the `outbox` CLI (cmd/outbox)
	Broker string // kfakeproc (internal/kfakeproc)
}

// Build compiles the relay CLI and the broker process into dir. It runs
// `go build` without -race: the children are the system under test, not the
// race detector's subject, and a race build of them would dominate the run
// time.
func Build(ctx context.Context, dir string) (Binaries, error) {
	outbox, err := kafkatest.Build(ctx, "github.com/txoutbox/txoutbox/cmd/outbox", dir)
	if err != nil {
		return Binaries{}, err
	}
	broker, err := kafkatest.Build(ctx, kafkatest.ProcPackage, dir)
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{Outbox: outbox, Broker: broker}, nil
}

// Env is what every scenario needs: the database, the binaries, a directory
// for the broker's data and the processes' logs, a logger and a seeded
// random source, so a failing run can be repeated with the same seed.
type Env struct {
	DB   DB
	Bin  Binaries
	Dir  string
	Logf func(format string, args ...any)
	Seed uint64
	// Cluster is the PostgreSQL cluster DB lives on, when the scenario
	// has one of its own (Plan.OwnCluster): the one it may crash.
	Cluster *testkit.Cluster
	// MySQLd is the MariaDB server DB lives on, in MariaDB mode (DB is
	// then a database on it): the server a DBCrashes fault SIGKILLs.
	MySQLd *testkit.MySQLd
	// Kafka, if set, is the real Apache Kafka cluster of .ci/services
	// (kafkatest.ClusterBrokers): the scenario's broker and its faults are
	// that cluster's nodes instead of a kfakeproc child. The caller holds
	// the cluster exclusively (kafkatest.LockClusterFile).
	Kafka []string

	once sync.Once
	mu   sync.Mutex
	rng  *rand.Rand
}

// MySQL reports whether the scenario runs on MySQL/MariaDB (Env.DB is a
// database there) rather than PostgreSQL.
func (e *Env) MySQL() bool { return e.DB.Dialect() == txoutbox.MySQL }

// names are the outbox's tables in the scenario's schema, or on MySQL its
// database.
func (e *Env) names() (outboxsql.Names, error) {
	if e.MySQL() {
		return outboxsql.NamesForDialect(outboxsql.MySQL, "", "")
	}
	return outboxsql.NamesFor(e.DB.Schema, "")
}

// q renders one of the harness's statements for the database: "$1"
// placeholders become "?" on MySQL and "::text" casts go (testkit.DB.Q).
func (e *Env) q(query string) string { return e.DB.Q(query) }

// ago is the SQL expression of the database's clock d ago.
func (e *Env) ago(d time.Duration) string {
	if e.MySQL() {
		return fmt.Sprintf("UTC_TIMESTAMP(6) - INTERVAL %d MICROSECOND", d.Microseconds())
	}
	return fmt.Sprintf("now() - interval '%d microseconds'", d.Microseconds())
}

// Intn returns a random int in [0, n) from the scenario's seeded source.
func (e *Env) Intn(n int) int {
	e.once.Do(func() { e.rng = rand.New(rand.NewPCG(e.Seed, e.Seed^0x9e3779b97f4a7c15)) })
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rng.IntN(n)
}

// Duration returns a random duration in [lo, hi).
func (e *Env) Duration(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(e.Intn(int(hi-lo)))
}

// logFile opens a log file for a child process in the scenario directory.
func (e *Env) logFile(name string) (*os.File, error) {
	return os.OpenFile(filepath.Join(e.Dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
