package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// parseLine reads a summary line as logfmt: bare values, and quoted ones
// in Go's quoting. It fails the test on anything else.
func parseLine(t *testing.T, line string) map[string]string {
	t.Helper()
	if strings.Contains(line, "\n") {
		t.Fatalf("summary line spans lines: %q", line)
	}
	rest, ok := strings.CutPrefix(line, "bench: ")
	if !ok {
		t.Fatalf("summary line %q does not start with \"bench: \"", line)
	}
	kv := map[string]string{}
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			t.Fatalf("summary line: no key=value at %q", rest)
		}
		var value string
		if strings.HasPrefix(after, `"`) {
			quoted, err := strconv.QuotedPrefix(after)
			if err != nil {
				t.Fatalf("summary line: %s: %v", key, err)
			}
			value, _ = strconv.Unquote(quoted)
			after = after[len(quoted):]
		} else {
			value, after, _ = strings.Cut(after, " ")
			after = " " + after
		}
		if _, dup := kv[key]; dup {
			t.Fatalf("summary line: %s twice", key)
		}
		kv[key] = value
		rest = strings.TrimPrefix(after, " ")
		if rest != "" && !strings.HasPrefix(after, " ") {
			t.Fatalf("summary line: no space after %s", key)
		}
	}
	return kv
}

// A scenario that fails, one whose drain timed out or one that broke, is
// reported in the summary line with its partial figures and its error,
// and the scenarios after it still run and keep their figures.
func TestFailedScenarioKeepsTheRun(t *testing.T) {
	t.Parallel()
	sum := newSummary()
	var emitted []any
	emit := func(v any) error { emitted = append(emitted, v); return nil }
	connectLog := errors.New("debezium: round 0: Connect's log:\nERROR \"slot\" is active")
	var ran []string
	scenarios := []scenario{
		{"relay", func() error { ran = append(ran, "relay"); sum.RelayEPS = 30000; return nil }},
		{"river", func() error {
			ran = append(ran, "river")
			sum.River1EPS = 500 // its ordered drain finished before the unordered one timed out
			return fmt.Errorf("river64: %w", &incompleteError{Published: 36432, Backlog: 100000, Elapsed: 5 * time.Minute})
		}},
		{"debezium", func() error { ran = append(ran, "debezium"); return connectLog }},
		{"claim", func() error { ran = append(ran, "claim"); sum.ClaimFlatness = 1.02; return nil }},
	}
	failed := runScenarios(context.Background(), scenarios, &sum, emit)

	if got := strings.Join(ran, ","); got != "relay,river,debezium,claim" {
		t.Fatalf("scenarios run: %s, want all four", got)
	}
	if got := strings.Join(failed, ","); got != "river,debezium" {
		t.Fatalf("failed: %s, want river,debezium", got)
	}
	line := sum.String()
	kv := parseLine(t, line)
	for key, want := range map[string]string{
		"relay_eps": "30000", "claim_flatness": "1.02", "river1_eps": "500", "relay_vs_river1": "60.00",
		"river_eps": "-", "relay_vs_river": "-", // no figure from a drain that did not finish
		"river_published": "36432", "river_backlog": "100000", "river_seconds": "300.0", "river_partial_eps": "121",
		"river_error":    "river64: 36432 of 100000 events published after 5m0s",
		"debezium_error": connectLog.Error(),
	} {
		if kv[key] != want {
			t.Errorf("%s = %q, want %q", key, kv[key], want)
		}
	}
	if _, ok := kv["debezium_partial_eps"]; ok {
		t.Errorf("debezium has partial figures without a partial drain: %s", line)
	}
	// Every key of a whole run comes first, as before.
	whole := newSummary()
	whole.RelayEPS, whole.River1EPS, whole.ClaimFlatness = 30000, 500, 1.02
	if !strings.HasPrefix(line, whole.String()+" ") {
		t.Errorf("the failures' entries do not follow the whole run's line:\n got %s\nwant %s …", line, whole.String())
	}

	var objects []failure
	for _, v := range emitted {
		if f, ok := v.(failure); ok {
			objects = append(objects, f)
		}
	}
	if len(objects) != 2 || objects[0].Scenario != "river" || objects[0].Published == nil || *objects[0].Published != 36432 ||
		objects[1].Scenario != "debezium" || objects[1].EPS != nil {
		t.Errorf("emitted %+v, want a JSON object for each failure, river's with its partial drain", emitted)
	}
}

// An interrupt ends the run after the scenario it stopped, which is
// reported with its error; the summary still has what ran.
func TestInterruptedRunKeepsItsFigures(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sum := newSummary()
	var ran []string
	scenarios := []scenario{
		{"relay", func() error { ran = append(ran, "relay"); sum.RelayEPS = 30000; return nil }},
		{"naive", func() error {
			ran = append(ran, "naive")
			cancel() // the interrupt, mid-drain
			return fmt.Errorf("naive: %w", &incompleteError{Published: 1000, Backlog: 20000, Elapsed: 2 * time.Second, Err: ctx.Err()})
		}},
		{"claim", func() error { ran = append(ran, "claim"); return nil }},
	}
	failed := runScenarios(ctx, scenarios, &sum, func(any) error { return nil })
	if got := strings.Join(ran, ","); got != "relay,naive" {
		t.Fatalf("scenarios run: %s, want relay,naive and none after the interrupt", got)
	}
	kv := parseLine(t, sum.String())
	if len(failed) != 1 || kv["relay_eps"] != "30000" || kv["naive_partial_eps"] != "500" ||
		kv["naive_error"] != "naive: 1000 of 20000 events published after 2s: context canceled" {
		t.Errorf("failed %v, summary %s", failed, sum.String())
	}
}

// A drain of the relays that runs out of -timeout says how far it got.
func TestRelayDrainTimeoutIsPartial(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := testEnv(ctx, t, options{events: 20000, aggregates: 100})
	e.opts.timeout = time.Millisecond
	_, err := runRelayScenario(ctx, e, 1, 0, "", 0)
	var inc *incompleteError
	if !errors.As(err, &inc) {
		t.Fatalf("drain past -timeout: %v, want an incomplete drain", err)
	}
	if inc.Backlog != 20000 || inc.Published >= 20000 || inc.Elapsed <= 0 || inc.Err != nil {
		t.Fatalf("incomplete drain %+v, want a backlog of 20000, fewer published, the time taken and no other error", *inc)
	}
}

// A profile sets its sizes unless the command line gives them, and runs
// its scenarios but those -skip names.
func TestProfiles(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) (*options, *flag.FlagSet, *string) {
		o := new(options)
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		fs.IntVar(&o.events, "events", 100_000, "")
		fs.IntVar(&o.rounds, "rounds", 6, "")
		fs.StringVar(&o.skip, "skip", "", "")
		name := fs.String("profile", "default", "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return o, fs, name
	}
	apply := func(args ...string) options {
		t.Helper()
		o, fs, name := parse(args...)
		p, err := profileNamed(*name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.apply(fs); err != nil {
			t.Fatal(err)
		}
		o.profile = p
		return *o
	}
	running := func(o options) string { return strings.Join(o.runs(), ",") }

	o := apply()
	if o.events != 100_000 || o.rounds != 6 || running(o) != "relay,relay3,plain,naive,forwarder,dblimit,kafkalimit,latency,write,claim,memory,wal" {
		t.Errorf("default: -events %d -rounds %d, scenarios %s", o.events, o.rounds, running(o))
	}
	o = apply("-profile", "peers", "-rounds", "2", "-skip", "relay3")
	if o.events != 50_000 || o.rounds != 2 || running(o) != "relay,plain,kafkalimit,wal,debezium,river" {
		t.Errorf("peers with -rounds 2 -skip relay3: -events %d -rounds %d, scenarios %s", o.events, o.rounds, running(o))
	}
	o = apply("-profile", "all")
	if o.events != 100_000 || running(o) != strings.Join(scenarioNames, ",") {
		t.Errorf("all: -events %d, scenarios %s", o.events, running(o))
	}
	if o = apply("-skip", "relay,relay3,naive,forwarder,dblimit,kafkalimit,latency,write,claim,memory,wal"); running(o) != "plain" {
		t.Errorf("default with every scenario but plain skipped: scenarios %s", running(o))
	}
	if o = apply("-skip", "plain,relay,relay3,naive,forwarder,dblimit,kafkalimit,latency,write,claim,memory,wal"); running(o) != "" {
		t.Errorf("default with every scenario skipped: scenarios %s, want none", running(o))
	}
	if _, err := profileNamed("quick"); err == nil || !strings.Contains(err.Error(), `"quick"`) {
		t.Errorf("unknown profile: %v, want an error naming it", err)
	}
}

// With -db mariadb a profile runs its scenarios that apply on MariaDB, and
// the flags that have no meaning there are refused with a reason.
func TestMariaDBProfiles(t *testing.T) {
	t.Parallel()
	on := func(profile string) options {
		t.Helper()
		p, err := profileNamed(profile)
		if err != nil {
			t.Fatal(err)
		}
		return options{db: dbMariaDB, profile: p, databaseURL: "mysql://u:secret@127.0.0.1:3306/db"}
	}
	o := on("default")
	if got := strings.Join(o.runs(), ","); got != "relay,relay3,plain,naive,forwarder,dblimit,kafkalimit,latency" {
		t.Errorf("default on MariaDB runs %s", got)
	}
	if got := strings.Join(o.leftOutOnMariaDB(), ","); got != "write,claim,memory,wal" {
		t.Errorf("default on MariaDB leaves out %s, want write,claim,memory,wal", got)
	}
	if err := o.validateMariaDB(); err != nil {
		t.Errorf("default on MariaDB: %v", err)
	}
	if got := strings.Join(on("peers").runs(), ","); got != "relay,relay3,plain,kafkalimit" {
		t.Errorf("peers on MariaDB runs %s", got)
	}
	if err := on("large").validateMariaDB(); err == nil || !strings.Contains(err.Error(), "leaves no scenario to run: large do not run on MariaDB") {
		t.Errorf("large on MariaDB: %v, want it refused: nothing of it runs there", err)
	}
	o = on("cost")
	o.statements, o.ownCluster = true, true // as the profile's flags set them
	if err := o.validateMariaDB(); err == nil || !strings.Contains(err.Error(), "-own-cluster with -db mariadb") {
		t.Errorf("cost on MariaDB: %v, want -own-cluster refused", err)
	}
	o = on("default")
	o.databaseURL = "postgres://u:secret@127.0.0.1/db"
	if err := o.validateMariaDB(); err == nil || !strings.Contains(err.Error(), "mysql://") || strings.Contains(err.Error(), "secret") {
		t.Errorf("a PostgreSQL URL with -db mariadb: %v, want it refused, without its password", err)
	}
	o = on("default")
	o.partitionSize = 1000
	if err := o.validateMariaDB(); err == nil || !strings.Contains(err.Error(), "-partition-size") || strings.Contains(err.Error(), "-profile") {
		t.Errorf("-partition-size on MariaDB: %v, want it refused, not blamed on the profile", err)
	}
}
