package main

import (
	"strings"
	"testing"
	"time"
)

func TestRelayRefusesToStartWithoutBrokers(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	id, _ := e.write(t, "orders", "o-1", "order.placed")

	// No --brokers, no OUTBOX_BROKERS, no KAFKA_BROKERS: exit 2 naming both
	// fixes, and nothing claimed or registered.
	code, _, errOut := outboxEnv(t, nil, append([]string{"relay"}, e.flags...)...)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, errOut)
	}
	for _, want := range []string{"--brokers", "OUTBOX_BROKERS", "KAFKA_BROKERS", "--dev-broker"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not mention %s", errOut, want)
		}
	}
	if state, attempts := e.state(t, id); state != "pending" || attempts != 0 {
		t.Errorf("row is %s after %d attempts, want pending and untouched", state, attempts)
	}
	var relays int
	if err := e.db.SQL.QueryRow(`SELECT count(*) FROM outbox_relays`).Scan(&relays); err != nil {
		t.Fatal(err)
	}
	if relays != 0 {
		t.Errorf("%d relays registered, want none", relays)
	}

	// An empty KAFKA_BROKERS is no broker either.
	code, _, errOut = outboxEnv(t, map[string]string{"KAFKA_BROKERS": " , "}, append([]string{"relay"}, e.flags...)...)
	if code != exitUsage || !strings.Contains(errOut, "--dev-broker") {
		t.Errorf("KAFKA_BROKERS=' , ': exit %d, stderr %q", code, errOut)
	}
	// Both ways at once is ambiguous.
	code, _, errOut = outboxEnv(t, map[string]string{"KAFKA_BROKERS": "kafka:9092"}, append([]string{"relay", "--dev-broker"}, e.flags...)...)
	if code != exitUsage || !strings.Contains(errOut, "give one or the other") {
		t.Errorf("--dev-broker with KAFKA_BROKERS: exit %d, stderr %q", code, errOut)
	}
}

func TestRelayDevBrokerIsLoud(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	id, _ := e.write(t, "orders", "o-1", "order.placed")
	b := startOutbox(t, nil, append([]string{"relay", "--dev-broker", "--poll-interval", "50ms"}, e.flags...)...)
	waitFor(t, 20*time.Second, "the event published", func() bool { s, _ := e.state(t, id); return s == "published" })
	if log := b.stderr.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "DEVELOPMENT BROKER") || !strings.Contains(log, "LOST when this process exits") {
		t.Errorf("log does not warn about the development broker:\n%s", log)
	}
	b.wantCleanStop(t)
}

func TestRelayUsageErrors(t *testing.T) {
	t.Parallel()
	wantUsageErrors(t, outbox, []usageCase{
		{[]string{"relay", "--batch", "-1"}, "--batch -1 is below its floor 1"},
		{[]string{"relay", "--heartbeat", "10s", "--stale-after", "5s"}, "--stale-after 5s is below its floor, twice --heartbeat (20s)"},
		{[]string{"relay", "--log-level", "loud"}, "--log-level"},
		{[]string{"relay", "--table", "x; drop table y"}, "invalid table name"},
		{[]string{"relay", "--poll-interval", "soon"}, `invalid value "soon" for flag -poll-interval`},
		{[]string{"relay", "--lock-timeout", "10ms"}, "--lock-timeout 10ms is below its floor 100ms"},
		{[]string{"relay", "--lock-timeout", "20s"}, "--lock-timeout 20s is longer than --statement-timeout (10s)"},
		{[]string{"status", "--lock-timeout", "0s"}, "--lock-timeout must be positive"},
	})
}

// A duration or count below its floor is a usage error naming the flag
// and the floor, found before the database or a broker is touched.
func TestRelayRefusesFlagsBelowTheirFloors(t *testing.T) {
	t.Parallel()
	// A database and brokers nothing listens on: a flag let through would
	// fail on them (exit 1), not as bad usage.
	base := []string{"relay", "--database-url", "postgres://nobody@127.0.0.1:1/none", "--brokers", "127.0.0.1:1"}
	with := func(args ...string) []string { return append(append([]string{}, base...), args...) }
	var cases []usageCase
	for _, c := range []struct{ flag, value, msg string }{
		{"--statement-timeout", "1ns", "--statement-timeout 1ns is below its floor 100ms"},
		{"--statement-timeout", "1ms", "--statement-timeout 1ms is below its floor 100ms"},
		{"--publish-timeout", "1ns", "--publish-timeout 1ns is below its floor 100ms"},
		{"--max-in-flight", "-5", "--max-in-flight -5 is below its floor 1"},
		{"--max-in-flight", "10", "--max-in-flight 10 is below its floor, --batch (1000)"},
		{"--batch", "-1", "--batch -1 is below its floor 1"},
		{"--lanes", "-1", "--lanes -1 is below its floor 1"},
		{"--max-attempts", "-1", "--max-attempts -1 is below its floor 1"},
		{"--poll-interval", "1ms", "--poll-interval 1ms is below its floor 10ms"},
		{"--heartbeat", "1ms", "--heartbeat 1ms is below its floor 50ms"},
		{"--lease", "1s", "--lease 1s is below its floor, --heartbeat (2s)"},
		{"--backoff-min", "1ns", "--backoff-min 1ns is below its floor 1ms"},
		{"--outage-backoff-max", "1ns", "--outage-backoff-max 1ns is below its floor 1ms"},
		{"--prune-interval", "1ns", "--prune-interval 1ns is below its floor 10ms"},
	} {
		cases = append(cases, usageCase{with(c.flag, c.value), c.msg})
	}
	cases = append(cases,
		usageCase{with("--mode", "wal", "--max-in-flight", "-5"), "--max-in-flight -5 is below its floor 1"},
		usageCase{with("--mode", "wal", "--standby-retry", "1ms"), "--standby-retry 1ms is below its floor 100ms"},
		usageCase{with("--mode", "wal", "--cleanup-interval", "1ns"), "--cleanup-interval 1ns is below its floor 10ms"},
		usageCase{with("--mode", "wal", "--statement-timeout", "1ms"), "--statement-timeout 1ms is below its floor 100ms"},
		usageCase{with("--schemas", "tenant_*", "--discover-interval", "1ms"), "--discover-interval 1ms is below its floor 100ms"},
	)
	wantUsageErrors(t, outbox, cases)
}

// --dev-broker starts nothing, and warns of nothing, before the flags and
// the database are known to be good.
func TestRelayDevBrokerStartsAfterValidation(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"relay", "--dev-broker"},
		{"relay", "--dev-broker", "--database-url", "postgres://nobody@127.0.0.1:1/none", "--statement-timeout", "1ms"},
	} {
		code, out, errOut := outbox(t, args...)
		if code != exitUsage || strings.Contains(errOut+out, "DEVELOPMENT BROKER") {
			t.Errorf("outbox %v: exit %d, stderr %q; want exit 2 and no broker started", args, code, errOut)
		}
	}
	// Nor when the database is unreachable.
	code, _, errOut := outbox(t, "relay", "--dev-broker", "--database-url", "postgres://nobody@127.0.0.1:1/none")
	if code != 1 || strings.Contains(errOut, "DEVELOPMENT BROKER") {
		t.Errorf("unreachable database: exit %d, stderr %q; want exit 1 and no broker started", code, errOut)
	}
}
