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
		{[]string{"relay", "--batch", "-1"}, "BatchSize is negative (-1)"},
		{[]string{"relay", "--heartbeat", "10s", "--stale-after", "5s"}, "StaleAfter (5s) must be at least twice HeartbeatInterval (10s)"},
		{[]string{"relay", "--log-level", "loud"}, "--log-level"},
		{[]string{"relay", "--table", "x; drop table y"}, "invalid table name"},
		{[]string{"relay", "--poll-interval", "soon"}, `invalid value "soon" for flag -poll-interval`},
		{[]string{"relay", "--lock-timeout", "10ms"}, "LockTimeout (10ms) is shorter than 100ms"},
		{[]string{"relay", "--lock-timeout", "20s"}, "LockTimeout (20s) is longer than StatementTimeout (10s)"},
		{[]string{"status", "--lock-timeout", "0s"}, "--lock-timeout must be positive"},
	})
}
