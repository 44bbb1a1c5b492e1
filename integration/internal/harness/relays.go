package harness

import (
	"bufio"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
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
}

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

// MaxInFlight is the relay's in-flight bound for these flags (relay
// Config.MaxInFlight defaults to 2×BatchSize): the most events one crash can
// publish twice.
func (f RelayFlags) MaxInFlight() int { return 2 * f.Batch }

// AppName is the PostgreSQL application_name of every relay connection of
// the fleet, by which the DB connection-loss scenario finds them.
func (f *Fleet) AppName() string { return f.appName }

// Fleet runs the scenario's relay processes.
type Fleet struct {
	env     *Env
	flags   RelayFlags
	brokers string
	dbURL   string
	appName string

	mu         sync.Mutex
	seq        int
	live       map[string]*relayProc
	unexpected []string // relays that exited without being told to
	kills      int
}

type relayProc struct {
	id      string
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	told    bool // killed or stopped on purpose
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
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return &Fleet{env: env, flags: flags, brokers: brokers, dbURL: u.String(), appName: app, live: map[string]*relayProc{}}, nil
}

// Start starts one more relay and returns its id.
func (f *Fleet) Start() (string, error) {
	f.mu.Lock()
	f.seq++
	id := fmt.Sprintf("relay-%02d", f.seq)
	f.mu.Unlock()
	fl := f.flags
	args := []string{"relay",
		"--database-url", f.dbURL,
		"--schema", f.env.DB.Schema,
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
	}
	logf, err := f.env.logFile(id + ".log")
	if err != nil {
		return "", err
	}
	defer logf.Close()
	cmd := exec.Command(f.env.Bin.Outbox, args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", id, err)
	}
	// The relay prints "relay <id> publishing ..." once it is set up and
	// its signal handler is installed; a SIGTERM before that would kill it
	// like a SIGKILL.
	ready := make(chan struct{})
	logw, err := f.env.logFile(id + ".log")
	if err != nil {
		return "", err
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
		}
	}()
	p := &relayProc{id: id, cmd: cmd, done: make(chan struct{})}
	f.mu.Lock()
	f.live[id] = p
	f.mu.Unlock()
	go func() {
		p.exitErr = cmd.Wait()
		f.mu.Lock()
		if !p.told {
			f.unexpected = append(f.unexpected, fmt.Sprintf("%s exited by itself: %v (see %s.log)", id, p.exitErr, id))
		}
		delete(f.live, id)
		f.mu.Unlock()
		close(p.done)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		return id, nil
	case <-p.done:
		return "", fmt.Errorf("%s exited at start: %v (see %s.log)", id, p.exitErr, id)
	case <-t.C:
		return "", fmt.Errorf("%s not ready after 30s (see %s.log)", id, id)
	}
}

// Live returns the ids of the running relays, sorted.
func (f *Fleet) Live() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.live))
	for id := range f.live {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
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
