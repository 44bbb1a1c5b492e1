package relay

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Every duration and count has a floor, which Validate names with the
// value given; zero still takes the default, and a Config at every floor
// is valid.
func TestConfigFloors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{StatementTimeout: time.Nanosecond}, "StatementTimeout 1ns is below its floor 100ms"},
		{Config{StatementTimeout: time.Millisecond}, "StatementTimeout 1ms is below its floor 100ms"},
		{Config{PublishTimeout: time.Nanosecond}, "PublishTimeout 1ns is below its floor 100ms"},
		{Config{MaxInFlight: -5}, "MaxInFlight -5 is below its floor 1"},
		{Config{BatchSize: -1}, "BatchSize -1 is below its floor 1"},
		{Config{Lanes: -1}, "Lanes -1 is below its floor 1"},
		{Config{MaxAttempts: -1}, "MaxAttempts -1 is below its floor 1"},
		{Config{BatchBytes: -1}, "BatchBytes -1 is below its floor 1"},
		{Config{PollInterval: time.Millisecond}, "PollInterval 1ms is below its floor 10ms"},
		{Config{PollInterval: -time.Second}, "PollInterval -1s is below its floor 10ms"},
		{Config{ClaimCooldown: time.Microsecond}, "ClaimCooldown 1µs is below its floor 1ms"},
		{Config{ClaimCooldown: 2 * time.Second}, "ClaimCooldown 2s is longer than PollInterval (1s)"},
		{Config{HeartbeatInterval: time.Millisecond}, "HeartbeatInterval 1ms is below its floor 50ms"},
		{Config{StaleAfter: 500 * time.Millisecond}, "StaleAfter 500ms is below its floor 1s"},
		{Config{BackoffMin: time.Microsecond}, "BackoffMin 1µs is below its floor 1ms"},
		{Config{OutageBackoffMax: time.Microsecond}, "OutageBackoffMax 1µs is below its floor 1ms"},
		{Config{PruneInterval: time.Millisecond}, "PruneInterval 1ms is below its floor 10ms"},
		{Config{StatsInterval: time.Millisecond}, "StatsInterval 1ms is below its floor 10ms"},
		{Config{FlushInterval: time.Microsecond}, "FlushInterval 1µs is below its floor 1ms"},
		{Config{BatchSize: 100, MaxInFlight: 50}, "MaxInFlight 50 is below its floor, BatchSize (100)"},
		{Config{BackoffMin: time.Minute, BackoffMax: time.Second}, "BackoffMax 1s is below its floor, BackoffMin (1m0s)"},
		{Config{HeartbeatInterval: time.Second, LeaseDuration: 500 * time.Millisecond}, "LeaseDuration 500ms is below its floor, HeartbeatInterval (1s)"},
		{Config{HeartbeatInterval: time.Second, StaleAfter: time.Second}, "StaleAfter 1s is below its floor, twice HeartbeatInterval (2s)"},
		{Config{LargePayloads: LargePayloadsConfig{Over: 100}}, "LargePayloads.Over 100 is below its floor 1024"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v; want ErrInvalidConfig saying %q", err, c.want)
		}
	}
	atFloors := Config{BatchSize: 1, BatchBytes: 1, MaxInFlight: 1, MaxInFlightBytes: 1, Lanes: 1, LaneBatch: 1, MaxAttempts: 1, PruneBatch: 1,
		PollInterval: PollIntervalFloor, ClaimCooldown: ClaimCooldownFloor, HeartbeatInterval: HeartbeatIntervalFloor, LeaseDuration: HeartbeatIntervalFloor, StaleAfter: StaleAfterFloor,
		BackoffMin: BackoffMinFloor, BackoffMax: BackoffMinFloor, OutageBackoffMax: OutageBackoffMaxFloor, PruneInterval: PruneIntervalFloor,
		StatsInterval: StatsIntervalFloor, FlushInterval: FlushIntervalFloor, StatementTimeout: StatementTimeoutFloor, PublishTimeout: PublishTimeoutFloor,
		Retention: time.Nanosecond, LargePayloads: LargePayloadsConfig{Over: LargePayloadsOverFloor}}
	if err := atFloors.Validate(); err != nil {
		t.Errorf("a Config at every floor: %v", err)
	}
	if err := (Config{Retention: -1}).Validate(); err != nil {
		t.Errorf("negative Retention (never prune): %v", err)
	}
	// ClaimCooldown's default is PollInterval where that is shorter.
	c := Config{PollInterval: PollIntervalFloor}
	c.setDefaults()
	if c.ClaimCooldown != PollIntervalFloor {
		t.Errorf("ClaimCooldown with PollInterval %s = %s, want %[1]s", PollIntervalFloor, c.ClaimCooldown)
	}
	if err := c.validate(); err != nil {
		t.Errorf("PollInterval at its floor, ClaimCooldown default: %v", err)
	}
}
