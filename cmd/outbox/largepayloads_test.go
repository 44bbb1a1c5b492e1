package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// A store URL the claim check cannot use, or a claim check flag without
// one, is bad usage naming the flag, found before the database or a
// broker is touched; so is the store's URL from the environment.
func TestRelayRefusesBadLargePayloadFlags(t *testing.T) {
	t.Parallel()
	base := []string{"relay", "--database-url", "postgres://nobody@127.0.0.1:1/none", "--brokers", "127.0.0.1:1"}
	with := func(args ...string) []string { return append(append([]string{}, base...), args...) }
	wantUsageErrors(t, outbox, []usageCase{
		{with("--large-payloads", "ftp://host/x"), `--large-payloads: claimcheck: invalid config: store URL "ftp://host/x": unknown scheme "ftp"`},
		{with("--large-payloads", "/var/lib/payloads"), "--large-payloads: claimcheck: invalid config: store URL \"/var/lib/payloads\" has no scheme"},
		{with("--large-payloads", "s3://bucket?bogus=1"), "--large-payloads: "},
		{with("--large-payloads", "file:///nonexistent/dir"), "--large-payloads: "},
		{with("--large-payloads", "mem://", "--large-payloads-over", "100"), "--large-payloads-over 100 is below its floor 1024"},
		{with("--mode", "wal", "--large-payloads", "mem://", "--large-payloads-over", "100"), "--large-payloads-over 100 is below its floor 1024"},
		{with("--large-payloads", "mem://", "--large-payloads-retention", "1s"), "--large-payloads-retention: claimcheck: invalid config: Retention 1s is below its floor 1m0s"},
		{with("--large-payloads-over", "5000"), "--large-payloads-over is for the claim check: set --large-payloads too"},
	})
	code, _, errOut := outboxEnv(t, map[string]string{"OUTBOX_LARGE_PAYLOADS": "ftp://host/x"}, base...)
	if code != exitUsage || !strings.Contains(errOut, "--large-payloads") || !strings.Contains(errOut, `unknown scheme "ftp"`) {
		t.Errorf("OUTBOX_LARGE_PAYLOADS=ftp://host/x: exit %d, stderr %q; want exit 2 naming the flag", code, errOut)
	}
}

// outbox relay --large-payloads publishes an event too large for the
// broker as a reference whose payload is in the store, and /readyz fails,
// naming the store, while the store is away.
func TestRelayOffloadsLargePayloads(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	brokers := kafkatest.New(t).ListenAddrs()
	dir := t.TempDir()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: e.db.Table(), MaxPayloadBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	big := `{"doc":"` + strings.Repeat("z", 900<<10) + `"}`
	ev, err := txoutbox.NewEvent("docs", "doc", "d-1", "doc.stored", json.RawMessage(big))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Commit(t, context.Background(), e.db.SQL, w, ev)

	b := startOutbox(t, map[string]string{"OUTBOX_BROKERS": strings.Join(brokers, ","), "OUTBOX_LARGE_PAYLOADS": "file://" + dir},
		append([]string{"relay", "--metrics-addr", "127.0.0.1:0", "--poll-interval", "50ms", "--heartbeat", "100ms", "--stale-after", "1s", "--lease", "2s"}, e.flags...)...)
	b.waitOutput(t, "serving /metrics")
	base := "http://" + servingAddr.FindStringSubmatch(b.stderr.String())[1]

	store, err := claimcheck.Open(context.Background(), "file://"+dir, claimcheck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var payload []byte
	err = kafkatest.Consume(ctx, brokers, []string{"docs"}, 0, func(r *kgo.Record) bool {
		md := map[string]string{}
		for _, h := range r.Headers {
			md[h.Key] = string(h.Value)
		}
		if payload, err = store.Fetch(ctx, md); err != nil {
			t.Errorf("fetch the record's payload: %v (headers %v)", err, md)
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(payload) != big {
		t.Fatalf("fetched %d bytes, want the %d written", len(payload), len(big))
	}
	waitFor(t, 10*time.Second, "/readyz to pass with the store", func() bool {
		code, body := get(t, base+"/readyz")
		return code == http.StatusOK && strings.Contains(body, `"large_payloads":"ok"`)
	})

	// The store fails (its directory a file: permissions do not stop
	// root) under the next large event.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev2, err := txoutbox.NewEvent("docs", "doc", "d-2", "doc.stored", json.RawMessage(big))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Commit(t, context.Background(), e.db.SQL, w, ev2)
	waitFor(t, 30*time.Second, "/readyz to fail naming the store", func() bool {
		code, body := get(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "file://"+dir)
	})
	b.wantCleanStop(t)
}
