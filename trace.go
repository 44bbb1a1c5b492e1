package txoutbox

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceHeaders returns the headers the propagator injects for the span in
// ctx, or nil when ctx carries no valid span. The check comes first so a
// write without tracing allocates nothing here. A nil p is the default:
// the global propagator once the application set one, W3C trace context
// until then (the global default propagates nothing, which would silently
// drop every link from a publish to its write).
func traceHeaders(ctx context.Context, p propagation.TextMapPropagator) propagation.MapCarrier {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	if p == nil {
		if p = otel.GetTextMapPropagator(); len(p.Fields()) == 0 {
			p = propagation.TraceContext{}
		}
	}
	c := propagation.MapCarrier{}
	p.Inject(ctx, c)
	if len(c) == 0 {
		return nil
	}
	return c
}

// encodeHeaders renders an event's headers column. The captured trace
// context is added unless the event already carries any of its headers: a
// caller that set traceparent itself (say, an event relayed on behalf of
// another request) keeps its trace context whole rather than mixed with
// ours.
func encodeHeaders(own map[string]string, traced propagation.MapCarrier) (string, error) {
	if len(traced) > 0 {
		for k := range traced {
			if _, set := own[k]; set {
				traced = nil
				break
			}
		}
	}
	if len(own) == 0 && len(traced) == 0 {
		return "{}", nil
	}
	merged := own
	if len(traced) > 0 {
		// A copy: the caller's map may be shared between events or requests.
		merged = make(map[string]string, len(own)+len(traced))
		for k, v := range own {
			merged[k] = v
		}
		for k, v := range traced {
			merged[k] = v
		}
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return "", fmt.Errorf("txoutbox: encode headers: %w", err)
	}
	return string(b), nil
}
