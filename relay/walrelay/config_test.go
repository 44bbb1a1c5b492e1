package walrelay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/relay"
)

// Every duration and count has a floor, which Validate names with the
// value given; a Config at every floor is valid.
func TestConfigFloors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{StatementTimeout: time.Millisecond}, "StatementTimeout 1ms is below its floor 100ms"},
		{Config{MaxInFlight: -5}, "MaxInFlight -5 is below its floor 1"},
		{Config{Lanes: -1}, "Lanes -1 is below its floor 1"},
		{Config{CleanupBatch: -1}, "CleanupBatch -1 is below its floor 1"},
		{Config{BackoffMin: time.Microsecond}, "BackoffMin 1µs is below its floor 1ms"},
		{Config{BackoffMin: time.Minute, BackoffMax: time.Second}, "BackoffMax 1s is below its floor, BackoffMin (1m0s)"},
		{Config{FlushInterval: time.Microsecond}, "FlushInterval 1µs is below its floor 1ms"},
		{Config{PingInterval: time.Millisecond}, "PingInterval 1ms is below its floor 10ms"},
		{Config{SenderTimeout: 100 * time.Millisecond}, "SenderTimeout 100ms is below its floor 1s"},
		{Config{StandbyRetry: time.Millisecond}, "StandbyRetry 1ms is below its floor 100ms"},
		{Config{CleanupInterval: time.Millisecond}, "CleanupInterval 1ms is below its floor 10ms"},
		{Config{StatsInterval: -time.Second}, "StatsInterval -1s is below its floor 10ms"},
		{Config{LargePayloads: relay.LargePayloadsConfig{Over: 100}}, "LargePayloads.Over 100 is below its floor 1024"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v; want ErrInvalidConfig saying %q", err, c.want)
		}
	}
	atFloors := Config{Lanes: 1, LaneBatch: 1, MaxInFlight: 1, MaxAttempts: 1, CleanupBatch: 1, BackoffMin: BackoffMinFloor, BackoffMax: BackoffMinFloor,
		FlushInterval: FlushIntervalFloor, PingInterval: SenderTimeoutFloor / 4, SenderTimeout: SenderTimeoutFloor, StandbyRetry: StandbyRetryFloor,
		CleanupInterval: CleanupIntervalFloor, StatementTimeout: StatementTimeoutFloor, StatsInterval: StatsIntervalFloor, Retention: -1}
	if err := atFloors.Validate(); err != nil {
		t.Errorf("a Config at every floor: %v", err)
	}
}
