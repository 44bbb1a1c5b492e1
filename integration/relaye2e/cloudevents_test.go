package relaye2e

import (
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// With CloudEvents on, a record carries the binary-mode headers beside the
// relay's own.
func TestCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := b.write(t, "ce", 1, 1)
	cfg := b.fastConfig()
	cfg.CloudEvents = relay.CloudEventsConfig{Enabled: true, Source: "/orders-service"}
	runRelay(t, b.db, b.kafkaPublisher(t, kafkapub.Config{}), cfg)
	rec := firstRecord(t, b.brokers, "ce")
	h := recordHeaders(rec)
	for k, v := range map[string]string{
		"ce_specversion": "1.0", "ce_id": want[0].id, "ce_type": "order.changed", "ce_source": "/orders-service",
		"content-type": "application/json", txoutbox.HeaderEventID: want[0].id,
	} {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
	if ts, err := time.Parse(time.RFC3339Nano, h["ce_time"]); err != nil || time.Since(ts) > time.Minute {
		t.Errorf("ce_time %q: %v", h["ce_time"], err)
	}
}
