package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay"
)

// RelayFlags are the `outbox relay` flags of a scenario's relays.
type RelayFlags struct {
	Batch       int           // rows per claim; the relay's MaxInFlight is 2×Batch
	Lanes       int           // concurrent publishes
	MaxAttempts int           // failed publishes before an event is dead
	BackoffMin  time.Duration // first retry delay
	BackoffMax  time.Duration // longest retry delay
	Heartbeat   time.Duration
	StaleAfter  time.Duration // how fast a killed relay's shards are taken over
	Lease       time.Duration
	// Mode is the relay mode: "" (poll) or "wal" (outbox relay --mode
	// wal: one relay streams the slot, the others stand by).
	Mode string
	// Extra are more flags of outbox relay, last (e.g. --retention).
	Extra []string
	// Schemas, if set, is the --schemas pattern the relays serve (one
	// relay for the outbox tables of many schemas) instead of the
	// scenario's schema.
	Schemas string
}

// WALMode is the RelayFlags.Mode of the WAL relay.
const WALMode = "wal"

// walArgs are the WAL relays' extra flags: quick takeover (the server
// frees a silent relay's slot after 4s), and rows kept, marked published,
// for the verifier (--retention).
var walArgs = []string{"--mode", WALMode, "--sender-timeout", "4s", "--standby-retry", "200ms",
	"--cleanup-interval", "300ms", "--retention", "1h"}

// DefaultRelayFlags keep takeover after a crash quick (StaleAfter 3s) while
// leaving a heartbeat six intervals of slack on a loaded 2-core machine: a
// live relay declared dead would let two relays publish one shard.
func DefaultRelayFlags() RelayFlags {
	return RelayFlags{
		Batch:       100,
		Lanes:       32,
		MaxAttempts: 10,
		BackoffMin:  100 * time.Millisecond,
		BackoffMax:  2 * time.Second,
		Heartbeat:   500 * time.Millisecond,
		StaleAfter:  3 * time.Second,
		Lease:       10 * time.Second,
	}
}

// NoRelayFaultFlags are DefaultRelayFlags with the relay's default
// StaleAfter and LeaseDuration, for scenarios that kill, pause and
// partition no relay and allow no duplicate (poison, rebalance). Beside
// the suite's other scenarios the real cluster's publishes slowed past
// DefaultRelayFlags' 10 s lease: rows waited past it in the lanes (the
// relays logged "released for a new claim"), and a publish call that
// began before its rows' lease ended and returned after it met the
// relay's own new claim of them, so they went out twice from one producer
// and epoch. That is the relay's documented behaviour for a publish slower
// than the lease, and a heartbeat stalled past StaleAfter is likewise
// documented; neither is a fault these scenarios inject.
func NoRelayFaultFlags() RelayFlags {
	f := DefaultRelayFlags()
	f.StaleAfter = relay.StaleAfterDefault
	f.Lease = relay.LeaseDurationDefault
	return f
}

// MaxInFlight is the relay's in-flight bound for these flags (relay
// Config.MaxInFlight defaults to 2×BatchSize): the most events one crash can
// publish twice.
func (f RelayFlags) MaxInFlight() int { return 2 * f.Batch }

// AppName is the PostgreSQL application_name of every relay connection of
// the fleet, by which the DB connection-loss scenario finds them.
func (f *Fleet) AppName() string { return f.appName }

// Account is the MySQL user every relay of the fleet connects as, by
// which the DB connection-loss scenario finds their connections on
// MySQL: the relay account of Env.MySQLd, or "" when the fleet's relays
// share the scenario's account.
func (f *Fleet) Account() string { return f.account }

// Fleet runs the scenario's relay processes.
type Fleet struct {
	env     *Env
	flags   RelayFlags
	brokers string
	dbURL   string
	appName string
	account string

	mu         sync.Mutex
	seq        int
	live       map[string]*relayProc
	unexpected []string // relays that exited without being told to
	kills      int
	restarts   int    // SIGKILLs followed by a start under the same id
	streaming  string // WAL mode: the relay that last said it streams

	// large, with the claim check on, gives every relay its flags for the
	// payload store and a Proxy to it.
	large *largeStore

	// proxyDB gives every relay id its own Proxy to PostgreSQL, kept
	// across restarts under that id.
	proxyDB bool
	proxies map[string]*Proxy
}

type relayProc struct {
	id      string
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	told    bool // killed or stopped on purpose
	started bool // printed its ready line: an exit from now on is a death
}

// NewFleet prepares relays publishing env's outbox to brokers.
func NewFleet(env *Env, brokers string, flags RelayFlags) (*Fleet, error) {
	u, err := url.Parse(env.DB.URL)
	if err != nil {
		return nil, fmt.Errorf("relay database url: %w", err)
	}
	app := "chaos-relay-" + env.DB.Schema
	if len(app) > 63 {
		app = app[:63]
	}
	account := ""
	switch {
	case !env.MySQL():
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
	case env.MySQLd != nil:
		// MySQL has no application_name (the driver would take an unknown
		// parameter as a session variable): the relays connect as an
		// account of their own, as a deployment gives them.
		u.User = env.MySQLd.RelayAccount()
		account = u.User.Username()
	}
	return &Fleet{env: env, flags: flags, brokers: brokers, dbURL: u.String(), appName: app, account: account,
		live: map[string]*relayProc{}, proxies: map[string]*Proxy{}}, nil
}

// ProxyDatabase makes every relay started from now on reach PostgreSQL
// through a Proxy of its own (see DBProxy), so a scenario can partition one
// relay from the database while the others keep working.
func (f *Fleet) ProxyDatabase() {
	f.mu.Lock()
	f.proxyDB = true
	f.mu.Unlock()
}

// DBProxy is relay id's proxy to PostgreSQL, nil without ProxyDatabase.
func (f *Fleet) DBProxy(id string) *Proxy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.proxies[id]
}

// relayDBURL is the database URL relay id connects to: the fleet's, or
// its proxy's.
func (f *Fleet) relayDBURL(id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.proxyDB {
		return f.dbURL, nil
	}
	u, err := url.Parse(f.dbURL)
	if err != nil {
		return "", err
	}
	p := f.proxies[id]
	if p == nil {
		if p, err = NewProxy(u.Host); err != nil {
			return "", err
		}
		f.proxies[id] = p
	}
	u.Host = p.Addr()
	return u.String(), nil
}

// Start starts one more relay under a fresh id and returns the id.
func (f *Fleet) Start() (string, error) {
	f.mu.Lock()
	f.seq++
	id := fmt.Sprintf("relay-%02d", f.seq)
	f.mu.Unlock()
	return id, f.StartAs(id)
}

// StartAs starts a relay under a given id, as a StatefulSet or a systemd
// unit with --id set from its name does. The id must not be running.
func (f *Fleet) StartAs(id string) error {
	f.mu.Lock()
	_, running := f.live[id]
	f.mu.Unlock()
	if running {
		return fmt.Errorf("relay %s is running already", id)
	}
	dbURL, err := f.relayDBURL(id)
	if err != nil {
		return err
	}
	fl := f.flags
	schema := []string{"--schema", f.env.DB.Schema}
	if f.env.MySQL() {
		schema = nil // the database in the URL is the scenario's
	}
	if fl.Schemas != "" {
		schema = []string{"--schemas", fl.Schemas}
	}
	args := append([]string{"relay",
		"--database-url", dbURL}, schema...)
	args = append(args,
		"--brokers", f.brokers,
		"--id", id,
		"--batch", fmt.Sprint(fl.Batch),
		"--lanes", fmt.Sprint(fl.Lanes),
		"--max-attempts", fmt.Sprint(fl.MaxAttempts),
		"--backoff-min", fl.BackoffMin.String(),
		"--backoff-max", fl.BackoffMax.String(),
		"--heartbeat", fl.Heartbeat.String(),
		"--stale-after", fl.StaleAfter.String(),
		"--lease", fl.Lease.String(),
		"--poll-interval", "200ms",
		"--log-level", "warn",
	)
	if fl.Mode == WALMode {
		args = append(args, walArgs...)
	}
	if f.large != nil {
		la, err := f.large.relayArgs(id)
		if err != nil {
			return err
		}
		args = append(args, la...)
	}
	args = append(args, fl.Extra...)
	logf, err := f.env.logFile(id + ".log")
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(f.env.Bin.Outbox, args...)
	kafkatest.DieWithParent(cmd)
	if f.large != nil {
		cmd.Env = f.large.relayEnv()
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	// The relay prints "relay <id> publishing ..." once it is set up and
	// its signal handler is installed; a SIGTERM before that would kill it
	// like a SIGKILL.
	ready := make(chan struct{})
	logw, err := f.env.logFile(id + ".log")
	if err != nil {
		return err
	}
	go func() {
		defer logw.Close()
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			fmt.Fprintln(logw, sc.Text())
			if strings.HasPrefix(sc.Text(), "relay "+id+" publishing") {
				once.Do(func() { close(ready) })
			}
			if sc.Text() == "relay "+id+" streaming" {
				f.mu.Lock()
				f.streaming = id
				f.mu.Unlock()
			}
		}
	}()
	p := &relayProc{id: id, cmd: cmd, done: make(chan struct{})}
	f.mu.Lock()
	f.live[id] = p
	f.mu.Unlock()
	go func() {
		p.exitErr = cmd.Wait()
		f.mu.Lock()
		if !p.told && p.started {
			f.unexpected = append(f.unexpected, fmt.Sprintf("%s exited by itself: %v (see %s.log)", id, p.exitErr, id))
		}
		if f.live[id] == p { // not yet replaced by a restart under the same id
			delete(f.live, id)
		}
		f.mu.Unlock()
		close(p.done)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		f.mu.Lock()
		p.started = true
		exited := f.live[id] != p
		f.mu.Unlock()
		if exited { // between its ready line and now
			return fmt.Errorf("%w: %s exited right after start: %v (see %s.log)", errStart, id, p.exitErr, id)
		}
		return nil
	case <-p.done:
		return fmt.Errorf("%w: %s exited at start: %v (see %s.log)", errStart, id, p.exitErr, id)
	case <-t.C:
		return fmt.Errorf("%s not ready after 30s (see %s.log)", id, id)
	}
}

// errStart is a relay that could not start, as when PostgreSQL is down at
// that moment (a database crash): a supervisor would start it again.
var errStart = errors.New("relay did not start")

// startRetry starts relay id (a fresh id if id is empty), trying again
// every second for up to 30 s while it fails to start: a relay started
// during a database crash exits at once, and a supervisor tries again.
func (f *Fleet) startRetry(ctx context.Context, id string) error {
	var err error
	for attempt := 0; attempt < 30; attempt++ {
		if id == "" {
			_, err = f.Start()
		} else {
			err = f.StartAs(id)
		}
		if err == nil || !errors.Is(err, errStart) {
			return err
		}
		if !sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
	return err
}

// Restart SIGKILLs relay id and starts it again at once under the same id,
// well within its lease: the new process finds rows claimed under its own
// name, by a process that no longer exists. If the new process cannot start
// (PostgreSQL down), it is tried again, as a supervisor would.
func (f *Fleet) Restart(ctx context.Context, id string) error {
	if err := f.Kill(id); err != nil {
		return err
	}
	f.mu.Lock()
	f.restarts++
	f.mu.Unlock()
	return f.startRetry(ctx, id)
}

// isLive reports whether relay id is running.
func (f *Fleet) isLive(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.live[id]
	return ok
}

// Restarts is how many relays were SIGKILLed and restarted under their id.
func (f *Fleet) Restarts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restarts
}

// Pause stops relay id with SIGSTOP for d and continues it with SIGCONT: a
// GC or VM stall, CPU throttling, docker pause. The process keeps its
// sockets and its claims; its heartbeat stops. It reports false if the relay
// was not running or died meanwhile (killed by another fault).
func (f *Fleet) Pause(ctx context.Context, id string, d time.Duration) bool {
	f.mu.Lock()
	p, ok := f.live[id]
	f.mu.Unlock()
	if !ok || p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return false
	}
	// SIGCONT even if ctx ends: a stopped relay would never drain.
	select {
	case <-time.After(d):
	case <-ctx.Done():
	case <-p.done:
	}
	return p.cmd.Process.Signal(syscall.SIGCONT) == nil
}

// Close kills what is still running and closes the relays' proxies.
func (f *Fleet) Close() {
	f.KillAll()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.proxies {
		p.Close()
	}
}

// Live returns the ids of the running relays that finished starting,
// sorted.
func (f *Fleet) Live() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.live))
	for id, p := range f.live {
		if p.started { // a relay still starting is no fault's victim yet
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Streaming is the WAL-mode relay that last said it streams, if it is
// still running ("" otherwise).
func (f *Fleet) Streaming() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.live[f.streaming]; ok && p.started {
		return f.streaming
	}
	return ""
}

// PID returns relay id's process id (0 if it is not running).
func (f *Fleet) PID(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.live[id]; ok && p.cmd.Process != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Kill SIGKILLs a relay: no shutdown, no release of claims or shards; its
// peers take over once its heartbeat is StaleAfter old.
func (f *Fleet) Kill(id string) error {
	p, err := f.tell(id)
	if err != nil {
		return err
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	f.mu.Lock()
	f.kills++
	f.mu.Unlock()
	return nil
}

// Stop SIGTERMs a relay and waits for its clean shutdown, which must end
// with exit status 0 within 30s.
func (f *Fleet) Stop(id string) error {
	p, err := f.tell(id)
	if err != nil {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 30s of SIGTERM; killed", id)
	}
	if p.exitErr != nil {
		return fmt.Errorf("%s: clean shutdown failed: %v (see %s.log)", id, p.exitErr, id)
	}
	return nil
}

func (f *Fleet) tell(id string) (*relayProc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.live[id]
	if !ok {
		return nil, fmt.Errorf("relay %s is not running", id)
	}
	p.told = true
	return p, nil
}

// Kills is how many relays were SIGKILLed.
func (f *Fleet) Kills() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kills
}

// Unexpected returns an error naming every relay that exited on its own.
// A relay must survive every fault the scenarios inject.
func (f *Fleet) Unexpected() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.unexpected) == 0 {
		return nil
	}
	return fmt.Errorf("relays died: %v", f.unexpected)
}

// StopAll stops every running relay cleanly.
func (f *Fleet) StopAll() error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, id := range f.Live() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.Stop(id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// KillAll SIGKILLs every running relay, for cleanup after a failure.
func (f *Fleet) KillAll() {
	for _, id := range f.Live() {
		if p, err := f.tell(id); err == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// handoverLines are the relays' log lines that say one of them stopped
// publishing what it held while another may publish it: second publishes
// with no failure recorded follow from these, not from a crash.
var handoverLines = []string{
	"no heartbeat succeeded within StaleAfter", // its heartbeats stalled past its deadline
	"peers declared this relay dead",
	"declared a relay dead",
	"replaced an earlier incarnation",
	"a publish outlived PublishTimeout",
	"rolling over epoch", // Sarama's idempotent producer: its unacknowledged batches go again under a new epoch, where the broker cannot tell them from new ones
	"released for a new claim",
}

// relayHandovers returns, for a failure on the duplicate bound, the relays'
// log lines of handoverLines (at most 20), each prefixed by its log's name,
// or a line saying there were none.
func relayHandovers(env *Env) []string {
	logs, _ := filepath.Glob(filepath.Join(env.Dir, "relay-*.log"))
	var out []string
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, h := range handoverLines {
				if strings.Contains(line, h) && len(out) < 20 {
					out = append(out, "handover: "+filepath.Base(path)+": "+line)
					break
				}
			}
		}
	}
	if len(out) == 0 {
		return []string{"handover: no relay logged a stalled heartbeat, a verdict of its peers, a replaced incarnation, a publish past PublishTimeout or a producer epoch rolled over"}
	}
	return out
}
