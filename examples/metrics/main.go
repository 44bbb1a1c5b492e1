// Command metrics runs a relay that exports its OpenTelemetry metrics to
// Prometheus, and an order service writing events, so /metrics shows the
// outbox's lag, backlog, dead events and publish rates moving.
//
//	go run ./examples/metrics                # then: curl -s localhost:9464/metrics | grep txoutbox
//	go run ./examples/metrics -once          # print one scrape after a few seconds and exit
//
// It uses DATABASE_URL, or the local PostgreSQL with trust auth, and works in
// its own schema "txoutbox_metrics_example", recreated on every run (a
// database of that name with a mysql:// DATABASE_URL). It
// publishes to KAFKA_BROKERS, or to an embedded Kafka-protocol broker (kfake)
// on a loopback port when that is empty.
//
// The service writes a backlog first, so the lag starts high and falls as
// the relay drains it, then a steady trickle; one event is larger than the
// broker accepts, so it fails, is retried and goes dead.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/examples/internal/demo"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

const schema = "txoutbox_metrics_example"

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "serve /metrics here")
	once := flag.Bool("once", false, "print the txoutbox metrics of one scrape after 5s and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	demo.Main(ctx, func(ctx context.Context, databaseURL string) error { return run(ctx, databaseURL, *addr, *once) })
}

func run(ctx context.Context, databaseURL, addr string, once bool) error {
	o, err := demo.Schema(ctx, databaseURL, schema)
	if err != nil {
		return err
	}
	db, table := o.DB, o.Table
	defer db.Close()

	// Metrics: an OpenTelemetry MeterProvider read by the Prometheus
	// exporter, on a registry of our own, served at /metrics.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.Background()) //nolint:errcheck // best effort at exit
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)                         //nolint:errcheck // ends with Shutdown
	defer srv.Shutdown(context.Background()) //nolint:errcheck // best effort at exit
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Printf("metrics at %s\n", url)

	brokers, stopBroker, err := demo.Brokers()
	if err != nil {
		return err
	}
	defer stopBroker()
	// A small broker limit, so the example's one oversized event goes dead.
	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{MaxMessageBytes: 64 << 10})
	if err != nil {
		return err
	}
	defer pub.Close()
	r, err := relay.New(db, pub, relay.Config{
		Table:         table,
		MeterProvider: meters,
		StatsInterval: time.Second, // refresh the lag and backlog gauges often for the demo
		MaxAttempts:   3,
		BackoffMin:    100 * time.Millisecond,
		BackoffMax:    time.Second,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}

	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: table, Dialect: o.Dialect})
	if err != nil {
		return err
	}
	// A backlog written before the relay starts: the lag gauge shows its age.
	if err := writeOrders(ctx, db, w, 0, 2000); err != nil {
		return err
	}
	if err := writeOversized(ctx, db, w); err != nil {
		return err
	}
	fmt.Println("wrote a backlog of 2000 events and one oversized event; starting the relay")

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(ctx) }()
	go trickle(ctx, db, w)

	if once {
		select {
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
		}
		err := printScrape(url, os.Stdout)
		cancel()
		return errors.Join(err, <-relayDone)
	}
	fmt.Println("writing 20 events/s; Ctrl-C to stop")
	return <-relayDone
}

// trickle writes 20 orders a second until ctx ends.
func trickle(ctx context.Context, db *sql.DB, w *txoutbox.Writer) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for n := 2000; ; n++ {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if err := writeOrders(ctx, db, w, n, 1); err != nil && ctx.Err() == nil {
			log.Printf("write: %v", err)
		}
	}
}

// writeOrders commits count order events, 100 per transaction.
func writeOrders(ctx context.Context, db *sql.DB, w *txoutbox.Writer, first, count int) error {
	for start := first; start < first+count; start += 100 {
		var events []txoutbox.Event
		for i := start; i < min(start+100, first+count); i++ {
			e, err := txoutbox.NewEvent("orders", "order", fmt.Sprintf("order-%d", i%50), "order.placed", map[string]int{"seq": i})
			if err != nil {
				return err
			}
			events = append(events, e)
		}
		if err := inTx(ctx, db, func(tx *sql.Tx) error { return w.Write(ctx, tx, events...) }); err != nil {
			return err
		}
	}
	return nil
}

// writeOversized commits an event the writer accepts (under its limit of
// 1 MiB less 8 KiB) but the example's broker does not (over 64 KiB).
func writeOversized(ctx context.Context, db *sql.DB, w *txoutbox.Writer) error {
	e, err := txoutbox.NewEvent("invoices", "invoice", "invoice-1", "invoice.issued", map[string]string{"pdf": strings.Repeat("x", 100<<10)})
	if err != nil {
		return err
	}
	return inTx(ctx, db, func(tx *sql.Tx) error { return w.Write(ctx, tx, e) })
}

func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback() //nolint:errcheck // the write error matters
		return err
	}
	return tx.Commit()
}

// printScrape prints the txoutbox series of one scrape of url.
func printScrape(url string, out io.Writer) error {
	resp, err := http.Get(url) //nolint:gosec // our own loopback endpoint
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "txoutbox_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return sc.Err()
}
