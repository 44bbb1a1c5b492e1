package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/txoutbox/txoutbox/internal/mysqldsn"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/migrations"
)

// MySQLd is a MariaDB server of a test's own, in a data directory of its
// own, started with mariadbd (Debian's MariaDB) outside systemd: the crash
// suite SIGKILLs it, which would fail every other test on the shared
// server of .ci/services.
type MySQLd struct {
	Dir  string // data directory, created with mariadb-install-db on first use
	Port int
}

// ChaosMySQLd is the server the crash suite's MariaDB scenarios run on:
// port 3307.
var ChaosMySQLd = MySQLd{Dir: "/var/lib/txoutbox-chaos-mariadb", Port: 3307}

// mysqldUser and mysqldPassword are the suite's account on the server,
// and mysqldRelayUser (same password) the relays' (both with every
// privilege; loopback only).
const (
	mysqldUser      = "chaos"
	mysqldRelayUser = "chaos_relay"
	mysqldPassword  = "chaos-test-secret"
)

// URL is the server's URL, on its mysql database.
func (m MySQLd) URL() string {
	return fmt.Sprintf("mysql://%s:%s@127.0.0.1:%d/mysql", mysqldUser, mysqldPassword, m.Port)
}

// RelayAccount is the account the crash suite's relays connect as, to
// put in their URL: MySQL has no application_name, and a scenario finds
// the relays' connections by their account (the USER of
// information_schema.PROCESSLIST), as an operator finds an application's.
func (m MySQLd) RelayAccount() *url.Userinfo {
	return url.UserPassword(mysqldRelayUser, mysqldPassword)
}

// Lock takes the server for the caller across processes, as Cluster.Lock.
func (m MySQLd) Lock(ctx context.Context) (unlock func(), err error) {
	return Cluster{Version: "mariadb", Name: "chaos", Port: m.Port}.Lock(ctx)
}

func (m MySQLd) socket() string  { return filepath.Join(m.Dir, "mysqld.sock") }
func (m MySQLd) pidFile() string { return filepath.Join(m.Dir, "mysqld.pid") }

// Ensure creates the data directory if it does not exist, starts the
// server if it is down and waits until the suite's account connects. It
// returns the server URL. It needs root (mariadbd runs as user mysql).
func (m MySQLd) Ensure(ctx context.Context) (string, error) {
	if !slices.Contains(sql.Drivers(), "mysql") {
		return "", fmt.Errorf("no %q database/sql driver in this binary: import _ \"github.com/go-sql-driver/mysql\"", "mysql")
	}
	if _, err := os.Stat(filepath.Join(m.Dir, "mysql")); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(m.Dir, 0o750); err != nil {
			return "", err
		}
		if err := run(ctx, "chown", "mysql:mysql", m.Dir); err != nil {
			return "", err
		}
		if err := run(ctx, "mariadb-install-db", "--no-defaults", "--user=mysql", "--datadir="+m.Dir,
			"--auth-root-authentication-method=socket", "--skip-test-db"); err != nil {
			return "", err
		}
	}
	if !m.running() {
		if err := m.Start(ctx); err != nil {
			return "", err
		}
	}
	// The accounts, on a fresh server and on one made before an account
	// was added (the statements change nothing once they exist). Only
	// root can grant: the suite's account has no GRANT OPTION.
	var grant strings.Builder
	for _, user := range []string{mysqldUser, mysqldRelayUser} {
		fmt.Fprintf(&grant, "CREATE USER IF NOT EXISTS '%[1]s'@'127.0.0.1' IDENTIFIED BY '%[2]s'; GRANT ALL ON *.* TO '%[1]s'@'127.0.0.1'; ",
			user, mysqldPassword)
	}
	if err := run(ctx, "mariadb", "--no-defaults", "--protocol=socket", "-S", m.socket(), "-u", "root", "-e", grant.String()); err != nil {
		return "", err
	}
	return m.URL(), m.wait(ctx, 60*time.Second)
}

// Start starts the server (after Crash's kill, or if it is down) and waits
// until it answers. Every commit is durable (innodb_flush_log_at_trx_commit
// = 1, which the relay requires).
func (m MySQLd) Start(ctx context.Context) error {
	cmd := exec.Command("/usr/sbin/mariadbd", "--no-defaults", "--user=mysql", "--datadir="+m.Dir,
		"--bind-address=127.0.0.1", "--port="+strconv.Itoa(m.Port), "--socket="+m.socket(), "--pid-file="+m.pidFile(),
		"--log-error="+filepath.Join(m.Dir, "mariadbd.err"), "--skip-name-resolve", "--max-connections=500",
		"--innodb-flush-log-at-trx-commit=1", "--innodb-buffer-pool-size=256M")
	// A session of its own: the server outlives the process that started
	// it, as the PostgreSQL cluster does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mariadbd on port %d: %w", m.Port, err)
	}
	go cmd.Wait() // reaps it if it exits while this process runs
	return m.wait(ctx, 60*time.Second)
}

// Crash SIGKILLs the server (no shutdown: InnoDB recovers from its redo
// log at the next start) and starts it again.
func (m MySQLd) Crash(ctx context.Context) error {
	pid, err := m.pid()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill mariadbd %d: %w", pid, err)
	}
	if !Eventually(30*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		return fmt.Errorf("mariadbd %d still alive 30s after SIGKILL", pid)
	}
	return m.Start(ctx)
}

func (m MySQLd) pid() (int, error) {
	b, err := os.ReadFile(m.pidFile())
	if err != nil {
		return 0, fmt.Errorf("mariadbd on port %d: %w", m.Port, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func (m MySQLd) running() bool {
	pid, err := m.pid()
	return err == nil && syscall.Kill(pid, 0) == nil
}

// wait pings the server with the suite's account (or root's socket on a
// fresh server, before the account exists) until it answers.
func (m MySQLd) wait(ctx context.Context, limit time.Duration) error {
	var err error
	if Eventually(limit, func() bool {
		if _, serr := os.Stat(m.socket()); serr != nil {
			err = serr
			return ctx.Err() != nil
		}
		err = run(ctx, "mariadb-admin", "--no-defaults", "--protocol=socket", "-S", m.socket(), "-u", "root", "--connect-timeout=2", "ping")
		return err == nil || ctx.Err() != nil
	}) && err == nil {
		return nil
	}
	return fmt.Errorf("mariadbd on port %d not answering after %s (its log: %s): %w", m.Port, limit, filepath.Join(m.Dir, "mariadbd.err"), err)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CreateMySQLDatabase creates database name on the MySQL server at
// serverURL (a mysql:// URL), migrated with the outbox if migrate, and
// returns it with the function that drops it: a scenario's database, as
// CreateSchema makes a scenario's schema on PostgreSQL. It needs the
// go-sql-driver/mysql driver registered.
func CreateMySQLDatabase(ctx context.Context, serverURL, name string, migrate bool) (*DB, func(context.Context) error, error) {
	adminDSN, err := mysqldsn.FromURL(serverURL)
	if err != nil {
		return nil, nil, err
	}
	admin, err := sql.Open("mysql", adminDSN)
	if err != nil {
		return nil, nil, err
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+outboxsql.MySQLQuote(name)); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop := func(ctx context.Context) error {
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+outboxsql.MySQLQuote(name)); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, nil, errors.Join(err, drop(ctx))
	}
	u.Path = "/" + name
	dsn, err := mysqldsn.FromURL(u.String())
	if err != nil {
		return nil, nil, errors.Join(err, drop(ctx))
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, nil, errors.Join(err, drop(ctx))
	}
	if migrate {
		m, err := migrations.New(db, migrations.Config{})
		if err == nil {
			_, err = m.Up(ctx)
		}
		if err != nil {
			db.Close()
			return nil, nil, errors.Join(fmt.Errorf("migrate %s: %w", name, err), drop(ctx))
		}
	}
	return &DB{SQL: db, URL: u.String(), Schema: name, mysql: true, mysqlDSN: dsn}, func(ctx context.Context) error {
		db.Close()
		return drop(ctx)
	}, nil
}
