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
