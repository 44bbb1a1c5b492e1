package main

import (
	"errors"
	"math"
	"testing"
)

// wantLine checks the line s prints.
func wantLine(t *testing.T, s summary, want string) {
	t.Helper()
	if got := s.String(); got != want {
		t.Errorf("summary line:\n got %s\nwant %s", got, want)
	}
}

func TestSummaryLine(t *testing.T) {
	s := newSummary()
	s.RelayEPS, s.Relay3EPS, s.NaiveEPS, s.ForwarderEPS = 30000, 28000.4, 1200, 4000
	s.DBLimitEPS, s.KafkaLimitEPS = 50000, 40000
	s.KafkaBatchEPS = 60000
	s.addLarge(largeBench{MBPS: 80, P99MS: 120, CPUMSMB: 9.5}, largeBench{MBPS: 90, CPUMSMB: 6}, largeBench{MBPS: 100, P99MS: 60, CPUMSMB: 4.25})
	s.addIdle([]idleCost{{PGCPUMSPerS: 1.5}, {PGCPUMSPerS: 4}, {PGCPUMSPerS: 30}, {PGCPUMSPerS: 80.25}})
	s.addViolations(0)
	s.P50MS, s.P99MS = 3.456, 42
	s.GormOverhead, s.EntOverhead, s.ClaimFlatness, s.RelayRSSMiB = 1.1, 1.234, 1.005, 37.5
	s.addWAL(walBench{WALEPS: 60000, RelayEPS: 30000, WALPGUSPerEvent: 12.345, WALWALBytesPerEvent: 410, P99MS: 9.5})
	s.PlainEPS = 24000
	f := func(v float64) *float64 { return &v }
	s.Relay = &cost{PGUS: f(25.04), TotalUS: f(52.5), WALBytes: f(612.4)}
	s.Plain = &cost{PGUS: f(13.7), TotalUS: f(36.6), WALBytes: f(401)}
	s.DBVsPlain, s.CPUVsPlain = 0.914, 0.8
	s.addSteady(steadyBench{Cost: &cost{PGUS: f(18)}}, steadyBench{Cost: &cost{PGUS: f(12)}})
	s.ScheduledVsRelay, s.ScheduledPGVsRelay = 0.987, 1.024
	want := "bench: relay_eps=30000 relay3_eps=28000 naive_eps=1200 forwarder_eps=4000 dblimit_eps=50000 kafkalimit_eps=40000 ceiling_eps=22222" +
		" relay_vs_naive=25.00 relay_vs_forwarder=7.50 relay_vs_ceiling=1.35 order_violations=0 p50_ms=3.46 p99_ms=42.00" +
		" gorm_overhead=1.10 ent_overhead=1.23 claim_flatness=1.00 relay_rss_mib=37.50" +
		" plain_eps=24000 relay_vs_plain=1.25 relay3_vs_plain=1.17 pg_us_per_event=25.04 plain_pg_us_per_event=13.70" +
		" cpu_us_per_event=52.50 plain_cpu_us_per_event=36.60 wal_bytes_per_event=612 plain_wal_bytes_per_event=401" +
		" wal_eps=60000 wal_vs_relay=2.00 wal_pg_us_per_event=12.35 wal_wal_bytes_per_event=410.00 wal_p99_ms=9.50" +
		" pg_vs_plain=0.91 cpu_vs_plain=0.80 broker=kfake debezium_eps=- wal_vs_debezium=- wal_cpu_vs_debezium=- wal_p99_vs_debezium=- river_eps=- river1_eps=- relay_vs_river1=- relay_vs_river=- relay_pg_vs_river=- river_order_violations=- scheduled_vs_relay=0.99 scheduled_pg_vs_relay=1.02 kafkabatch_eps=60000 relay_vs_kafkabatch=0.50" +
		" large_mbps=80.00 direct_mbps=100.00 large_vs_direct=0.80 large_p99_ms=120.00 direct_p99_ms=60.00 large_cpu_ms_per_mb=9.50 direct_cpu_ms_per_mb=4.25 large_file_mbps=90.00 large_file_vs_direct=0.90 large_file_cpu_ms_per_mb=6.00" +
		" idle_pg_ms_per_s=1.50 idle3_pg_ms_per_s=4.00 idle100_pg_ms_per_s=30.00 idle3x100_pg_ms_per_s=80.25" +
		" steady_pg_us_per_event=18.00 steady_plain_pg_us_per_event=12.00 steady_pg_vs_plain=1.50"
	wantLine(t, s, want)
}

func TestSummaryLineMissing(t *testing.T) {
	s := newSummary()
	s.RelayEPS = 30000
	s.Relay = &cost{} // ran, but nothing could be read
	want := "bench: relay_eps=30000 relay3_eps=- naive_eps=- forwarder_eps=- dblimit_eps=- kafkalimit_eps=- ceiling_eps=-" +
		" relay_vs_naive=- relay_vs_forwarder=- relay_vs_ceiling=- order_violations=- p50_ms=- p99_ms=-" +
		" gorm_overhead=- ent_overhead=- claim_flatness=- relay_rss_mib=-" +
		" plain_eps=- relay_vs_plain=- relay3_vs_plain=- pg_us_per_event=- plain_pg_us_per_event=-" +
		" cpu_us_per_event=- plain_cpu_us_per_event=- wal_bytes_per_event=- plain_wal_bytes_per_event=-" +
		" wal_eps=- wal_vs_relay=- wal_pg_us_per_event=- wal_wal_bytes_per_event=- wal_p99_ms=-" +
		" pg_vs_plain=- cpu_vs_plain=- broker=kfake debezium_eps=- wal_vs_debezium=- wal_cpu_vs_debezium=- wal_p99_vs_debezium=- river_eps=- river1_eps=- relay_vs_river1=- relay_vs_river=- relay_pg_vs_river=- river_order_violations=- scheduled_vs_relay=- scheduled_pg_vs_relay=- kafkabatch_eps=- relay_vs_kafkabatch=-" +
		" large_mbps=- direct_mbps=- large_vs_direct=- large_p99_ms=- direct_p99_ms=- large_cpu_ms_per_mb=- direct_cpu_ms_per_mb=- large_file_mbps=- large_file_vs_direct=- large_file_cpu_ms_per_mb=-" +
		" idle_pg_ms_per_s=- idle3_pg_ms_per_s=- idle100_pg_ms_per_s=- idle3x100_pg_ms_per_s=-" +
		" steady_pg_us_per_event=- steady_plain_pg_us_per_event=- steady_pg_vs_plain=-"
	wantLine(t, s, want)
	if !math.IsNaN(s.ceiling()) {
		t.Errorf("ceiling without its inputs = %v, want NaN", s.ceiling())
	}
}

// The line of -db mariadb: db=mariadb first, PostgreSQL's keys of the
// scenarios it runs, mysqld's CPU where PostgreSQL's would be, and the
// latency scenario's rate.
func TestSummaryLineMariaDB(t *testing.T) {
	s := newSummary()
	s.DB = dbMariaDB
	s.RelayEPS, s.Relay3EPS, s.PlainEPS, s.NaiveEPS, s.ForwarderEPS = 13000, 12000.4, 10000, 1000, 1300
	s.DBLimitEPS, s.KafkaLimitEPS, s.KafkaBatchEPS = 20000, 80000, 130000
	s.addViolations(0)
	s.LatencyRate, s.P50MS, s.P99MS = 6500, 31.234, 88
	f := func(v float64) *float64 { return &v }
	s.Relay = &cost{MySQLdUS: f(40.5), TotalUS: f(70)}
	s.Plain = &cost{MySQLdUS: f(45), TotalUS: f(80)}
	s.DBVsPlain, s.CPUVsPlain = 0.9, 0.875
	// PostgreSQL's figures are not on this line, whatever is set.
	s.addWAL(walBench{WALEPS: 60000, RelayEPS: 30000})
	s.SteadyPGUS = 18
	want := "bench: db=mariadb relay_eps=13000 relay3_eps=12000 plain_eps=10000 naive_eps=1000 forwarder_eps=1300" +
		" dblimit_eps=20000 kafkalimit_eps=80000 ceiling_eps=16000" +
		" relay_vs_plain=1.30 relay3_vs_plain=1.20 relay_vs_forwarder=10.00 relay_vs_naive=13.00 relay_vs_ceiling=0.81" +
		" order_violations=0 latency_rate=6500 p50_ms=31.23 p99_ms=88.00" +
		" mysqld_us_per_event=40.50 plain_mysqld_us_per_event=45.00 cpu_us_per_event=70.00 plain_cpu_us_per_event=80.00" +
		" db_cpu_vs_plain=0.90 cpu_vs_plain=0.88 kafkabatch_eps=130000 relay_vs_kafkabatch=0.10 broker=kfake"
	wantLine(t, s, want)

	// A scenario that did not run reads "-", and a failure's entries
	// come last, as on PostgreSQL's line.
	s = newSummary()
	s.DB, s.Broker = dbMariaDB, "kafka"
	s.RelayEPS = 13000
	s.failures = append(s.failures, newFailure("plain", errors.New("plain: create table: boom")))
	want = "bench: db=mariadb relay_eps=13000 relay3_eps=- plain_eps=- naive_eps=- forwarder_eps=- dblimit_eps=- kafkalimit_eps=- ceiling_eps=-" +
		" relay_vs_plain=- relay3_vs_plain=- relay_vs_forwarder=- relay_vs_naive=- relay_vs_ceiling=-" +
		" order_violations=- latency_rate=- p50_ms=- p99_ms=-" +
		" mysqld_us_per_event=- plain_mysqld_us_per_event=- cpu_us_per_event=- plain_cpu_us_per_event=-" +
		" db_cpu_vs_plain=- cpu_vs_plain=- kafkabatch_eps=- relay_vs_kafkabatch=- broker=kafka" +
		` plain_error="plain: create table: boom"`
	wantLine(t, s, want)
}

func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ q, want float64 }{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}} {
		if got := quantile(v, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile of nothing = %v, want 0", got)
	}
}

func TestMedianDrain(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	drains := []throughput{
		{EPS: 300, Cost: &cost{PGUS: f(14), TotalUS: f(30)}},
		{EPS: 100, Cost: &cost{PGUS: f(20), TotalUS: f(31)}},
		{EPS: 200, Cost: &cost{PGUS: f(12)}}, // total not read in this one
	}
	eps, c := medianDrain(drains)
	if eps != 200 || *c.PGUS != 14 || *c.TotalUS != 30.5 || c.WALBytes != nil {
		t.Fatalf("median of drains: eps %v, pg %v, total %v, wal %v; want 200, 14, 30.5 (of the two read), none",
			eps, *c.PGUS, *c.TotalUS, c.WALBytes)
	}
	if m := median(nil); !math.IsNaN(m) {
		t.Fatalf("median of nothing %v, want NaN", m)
	}
}

// TestPairedRatio takes each round's ratio and their median, and leaves
// out rounds without the figure on both sides.
func TestPairedRatio(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	drain := func(round int, pg *float64) throughput {
		return throughput{Round: round, Cost: &cost{PGUS: pg}}
	}
	// Rounds 0 to 2 are measured on both sides: 10/8, 20/16 and 30/40.
	relays := []throughput{drain(0, f(10)), drain(1, f(20)), drain(2, f(30)), drain(3, nil), drain(4, f(5))}
	plains := []throughput{drain(1, f(16)), drain(0, f(8)), drain(2, f(40)), drain(3, f(9))}
	if got := pairedRatio(relays, plains, pgUS); got != 1.25 {
		t.Errorf("paired ratio %v, want the median of 1.25, 1.25 and 0.75: 1.25", got)
	}
	plains[0] = drain(1, f(25))
	if got := pairedRatio(relays, plains, pgUS); got != 0.8 {
		t.Errorf("paired ratio %v, want the median of 1.25, 0.8 and 0.75: 0.8", got)
	}
	if got := pairedRatio(relays[3:4], plains, pgUS); !math.IsNaN(got) {
		t.Errorf("paired ratio %v with no round measured on both sides, want NaN", got)
	}
}
