package txoutbox

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
)

// The write path without a span must stay allocation-free in the trace
// capture: most writes in most services are not traced.
func TestTraceCaptureWithoutSpanDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	p := propagation.TraceContext{}
	allocs := testing.AllocsPerRun(100, func() {
		if traceHeaders(ctx, p) != nil {
			t.Fatal("headers captured without a span")
		}
		if h, _ := encodeHeaders(nil, nil); h != "{}" {
			t.Fatalf("empty headers encoded as %q", h)
		}
	})
	if allocs != 0 {
		t.Errorf("trace capture without a span allocates %.0f times per write, want 0", allocs)
	}
}
