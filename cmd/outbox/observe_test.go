package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay"
)

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

var servingAddr = regexp.MustCompile(`serving /metrics, /healthz and /readyz" addr=(\S+)`)

func TestMetricsAndProbes(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	brokers := kafkatest.New(t).ListenAddrs()
	for i := range 5 {
		e.write(t, "orders", "o-"+string(rune('a'+i)), "order.placed")
	}
	b := startOutbox(t, map[string]string{"OUTBOX_BROKERS": strings.Join(brokers, ",")},
		append([]string{"relay", "--metrics-addr", "127.0.0.1:0", "--poll-interval", "50ms", "--heartbeat", "100ms", "--stale-after", "1s", "--lease", "2s"}, e.flags...)...)
	b.waitOutput(t, "serving /metrics")
	base := "http://" + servingAddr.FindStringSubmatch(b.stderr.String())[1]

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || !strings.Contains(body, `"running":true`) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	var ready map[string]any
	waitFor(t, 10*time.Second, "/readyz to report 256 shards", func() bool {
		code, body := get(t, base+"/readyz")
		_ = json.Unmarshal([]byte(body), &ready)
		return code == http.StatusOK && ready["shards"] == float64(256) && ready["database"] == "ok"
	})
	waitFor(t, 10*time.Second, "five publishes in /metrics", func() bool {
		_, body := get(t, base+"/metrics")
		return strings.Contains(body, `txoutbox_relay_publish_duration_seconds_count{messaging_destination_name="orders"`) &&
			strings.Contains(body, `le="0.001"`) && strings.Contains(body, `messaging_client_sent_messages_total{messaging_destination_name="orders"`) &&
			strings.Contains(body, "txoutbox_relay_shards_owned") && strings.Contains(body, "go_goroutines")
	})

	// The relay cannot heartbeat: not ready, still live.
	e.exec(t, `ALTER TABLE outbox_relays RENAME TO outbox_relays_away`)
	waitFor(t, 10*time.Second, "/readyz to fail", func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusServiceUnavailable })
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while the database misbehaves; want 200 (restarting does not help)", code)
	}
	e.exec(t, `ALTER TABLE outbox_relays_away RENAME TO outbox_relays`)
	waitFor(t, 10*time.Second, "/readyz to recover", func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK })

	b.wantCleanStop(t)
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("the endpoints still answer after the relay stopped")
	}
}

// otlpReceiver collects the spans posted to /v1/traces.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string]map[string]string // name → attributes
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				attrs := map[string]string{}
				for _, kv := range append(rs.Resource.Attributes, s.Attributes...) {
					attrs[kv.Key] = kv.Value.GetStringValue()
				}
				o.spans[s.Name] = attrs
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// OTEL_EXPORTER_OTLP_ENDPOINT turns on export over OTLP/HTTP. Not parallel:
// the exporter reads the process's environment.
func TestTracingExportsOverOTLP(t *testing.T) {
	recv := &otlpReceiver{spans: map[string]map[string]string{}}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "orders-relay")
	e := newOps(t)
	brokers := kafkatest.New(t).ListenAddrs()
	id, _ := e.write(t, "orders", "o-1", "order.placed")
	env := map[string]string{"OUTBOX_BROKERS": strings.Join(brokers, ","), "OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}
	b := startOutbox(t, env, append([]string{"relay", "--poll-interval", "50ms"}, e.flags...)...)
	waitFor(t, 20*time.Second, "the event published", func() bool { s, _ := e.state(t, id); return s == "published" })
	b.stop(t) // flushes the spans
	recv.mu.Lock()
	defer recv.mu.Unlock()
	span, ok := recv.spans["send orders"]
	if !ok {
		t.Fatalf("no span 'send orders' exported; got %v", recv.spans)
	}
	if span["messaging.system"] != "kafka" || span["service.name"] != "orders-relay" {
		t.Errorf("span attributes %v", span)
	}
}

func TestNoTracingWithoutOTELVariables(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
		{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
	} {
		tp, stop, err := tracing(t.Context(), mapEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if _, off := tp.(tracenoop.TracerProvider); !off {
			t.Errorf("%v: tracer provider %T, want the no-op one", env, tp)
		}
	}
}

// The CLI's MeterProvider keeps a series per table of a group of more
// tables than the SDK's default cardinality limit (2000): none lands in
// the otel.metric.overflow series, for a gauge observed per table (as
// txoutbox.relay.shards.owned is) nor a counter per table and topic (as
// the publish metrics are).
func TestMetricsServerReportsEveryTableOfAGroupPastTheSDKDefaultLimit(t *testing.T) {
	m, err := newMetricsServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go m.srv.Serve(m.ln) //nolint:errcheck // until shutdown
	defer m.shutdown()
	meter := m.mp.Meter("github.com/txoutbox/txoutbox/relay")
	const tables = 2100
	sets := make([]metric.ObserveOption, tables)
	for i := range sets {
		sets[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String(relay.TableAttribute, fmt.Sprintf("tenant_%04d.outbox", i))))
	}
	g, err := meter.Int64ObservableGauge("test.shards.owned", metric.WithUnit("{shard}"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, set := range sets {
			o.ObserveInt64(g, 4, set)
		}
		return nil
	}, g); err != nil {
		t.Fatal(err)
	}
	c, err := meter.Int64Counter("test.published")
	if err != nil {
		t.Fatal(err)
	}
	for i := range tables {
		for _, topic := range []string{"orders", "invoices"} {
			c.Add(context.Background(), 1, metric.WithAttributes(attribute.String(relay.TableAttribute, fmt.Sprintf("tenant_%04d.outbox", i)),
				attribute.String("messaging.destination.name", topic)))
		}
	}
	_, body := get(t, "http://"+m.ln.Addr().String()+"/metrics")
	gauge, counter := 0, 0
	for line := range strings.SplitSeq(body, "\n") {
		switch {
		case strings.HasPrefix(line, "test_shards_owned") && strings.Contains(line, `txoutbox_table="tenant_`):
			gauge++
		case strings.HasPrefix(line, "test_published") && strings.Contains(line, `txoutbox_table="tenant_`):
			counter++
		}
	}
	if gauge != tables || counter != 2*tables {
		t.Errorf("series with a table: gauge %d of %d, counter %d of %d", gauge, tables, counter, 2*tables)
	}
	if strings.Contains(body, "otel_metric_overflow") {
		t.Error("an otel_metric_overflow series")
	}
}
