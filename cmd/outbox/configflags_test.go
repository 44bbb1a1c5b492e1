package main

import (
	"strings"
	"testing"
)

// Every flag configFlags names is one of outbox relay's.
func TestConfigFlagsAreRelayFlags(t *testing.T) {
	t.Parallel()
	code, _, usage := outbox(t, "relay", "-h")
	if code != 0 {
		t.Fatalf("relay -h: exit %d", code)
	}
	for field, flag := range configFlags {
		if !strings.Contains(usage, "  -"+flag+" ") && !strings.Contains(usage, "  -"+flag+"\n") {
			t.Errorf("%s: outbox relay has no flag -%s", field, flag)
		}
	}
}
