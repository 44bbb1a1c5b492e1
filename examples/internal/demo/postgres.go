package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// localURL is the PostgreSQL the examples try when DATABASE_URL is empty.
const localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	database = sync.OnceValues(func() (string, error) { return findDatabase(localURL) })
	embedded *embeddedPostgres // set when findDatabase started one
)

// DatabaseURL is DATABASE_URL (PostgreSQL's, or a mysql:// URL of MySQL or
// MariaDB); or the local PostgreSQL at 127.0.0.1:5432 (user postgres,
// trust auth) when it answers; or else an embedded one: a throwaway server
// started from this machine's own PostgreSQL installation (initdb and
// postgres on PATH or under /usr/lib/postgresql) in a temporary
// directory, as the examples start an embedded broker when KAFKA_BROKERS
// is empty. Shutdown stops it and removes its files. When
// none of the three can be had it returns localURL, whose connection error
// then says what is missing, and prints why.
func DatabaseURL() string {
	u, err := database()
	if err != nil {
		fmt.Fprintf(os.Stderr, "no PostgreSQL: %v\n", err)
		return localURL
	}
	return u
}

// Shutdown stops the embedded PostgreSQL, if DatabaseURL started one, and
// removes its files. Call it before the program exits.
func Shutdown() {
	if embedded != nil {
		embedded.stop()
		embedded = nil
	}
}

// Main is an example's main: it calls run with ctx and DatabaseURL, stops
// the embedded PostgreSQL if one was started, and then exits on run's
// error, if any.
func Main(ctx context.Context, run func(ctx context.Context, databaseURL string) error) {
	err := run(ctx, DatabaseURL())
	Shutdown()
	if err != nil {
		log.Fatal(err)
	}
}

// findDatabase is DatabaseURL's search, with local as the local server.
func findDatabase(local string) (string, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if pingURL(ctx, local) == nil {
		return local, nil
	}
	pg, err := startEmbedded(context.Background())
	if err != nil {
		return "", fmt.Errorf("none at 127.0.0.1:5432 and none could be started (%w); set DATABASE_URL or install PostgreSQL", err)
	}
	embedded = pg
	fmt.Printf("no DATABASE_URL and no PostgreSQL at 127.0.0.1:5432: started an embedded one at %s\n", pg.url)
	return pg.url, nil
}

func pingURL(ctx context.Context, url string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// embeddedPostgres is a PostgreSQL server of the program's own, a child
// process on a free loopback port.
type embeddedPostgres struct {
	dir  string
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

// postgresBin finds the directory of initdb and postgres: PATH first, then
// Debian's and Ubuntu's /usr/lib/postgresql/<version>/bin, newest first.
func postgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "postgres")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no initdb on PATH or under /usr/lib/postgresql")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func startEmbedded(ctx context.Context) (*embeddedPostgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "txoutbox-embedded-postgres-")
	if err != nil {
		return nil, err
	}
	pg := &embeddedPostgres{dir: dir, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			pg.stop()
		}
	}()
	// initdb refuses to run as root: run the server as the postgres user.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// A throwaway server: no fsync, and it dies with this process.
	pg.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	pg.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT}
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	pg.cmd.Stdout, pg.cmd.Stderr = logFile, logFile
	if err := pg.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() { pg.cmd.Wait(); close(pg.done) }()
	pg.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := pingURL(pctx, pg.url)
		cancel()
		if err == nil {
			ok = true
			return pg, nil
		}
		select {
		case <-pg.done:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return nil, fmt.Errorf("postgres exited: %s", log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("postgres did not answer within 30s: %w", err)
		}
	}
}

// stop shuts the server down fast (SIGINT) and removes its files.
func (pg *embeddedPostgres) stop() {
	if pg.cmd != nil && pg.cmd.Process != nil {
		pg.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-pg.done:
		case <-time.After(10 * time.Second):
			pg.cmd.Process.Kill()
			<-pg.done
		}
	}
	os.RemoveAll(pg.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
