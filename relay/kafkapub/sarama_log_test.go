package kafkapub_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

func TestSaramaLoggerLevels(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := kafkapub.SaramaLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, c := range []struct{ line, level string }{
		{"client/metadata fetching metadata for all topics from broker 127.0.0.1:9092", "DEBUG"},
		{"Failed to connect to broker 127.0.0.1:9092: dial tcp: connection refused", "WARN"},
		{"producer/broker/1 state change to [retrying] because kafka server: Request exceeded the user-specified time limit in the request (timeout)", "WARN"},
		// The idempotent producer's start: a success carrying the
		// response's "Not an error" code.
		{"txnmgr/init-producer-id [] successful init producer id &{ThrottleTime:0s Err:kafka server: Not an error, why are you printing me? Version:4 ProducerID:1 ProducerEpoch:0}", "DEBUG"},
	} {
		buf.Reset()
		l.Printf("%s", c.line)
		if got := buf.String(); !strings.Contains(got, "level="+c.level+" ") {
			t.Errorf("%q logged as %s, want level %s", c.line, strings.TrimSpace(got), c.level)
		}
	}
}
