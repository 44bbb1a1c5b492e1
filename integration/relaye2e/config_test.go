package relaye2e

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
)

func testkitReopen(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	db, _ := sql.Open("pgx", "postgres://unused")
	pub := &flakyPublisher{}
	for _, tc := range []struct {
		cfg relay.Config
		msg string
	}{
		{relay.Config{Table: txoutbox.Table{Name: "x; drop table y"}}, "invalid table name"},
		{relay.Config{BatchSize: -1}, "BatchSize -1 is below its floor 1"},
		{relay.Config{PollInterval: -time.Second}, "PollInterval -1s is below its floor 10ms"},
		{relay.Config{BatchSize: 100, MaxInFlight: 50}, "MaxInFlight 50 is below its floor, BatchSize (100)"},
		{relay.Config{BackoffMin: time.Minute, BackoffMax: time.Second}, "BackoffMax 1s is below its floor, BackoffMin (1m0s)"},
		{relay.Config{HeartbeatInterval: time.Second, StaleAfter: time.Second}, "StaleAfter 1s is below its floor, twice HeartbeatInterval (2s)"},
		{relay.Config{HeartbeatInterval: time.Second, LeaseDuration: time.Millisecond}, "LeaseDuration 1ms is below its floor, HeartbeatInterval (1s)"},
	} {
		_, err := relay.New(db, pub, tc.cfg)
		if !errors.Is(err, relay.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("New(%+v) = %v; want ErrInvalidConfig mentioning %q", tc.cfg, err, tc.msg)
		}
	}
	if _, err := relay.New(nil, pub, relay.Config{}); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Errorf("New(nil db) = %v", err)
	}
	if _, err := relay.New(db, nil, relay.Config{}); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Errorf("New(nil publisher) = %v", err)
	}
	if _, err := relay.New(db, pub, relay.Config{}); err != nil {
		t.Errorf("New with the zero Config = %v", err)
	}
}

func TestConfigValidateMatchesNew(t *testing.T) {
	t.Parallel()
	if err := (relay.Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	bad := relay.Config{BatchSize: 100, MaxInFlight: 10}
	if err := bad.Validate(); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Fatalf("Validate(MaxInFlight < BatchSize) = %v, want ErrInvalidConfig", err)
	}
	if bad.Lanes != 0 {
		t.Fatal("Validate changed its receiver")
	}
}
