package kafkapub

import (
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestSaramaConfigIsIdempotentAndOrdered(t *testing.T) {
	t.Parallel()
	sc, err := Config{}.sarama()
	if err != nil {
		t.Fatal(err)
	}
	if !sc.Producer.Idempotent || sc.Producer.RequiredAcks != sarama.WaitForAll || sc.Net.MaxOpenRequests != 1 {
		t.Errorf("idempotent=%v acks=%v max_open_requests=%d, want true, all, 1",
			sc.Producer.Idempotent, sc.Producer.RequiredAcks, sc.Net.MaxOpenRequests)
	}
	// The escape hatch for brokers that refuse idempotent writes.
	sc, err = Config{Configure: func(sc *sarama.Config) { sc.Producer.Idempotent = false }}.sarama()
	if err != nil || sc.Producer.Idempotent {
		t.Errorf("Configure turning idempotence off: idempotent=%v, err=%v", sc != nil && sc.Producer.Idempotent, err)
	}
}

// Linger is Sarama's flush frequency: LingerDefault unless set, none when
// negative (every buffer sent as soon as it can be).
func TestSaramaConfigLingers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		linger, want time.Duration
	}{{0, LingerDefault}, {20 * time.Millisecond, 20 * time.Millisecond}, {-1, 0}} {
		sc, err := Config{Linger: c.linger}.sarama()
		if err != nil {
			t.Fatal(err)
		}
		if sc.Producer.Flush.Frequency != c.want {
			t.Errorf("Linger %v: Flush.Frequency %v, want %v", c.linger, sc.Producer.Flush.Frequency, c.want)
		}
	}
}

func TestSaramaConfigRefusesALingerAsLongAsTheTimeout(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Linger: 10 * time.Second}, {Linger: time.Second, Timeout: time.Second}} {
		if _, err := cfg.sarama(); err == nil || !strings.Contains(err.Error(), "not below Timeout") {
			t.Errorf("Linger %v, Timeout %v: %v; want refused", cfg.Linger, cfg.Timeout, err)
		}
	}
}

// Timeout and MaxMessageBytes have floors, which Validate and
// NewPublisher name; zero takes the default.
func TestValidateFloors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Timeout: time.Nanosecond}, "Timeout 1ns is below its floor 100ms"},
		{Config{Timeout: -time.Second}, "Timeout -1s is below its floor 100ms"},
		{Config{MaxMessageBytes: 10}, "MaxMessageBytes 10 is below its floor 1024"},
		{Config{MaxMessageBytes: -1}, "MaxMessageBytes -1 is below its floor 1024"},
		{Config{Linger: 10 * time.Second}, "Linger 10s is not below Timeout 10s"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v; want %q", err, c.want)
		}
		if _, err := NewPublisher([]string{"127.0.0.1:1"}, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewPublisher = %v; want %q", err, c.want)
		}
	}
	for _, cfg := range []Config{{}, {Timeout: TimeoutFloor, MaxMessageBytes: MaxMessageBytesFloor, Linger: -1}} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", cfg, err)
		}
	}
}
