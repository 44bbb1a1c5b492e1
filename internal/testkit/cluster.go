package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cluster is a PostgreSQL cluster of a test's own, managed with Debian's
// postgresql-common tools (pg_createcluster, pg_ctlcluster). A test that
// crashes the server needs one: crashing the shared server would fail every
// other test running at the same time.
type Cluster struct {
	Version string // major version, e.g. "15"
	Name    string // cluster name, e.g. "chaos"
	Port    int
}

// ChaosCluster is the cluster the crash suite's database-crash scenarios
// run on: PostgreSQL 15, port 5439.
var ChaosCluster = Cluster{Version: "15", Name: "chaos", Port: 5439}

// QuietCluster is the cluster of the tests whose result depends on no
// other transaction running on the server: while one is open in any
// database, a backend's snapshot horizon stays where it was, and page
// pruning keeps the versions it left dead. PostgreSQL 15, port 5440,
// taken with Lock for the test's length.
var QuietCluster = Cluster{Version: "15", Name: "quiet", Port: 5440}

// Lock takes the cluster for the caller across processes (an exclusive
// flock on a file named after the cluster in the temporary directory),
// waiting until ctx ends: two test binaries or a test and the chaos runner
// crashing the same cluster would fail each other. Call the returned
// function to let it go; the lock also ends with the process.
func (c Cluster) Lock(ctx context.Context) (unlock func(), err error) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("txoutbox-cluster-%s-%s-%d.lock", c.Version, c.Name, c.Port))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: lock: %w", c.Name, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("cluster %s: lock: %w", c.Name, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("cluster %s: waiting for another process to let it go: %w", c.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// URL is the cluster's server URL (trust authentication on loopback).
func (c Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
}

// hbaTrust lets the suite in without passwords, on loopback only.
const hbaTrust = `# written by txoutbox's testkit: trust on loopback, for tests only
local   all all               trust
host    all all 127.0.0.1/32  trust
host    all all ::1/128       trust
`

// clusterSettings are the cluster's own settings: reachable on loopback,
// connections for a few relays and writers, logical decoding for the WAL
// relay, a bound on the WAL a slot keeps, so a slot a killed test run
// left behind is given up before it fills the disk, and pg_stat_statements
// for the bench's -statements, with planning counted: with many tables a
// relay's statements are planned more than they run. settings adds the
// port.
const clusterSettings = "listen_addresses = '127.0.0.1'\nmax_connections = 300\nwal_level = logical\nmax_slot_wal_keep_size = 16GB\n" +
	"shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track_planning = on\n"

// settings are clusterSettings and the cluster's port: set here too, so a
// cluster created with another port moves to c.Port.
func (c Cluster) settings() string { return clusterSettings + fmt.Sprintf("port = %d\n", c.Port) }

// Ensure creates the cluster if it does not exist (trust authentication on
// loopback, enough connections for a few relays and writers), starts it if
// it is down and waits until it answers. It returns the server URL. It
// needs root or the postgres user, like pg_createcluster.
func (c Cluster) Ensure(ctx context.Context) (string, error) {
	conf := filepath.Join("/etc/postgresql", c.Version, c.Name)
	if _, err := os.Stat(conf); errors.Is(err, os.ErrNotExist) {
		if err := c.ctl(ctx, "pg_createcluster", c.Version, c.Name, "--port", strconv.Itoa(c.Port),
			"--", "--auth-local=trust", "--auth-host=trust"); err != nil {
			// Another process may have created it at the same time.
			if _, serr := os.Stat(conf); serr != nil {
				return "", err
			}
		}
		if err := os.WriteFile(filepath.Join(conf, "pg_hba.conf"), []byte(hbaTrust), 0o640); err != nil {
			return "", fmt.Errorf("write pg_hba.conf of cluster %s: %w", c.Name, err)
		}
	}
	// The settings are checked on every call, so a cluster created before
	// one was added gets it: the WAL relay's scenarios need wal_level =
	// logical, which takes a restart.
	extraPath := filepath.Join(conf, "conf.d", "txoutbox-testkit.conf")
	if old, _ := os.ReadFile(extraPath); string(old) != c.settings() {
		if err := os.WriteFile(extraPath, []byte(c.settings()), 0o644); err != nil {
			return "", fmt.Errorf("configure cluster %s: %w", c.Name, err)
		}
		if c.running(ctx) {
			if err := c.ctl(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", c.Version, c.Name, "restart"); err != nil {
				return "", err
			}
		}
	}
	if !c.running(ctx) {
		if err := c.ctl(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", c.Version, c.Name, "start"); err != nil && !c.running(ctx) {
			return "", err
		}
	}
	return c.URL(), c.wait(ctx, 30*time.Second)
}

// Crash stops the server with -m immediate (no checkpoint, no goodbye to
// clients: a crash, recovered by WAL replay at the next start) and starts it
// again.
func (c Cluster) Crash(ctx context.Context) error {
	if err := c.ctl(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", c.Version, c.Name, "stop", "-m", "immediate"); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Start starts the server (after Crash's stop, or if something stopped it)
// and waits until it answers.
func (c Cluster) Start(ctx context.Context) error {
	if err := c.ctl(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", c.Version, c.Name, "start"); err != nil && !c.running(ctx) {
		return err
	}
	return c.wait(ctx, 30*time.Second)
}

// Stop shuts the server down cleanly (a checkpoint, then exit) and waits
// until it is down. A cluster that is not running is left as it is.
func (c Cluster) Stop(ctx context.Context) error {
	if !c.running(ctx) {
		return nil
	}
	return c.ctl(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", c.Version, c.Name, "stop", "-m", "fast")
}

// Running reports whether the server is up.
func (c Cluster) Running(ctx context.Context) bool { return c.running(ctx) }

func (c Cluster) running(ctx context.Context) bool {
	// pg_ctlcluster status exits 0 when the server runs, 3 when it is down.
	return exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", c.Version, c.Name, "status").Run() == nil
}

func (c Cluster) ctl(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// wait pings the server until it accepts connections (recovery after a
// crash takes a moment).
func (c Cluster) wait(ctx context.Context, limit time.Duration) error {
	db, err := sql.Open("pgx", c.URL())
	if err != nil {
		return err
	}
	defer db.Close()
	if Eventually(limit, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = db.PingContext(pctx)
		cancel()
		return err == nil || ctx.Err() != nil
	}) && err == nil {
		return nil
	}
	return fmt.Errorf("cluster %s/%s on port %d not answering after %s: %w", c.Version, c.Name, c.Port, limit, err)
}
