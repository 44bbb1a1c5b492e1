package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay/internal/storetest"
)

// Health reports the claim check's store when it can be checked: its
// error, naming it, fails a library user's readiness as it fails the
// CLI's /readyz; a store without Check, or none, reports nothing.
func TestHealthReportsTheLargePayloadStore(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	store := storetest.NewChecked(errors.New("claimcheck: store s3://payloads: the bucket does not exist"))
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		LargePayloads: LargePayloadsConfig{Store: store}})
	if r.Health().LargePayloads == nil {
		t.Error("Health before the store's first check: LargePayloads is nil, want an error (not checked yet)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.WaitFor(t, 10*time.Second, "Health to name the failing store", func() bool {
		err := r.Health().LargePayloads
		return err != nil && strings.Contains(err.Error(), "s3://payloads")
	})

	for name, s := range map[string]LargePayloads{"no Check": storetest.Unchecked{}, "no store": nil} {
		r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r2", Logger: slog.New(slog.DiscardHandler),
			LargePayloads: LargePayloadsConfig{Store: s}})
		if err := r.Health().LargePayloads; err != nil {
			t.Errorf("%s: Health().LargePayloads = %v, want nil", name, err)
		}
	}
}
