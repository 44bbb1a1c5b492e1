package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// ServiceNameDefault is the service.name of the relay's spans when
// OTEL_SERVICE_NAME does not set one.
const ServiceNameDefault = "outbox-relay"

// ReadyTimeoutDefault bounds the database ping of one readiness probe.
const ReadyTimeoutDefault = 2 * time.Second

// metricsServer serves /metrics, /healthz and /readyz for one relay.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
	mp  *sdkmetric.MeterProvider

	// largePayloads is set with --large-payloads: /readyz reports the
	// payload store's state (the relay's Health.LargePayloads), and fails
	// while it does not answer, as while the database does not.
	largePayloads bool
}

// metricsCardinalityLimit is the most attribute sets (series) the
// MeterProvider keeps per instrument and collection; past it, the SDK
// folds the measurements of new sets into one otel.metric.overflow series
// (totals stay right). The SDK's default, 2000, would fold a large
// group's tables: the relay's metrics carry one txoutbox.table per table
// served, its publish metrics the topic (and a failure's error type) too,
// so tables × topics (× error types) series each. 100,000 covers
// thousands of tenants with a few topics each.
const metricsCardinalityLimit = 100_000

// newMetricsServer listens on addr, before anything else is touched, so a
// taken port fails the start. The relay is given later with serve.
func newMetricsServer(addr string) (*metricsServer, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, usagef("--metrics-addr: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	m := &metricsServer{ln: ln, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithCardinalityLimit(metricsCardinalityLimit))}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return m, nil
}

// serve answers the probes for r until shutdown.
func (m *metricsServer) serve(r *relay.Relay, db *sql.DB, log *slog.Logger) {
	mux := m.srv.Handler.(*http.ServeMux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := r.Health()
		writeProbe(w, h.Running, map[string]any{"running": h.Running})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		h := r.Health()
		ctx, cancel := context.WithTimeout(req.Context(), ReadyTimeoutDefault)
		defer cancel()
		dbErr := db.PingContext(ctx)
		body := map[string]any{"running": h.Running, "heartbeating": h.Heartbeating, "incarnation": h.Incarnation,
			"since_heartbeat_seconds": h.SinceHeartbeat.Seconds(), "shards": h.Shards, "stalled": h.Stalled,
			"locked": h.Locked, "locked_seconds": h.LockedFor.Seconds(), "database": "ok"}
		if dbErr != nil {
			body["database"] = dbErr.Error()
		}
		storeOK := m.storeState(h.LargePayloads, body)
		writeProbe(w, h.Running && h.Heartbeating && !h.Stalled && dbErr == nil && storeOK, body)
	})
	go func() {
		if err := m.srv.Serve(m.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
}

// serveGroup answers the probes for a relay group until shutdown: it is
// healthy while Run runs, and ready while it serves at least one table,
// every table's relay is heartbeating and not stalled, and the database
// answers; /readyz lists the tables with their state. A table another
// session holds locked (relay.Health.Locked) is listed as locked and
// holds readiness back no more than it holds the other tables back: the
// lock is that session's doing, and no restart of the relay would end it.
func (m *metricsServer) serveGroup(g *relay.Group, db *sql.DB, log *slog.Logger) {
	mux := m.srv.Handler.(*http.ServeMux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeProbe(w, g.Running(), map[string]any{"running": g.Running()})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), ReadyTimeoutDefault)
		defer cancel()
		dbErr := db.PingContext(ctx)
		health := g.Health()
		ok := g.Running() && dbErr == nil && len(health) > 0 // serving nothing is not ready
		tables := []map[string]any{}
		for _, h := range health {
			ok = ok && h.Running && (h.Locked || h.Heartbeating && !h.Stalled)
			tables = append(tables, map[string]any{"table": tableName(h.Table), "running": h.Running, "heartbeating": h.Heartbeating,
				"incarnation": h.Incarnation, "since_heartbeat_seconds": h.SinceHeartbeat.Seconds(), "shards": h.Shards, "stalled": h.Stalled,
				"locked": h.Locked, "locked_seconds": h.LockedFor.Seconds()})
		}
		body := map[string]any{"running": g.Running(), "tables": tables, "database": "ok"}
		if dbErr != nil {
			body["database"] = dbErr.Error()
		}
		var storeErr error // the store's state, the same in every table's relay
		if len(health) > 0 {
			storeErr = health[0].LargePayloads
		}
		ok = m.storeState(storeErr, body) && ok
		writeProbe(w, ok, body)
	})
	go func() {
		if err := m.srv.Serve(m.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
}

// serveWAL answers the probes for a WAL relay until shutdown: it is
// healthy while Run runs, ready whether it streams or stands by (a standby
// is a working replica); /readyz says which.
func (m *metricsServer) serveWAL(r *walrelay.Relay, log *slog.Logger) {
	mux := m.srv.Handler.(*http.ServeMux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeProbe(w, r.Running(), map[string]any{"running": r.Running()})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		h := r.Health()
		body := map[string]any{"running": h.Running, "streaming": h.Streaming, "slot": r.Slot()}
		storeOK := m.storeState(h.LargePayloads, body)
		writeProbe(w, h.Running && storeOK, body)
	})
	go func() {
		if err := m.srv.Serve(m.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
}

func writeProbe(w http.ResponseWriter, ok bool, body map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	body["ok"] = ok
	_ = json.NewEncoder(w).Encode(body)
}

// shutdown stops serving; a scrape in progress gets a second to finish.
func (m *metricsServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	m.ln.Close()
	_ = m.mp.Shutdown(ctx)
}

// tracing returns the relay's TracerProvider from the standard OTEL_*
// variables, and a shutdown that flushes it. With none of them set, or
// OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true, it is a no-op
// provider: nothing is exported and the relay does no tracing work per
// event. Spans go over OTLP/HTTP; the exporter reads the endpoint,
// headers, certificates, compression and timeout from OTEL_EXPORTER_OTLP_*,
// the SDK the sampler from OTEL_TRACES_SAMPLER, and the resource from
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
func tracing(ctx context.Context, getenv func(string) (string, bool)) (trace.TracerProvider, func(), error) {
	env := func(name string) string { v, _ := getenv(name); return strings.TrimSpace(v) }
	off := tracenoop.NewTracerProvider()
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return off, func() {}, nil
	}
	switch exporter := env("OTEL_TRACES_EXPORTER"); exporter {
	case "none":
		return off, func() {}, nil
	case "":
		if env("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return off, func() {}, nil
		}
	case "otlp":
	default:
		return nil, nil, usagef("OTEL_TRACES_EXPORTER=%q: outbox exports spans over otlp only (or none)", exporter)
	}
	protocol := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return nil, nil, usagef("OTEL_EXPORTER_OTLP_PROTOCOL=%q: outbox speaks http/protobuf only (grpc would add a large dependency)", protocol)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, usagef("OTLP trace exporter: %v", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceNameDefault)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return nil, nil, usagef("OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	}, nil
}
