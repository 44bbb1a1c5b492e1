package main

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/mysqldsn"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The databases -db names.
const (
	dbPostgres = "postgres"
	dbMariaDB  = "mariadb"
)

// mariaDBScenarios are the scenarios -db mariadb runs, where the profile
// has them. The others are left out: wal, debezium and river are
// PostgreSQL's (its write-ahead log, River's driver), idle's relay groups
// over 100 tables and prune's partitioned outbox do not run on MySQL,
// write measures NOTIFY, and claim, memory, large and steady are not
// ported yet.
var mariaDBScenarios = []string{"relay", "relay3", "plain", "naive", "forwarder", "dblimit", "kafkalimit", "latency"}

// defaultDatabaseURL is -database-url's default for db.
func defaultDatabaseURL(db string) string {
	if db == dbMariaDB {
		return cmp.Or(os.Getenv("MYSQL_URL"), testkit.MySQLURLDefault)
	}
	return cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
}

// validateMariaDB refuses the flags that have no meaning on MariaDB.
func (o options) validateMariaDB() error {
	for _, f := range []struct {
		set  bool
		name string
		why  string
	}{
		{o.ownCluster, "own-cluster", "it creates a PostgreSQL cluster"},
		{o.statements, "statements", "it reads PostgreSQL's pg_stat_statements"},
		{o.sqlStats, "sql-stats", "its recording pool is pgx's"},
		{o.partitionSize > 0, "partition-size", "a MySQL outbox is not partitioned"},
		{o.scheduled > 0, "scheduled", "not ported to MariaDB"},
		{o.claimBackoff > 0, "claim-backoff", "the claim scenario is not ported to MariaDB"},
	} {
		if !f.set {
			continue
		}
		if _, ok := o.profile.flags[f.name]; ok {
			return fmt.Errorf("-%s with -db mariadb: %s (-profile %s sets it: pick another profile)", f.name, f.why, o.profile.name)
		}
		return fmt.Errorf("-%s with -db mariadb: %s", f.name, f.why)
	}
	if !strings.HasPrefix(o.databaseURL, "mysql://") && !strings.HasPrefix(o.databaseURL, "mariadb://") {
		return fmt.Errorf("-db mariadb takes a mysql:// -database-url, got %s", redactedURL(o.databaseURL))
	}
	if len(o.leftOutOnMariaDB()) == len(o.profile.scenarios) {
		return fmt.Errorf("-profile %s with -db mariadb leaves no scenario to run: %s do not run on MariaDB (%s do)",
			o.profile.name, strings.Join(o.leftOutOnMariaDB(), ","), strings.Join(mariaDBScenarios, ","))
	}
	return nil
}

// redactedURL is u without its password, for a message.
func redactedURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "an unparsable URL"
	}
	return p.Redacted()
}

// leftOutOnMariaDB lists the profile's scenarios -db mariadb does not run.
func (o options) leftOutOnMariaDB() []string {
	var out []string
	for _, name := range o.profile.scenarios {
		if !slices.Contains(mariaDBScenarios, name) {
			out = append(out, name)
		}
	}
	return out
}

// newMySQLSchema creates a database of the scenario's own on the server
// (a schema is a database in MySQL) and migrates the outbox into it.
func (e *env) newMySQLSchema(ctx context.Context, scenario string) (*schemaDB, error) {
	db, drop, err := testkit.CreateMySQLDatabase(ctx, e.dbURL, testkit.SchemaName("bench_"+scenario), true)
	if err != nil {
		return nil, err
	}
	s := &schemaDB{SQL: db.SQL, URL: db.URL, DSN: db.DSN(), Schema: db.Schema, Table: db.Table(), drop: drop, mysql: true}
	s.SQL.SetMaxIdleConns(24) // as newSchema's
	if s.Names, err = outboxsql.MySQLNamesFor("", ""); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// mysqlBacklogPerTx is how many events one transaction of
// insertMySQLBacklog writes.
const mysqlBacklogPerTx = 10_000

// insertMySQLBacklog writes n events for topic over aggregates, numbered
// from first, through txoutbox.Writer (multi-row inserts of up to
// outboxsql.MySQLMaxRowsPerStatement), the same events insertBacklogSQL
// writes on PostgreSQL, and analyzes the table.
func insertMySQLBacklog(ctx context.Context, s *schemaDB, topic string, n, aggregates, first int) error {
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: s.Table, Dialect: txoutbox.MySQL})
	if err != nil {
		return err
	}
	events := make([]txoutbox.Event, 0, min(n, mysqlBacklogPerTx))
	for done := 0; done < n; done += mysqlBacklogPerTx {
		events = events[:0]
		for i := first + done; i < first+min(done+mysqlBacklogPerTx, n); i++ {
			events = append(events, benchEvent(topic, i, aggregates))
		}
		if err := inTx(ctx, s.SQL, nil, func(tx *sql.Tx) error { return w.Write(ctx, tx, events...) }); err != nil {
			return fmt.Errorf("write backlog of %d events: %w", n, err)
		}
	}
	return analyzeMySQL(ctx, s.SQL, s.Names.Table)
}

// analyzeMySQL refreshes table's index statistics after a backlog was
// written, as VACUUM ANALYZE does on PostgreSQL.
func analyzeMySQL(ctx context.Context, db *sql.DB, table string) error {
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
		return fmt.Errorf("analyze backlog: %w", err)
	}
	return nil
}

// inTx runs fn in a transaction of db and commits it.
func inTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// readCommitted is the isolation of the MySQL loops' claims, as of the
// relay's: a locking read takes no gap locks under it.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// claimLocked is claimSorted on MySQL, which has no UPDATE ... RETURNING:
// in one short READ COMMITTED transaction, selectSQL (a locking read with
// the batch as its one argument, in id order) and then update with the ids
// it returned (see inList).
func claimLocked[T any](ctx context.Context, s *schemaDB, selectSQL, update string, batch int, scan func(*sql.Rows) (T, error), id func(T) int64) ([]T, error) {
	var out []T
	err := inTx(ctx, s.SQL, readCommitted, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, selectSQL, batch)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		ids := make([]int64, len(out))
		for i, r := range out {
			ids[i] = id(r)
		}
		q, args := inList(update, ids)
		_, err = tx.ExecContext(ctx, q, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

// inList renders a statement ending in "IN" with a list of one
// placeholder per id, and its arguments: MySQL has no array parameter.
func inList(stmt string, ids []int64) (string, []any) {
	var b strings.Builder
	b.Grow(len(stmt) + 2*len(ids) + 3)
	b.WriteString(stmt)
	b.WriteString(" (")
	args := make([]any, len(ids))
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
		args[i] = id
	}
	b.WriteByte(')')
	return b.String(), args
}

// findServer looks up the database server among this host's processes,
// for the drain scenarios' CPU figures: PostgreSQL's postmaster, or mysqld.
func (e *env) findServer(ctx context.Context) error {
	if !e.mysql {
		return e.findPostmaster(ctx)
	}
	pid, how, err := findMySQLd(ctx, e.dbURL)
	if err != nil {
		return err
	}
	if pid == 0 {
		logf("mysqld of %s not found among this host's processes (%s)", redactedURL(e.dbURL), how)
		return nil
	}
	logf("mysqld: pid %d (%s)", pid, how)
	e.mysqld = pid
	return nil
}

// findMySQLd finds the process of the MySQL server at serverURL: the one
// listening on the URL's port on this host, which needs the right to read
// other processes' descriptors; failing that, the server's own pid_file
// when the server runs on this host (its @@hostname is this host's). It
// returns 0, and how it looked, when neither finds a mysqld or mariadbd.
func findMySQLd(ctx context.Context, serverURL string) (pid int, how string, err error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return 0, "", fmt.Errorf("-database-url: %w", err)
	}
	port, _ := strconv.Atoi(cmp.Or(u.Port(), "3306"))
	if pid := portListener(port); isMySQLd(pid) {
		return pid, fmt.Sprintf("listening on port %d", port), nil
	}
	dsn, err := mysqldsn.FromURL(serverURL)
	if err != nil {
		return 0, "", err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return 0, "", err
	}
	defer db.Close()
	var pidFile, host string
	if err := db.QueryRowContext(ctx, `SELECT @@pid_file, @@hostname`).Scan(&pidFile, &host); err != nil {
		return 0, "", fmt.Errorf("connect to MySQL at %s: %w", redactedURL(serverURL), err)
	}
	if self, _ := os.Hostname(); host != self {
		return 0, fmt.Sprintf("its host is %s, not this one", host), nil
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Sprintf("no process listening on port %d is readable, nor its pid_file: %v", port, err), nil
	}
	if pid, _ = strconv.Atoi(strings.TrimSpace(string(b))); !isMySQLd(pid) {
		return 0, fmt.Sprintf("its pid_file %s names no mysqld", pidFile), nil
	}
	return pid, "its pid_file " + pidFile, nil
}

// isMySQLd reports whether pid is a MySQL or MariaDB server.
func isMySQLd(pid int) bool {
	if pid <= 0 {
		return false
	}
	st, err := readProcStat(pid)
	return err == nil && (st.comm == "mysqld" || st.comm == "mariadbd")
}

// portListener is the process with a socket listening on TCP port on this
// host, or 0 when none is found (or its descriptors are not readable).
func portListener(port int) int {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			// sl local_address rem_address st ... inode: the address is
			// hex IP:PORT, state 0A is LISTEN.
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" {
				continue
			}
			_, p, ok := strings.Cut(fields[1], ":")
			if v, err := strconv.ParseInt(p, 16, 32); ok && err == nil && int(v) == port {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
		file.Close()
	}
	if len(inodes) == 0 {
		return 0
	}
	pids, err := allPIDs()
	if err != nil {
		return 0
	}
	for pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if target, err := os.Readlink(dir + "/" + fd.Name()); err == nil && inodes[target] {
				return pid
			}
		}
	}
	return 0
}

// idleMySQLd reports how much CPU mysqld used per second while the bench
// did nothing: other sessions on a shared server, which every mysqld
// figure of the run then includes.
func (e *env) idleMySQLd(d time.Duration) (float64, error) {
	return idleCPU(d, func() (time.Duration, error) { return processCPU(e.mysqld) })
}

// mysqldStatusSQL reads the server's counters a drain's JSON gives per
// event (cost.MySQLdStatus), server-wide as mysqld's CPU is: statements
// (Questions, the prepares among them), index and row reads, row updates,
// commits, pages read from the buffer pool, temporary tables, full scans,
// and the redo log's bytes. Both servers have them.
const mysqldStatusSQL = `SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_prepare', 'Handler_read_key', 'Handler_read_next',
 'Handler_read_rnd_next', 'Handler_update', 'Handler_commit', 'Innodb_buffer_pool_read_requests', 'Created_tmp_tables', 'Select_scan',
 'Innodb_os_log_written')`

// mysqldStatus reads mysqldStatusSQL's counters.
func mysqldStatus(ctx context.Context, db *sql.DB) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, mysqldStatusSQL)
	if err != nil {
		return nil, fmt.Errorf("mysqld status: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			name  string
			value int64
		)
		if err := rows.Scan(&name, &value); err != nil {
			return nil, fmt.Errorf("mysqld status: %w", err)
		}
		out[strings.ToLower(name)] = value
	}
	return out, rows.Err()
}

// statusPerEvent is each counter's change from a to b per event.
func statusPerEvent(a, b map[string]int64, events int) map[string]float64 {
	out := make(map[string]float64, len(b))
	for name, v := range b {
		if v0, ok := a[name]; ok {
			out[name] = math.Round(float64(v-v0)/float64(events)*1000) / 1000
		}
	}
	return out
}
