package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// largePayloadsPruneInterval is how often `outbox relay --large-payloads`
// prunes the store: a prune lists the whole prefix, and objects live for
// days.
const largePayloadsPruneInterval = time.Hour

// largePayloadFlags are the claim check's flags of `outbox relay`.
type largePayloadFlags struct {
	url       string
	over      int
	retention time.Duration
}

func (l *largePayloadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.url, "large-payloads", "", "store payloads of events too large for the broker here and publish a reference instead (claim check): "+
		"s3://bucket?region=…[&endpoint=…&use_path_style=true] or file:///path (empty: off; docs/large-payloads.md)")
	fs.IntVar(&l.over, "large-payloads-over", 0, fmt.Sprintf("with --large-payloads: offload events whose record would pass this many bytes (0: %d, three quarters of the producer's largest record, Kafka's default 1 MB; at least %d)",
		kafkapub.MaxMessageBytesDefault/4*3, relay.LargePayloadsOverFloor))
	fs.DurationVar(&l.retention, "large-payloads-retention", claimcheck.RetentionDefault, "with --large-payloads: delete stored payloads this long after their last upload (hourly); longer than any consumer lags")
}

// open opens the store the flags name, without a request to it: nil
// without --large-payloads. A bad URL or value is a usage error naming
// the flag.
func (l *largePayloadFlags) open(ctx context.Context, fs *flag.FlagSet) (*claimcheck.Store, error) {
	if l.url == "" {
		for _, f := range []string{"large-payloads-over", "large-payloads-retention"} {
			if flagSet(fs, f) {
				return nil, usagef("--%s is for the claim check: set --large-payloads too", f)
			}
		}
		return nil, nil
	}
	cfg := claimcheck.Config{Retention: l.retention}
	if err := cfg.Validate(); err != nil {
		return nil, usagef("--large-payloads-retention: %v", err)
	}
	s, err := claimcheck.Open(ctx, l.url, cfg)
	if err != nil {
		return nil, usagef("--large-payloads: %v", err)
	}
	return s, nil
}

// startLargePayloads checks the store once, warning (not failing: it may
// come back, and /readyz tells) when it does not answer, and prunes it
// every largePayloadsPruneInterval until ctx ends; wait waits for that.
func startLargePayloads(ctx context.Context, s *claimcheck.Store, log *slog.Logger) (wait func()) {
	if s == nil {
		return func() {}
	}
	if err := s.Check(ctx); err != nil {
		log.Warn("claim check: the payload store does not answer; events over the threshold wait until it does (/readyz fails meanwhile)", "err", err)
	} else {
		log.Info("claim check: storing large payloads", "store", s.Name())
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(largePayloadsPruneInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n, err := s.Prune(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("claim check: prune of the payload store failed; trying again in an hour", "deleted", n, "err", err)
			case n > 0:
				log.Info("claim check: pruned stored payloads past their retention", "deleted", n)
			}
		}
	})
	return wg.Wait
}

// storeState adds the payload store's state, err (the relay's
// Health.LargePayloads), to a /readyz body with --large-payloads, and
// reports whether it lets the relay be ready.
func (m *metricsServer) storeState(err error, body map[string]any) bool {
	if !m.largePayloads {
		return true
	}
	if err != nil {
		body["large_payloads"] = err.Error()
		return false
	}
	body["large_payloads"] = "ok"
	return true
}
