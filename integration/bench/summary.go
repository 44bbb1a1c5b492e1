package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// summary holds the figures of the final line. A figure of a scenario that
// did not run, or failed before it had the figure, is NaN and prints as
// "-"; a figure is never taken from a drain that did not finish.
type summary struct {
	RelayEPS, Relay3EPS, NaiveEPS, ForwarderEPS float64
	DBLimitEPS, KafkaLimitEPS                   float64
	// KafkaBatchEPS is the bare publisher with the relays' batches
	// (runKafkaBatch).
	KafkaBatchEPS             float64
	OrderViolations           float64
	P50MS, P99MS              float64
	GormOverhead, EntOverhead float64
	ClaimFlatness             float64
	RelayRSSMiB               float64
	PlainEPS                  float64
	// Relay and Plain are the costs of the one-replica relay's and the
	// plain loop's drains; nil when they did not run.
	Relay, Plain *cost
	// DBVsPlain and CPUVsPlain are the medians of each round's relay ÷
	// plain database server (PostgreSQL's or mysqld's) and total CPU per
	// event (see pairedRatio).
	DBVsPlain, CPUVsPlain float64
	// LatencyRate is the latency scenario's events/s.
	LatencyRate float64
	// DB is the -db the run used: postgres or mariadb, whose line has
	// the keys that apply there (mariaDBFields).
	DB string
	// ScheduledVsRelay and ScheduledPGVsRelay compare the relay's drains
	// beside -scheduled rows with its drains without them: events/s
	// (medians) and PostgreSQL CPU per event (paired by round).
	ScheduledVsRelay, ScheduledPGVsRelay float64
	// Broker is the -broker the run used: kfake or kafka.
	Broker string
	walSummary
	debeziumSummary
	riverSummary
	largeSummary
	// SteadyPGUS and SteadyPlainPGUS are PostgreSQL's CPU per event of
	// the steady scenario's relay and plain loop.
	SteadyPGUS, SteadyPlainPGUS float64
	// IdlePGMS is PostgreSQL's CPU per second (ms) of relays with nothing
	// to publish, by shape: 1 relay over 1 table, 3 over 1, 1 over 100, 3
	// over 100 (runIdle).
	IdlePGMS [4]float64
	// failures are the scenarios that failed, in the order they ran; the
	// line ends with their entries (failure.fields).
	failures []failure
}

// walSummary are the WAL relay scenario's figures.
type walSummary struct {
	WALEPS, WALVsRelay, WALPGUSPerEvent, WALWALBytesPerEvent, WALP99MS float64
	WALTotalUS                                                         float64
}

// debeziumSummary are the debezium scenario's figures.
type debeziumSummary struct {
	DebeziumEPS, DebeziumTotalUS, DebeziumP99MS float64
}

// riverSummary are the river scenario's figures: one worker (ordered)
// and riverUnorderedWorkers (unordered).
type riverSummary struct {
	RiverEPS, River1EPS, RiverPGUS float64
	// RiverOrderViolations are the unordered drain's; they are River's,
	// not the suite's order_violations.
	RiverOrderViolations float64
}

// largeSummary are the large scenario's figures: the claim check's side
// on S3 and on a directory, and the direct one's.
type largeSummary struct {
	LargeMBPS, DirectMBPS, LargeP99MS, DirectP99MS, LargeCPUMSMB, DirectCPUMSMB float64
	LargeFileMBPS, LargeFileCPUMSMB                                             float64
}

// addLarge takes the large scenario's figures.
func (s *summary) addLarge(claim, file, direct largeBench) {
	s.largeSummary = largeSummary{claim.MBPS, direct.MBPS, claim.P99MS, direct.P99MS, claim.CPUMSMB, direct.CPUMSMB, file.MBPS, file.CPUMSMB}
}

// addSteady takes the steady scenario's figures.
func (s *summary) addSteady(relay, plain steadyBench) {
	s.SteadyPGUS, s.SteadyPlainPGUS = figure(relay.Cost, pgUS), figure(plain.Cost, pgUS)
}

// addIdle takes the idle scenario's figures, in idleShapes' order.
func (s *summary) addIdle(costs []idleCost) {
	for i, c := range costs {
		s.IdlePGMS[i] = c.PGCPUMSPerS
	}
}

// addWAL takes the wal scenario's figures.
func (s *summary) addWAL(r walBench) {
	s.walSummary = walSummary{WALEPS: r.WALEPS, WALVsRelay: r.WALEPS / r.RelayEPS, WALPGUSPerEvent: r.WALPGUSPerEvent,
		WALWALBytesPerEvent: r.WALWALBytesPerEvent, WALP99MS: r.P99MS, WALTotalUS: figure(r.WALCost, totalUS)}
	if r.WALPGUSPerEvent < 0 {
		s.WALPGUSPerEvent = math.NaN()
	}
}

// addDebezium takes the debezium scenario's figures.
func (s *summary) addDebezium(r debeziumBench) {
	s.debeziumSummary = debeziumSummary{DebeziumEPS: r.EPS, DebeziumTotalUS: figure(r.Cost, totalUS), DebeziumP99MS: r.P99MS}
}

func newSummary() summary {
	nan := math.NaN()
	return summary{RelayEPS: nan, Relay3EPS: nan, NaiveEPS: nan, ForwarderEPS: nan, DBLimitEPS: nan, KafkaLimitEPS: nan, KafkaBatchEPS: nan,
		OrderViolations: nan, P50MS: nan, P99MS: nan, GormOverhead: nan, EntOverhead: nan, ClaimFlatness: nan, RelayRSSMiB: nan,
		PlainEPS: nan, DBVsPlain: nan, CPUVsPlain: nan, LatencyRate: nan, ScheduledVsRelay: nan, ScheduledPGVsRelay: nan,
		walSummary:      walSummary{nan, nan, nan, nan, nan, nan},
		debeziumSummary: debeziumSummary{nan, nan, nan},
		riverSummary:    riverSummary{nan, nan, nan, nan},
		largeSummary:    largeSummary{nan, nan, nan, nan, nan, nan, nan, nan}, IdlePGMS: [4]float64{nan, nan, nan, nan},
		SteadyPGUS: nan, SteadyPlainPGUS: nan}
}

// figure is one cost figure, NaN when it was not measured.
func figure(c *cost, pick func(*cost) *float64) float64 {
	if c == nil || pick(c) == nil {
		return math.NaN()
	}
	return *pick(c)
}

// ceiling is what claim, publish and mark done one after another allow:
// 1/(1/dblimit + 1/kafkalimit).
func (s summary) ceiling() float64 { return 1 / (1/s.DBLimitEPS + 1/s.KafkaLimitEPS) }

// field is one key=value of the summary line.
type field struct{ name, value string }

// eps renders a rate (or a count) rounded to a whole number, "-" for NaN.
func eps(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
}

// ratio renders a figure with two decimals, "-" for NaN.
func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// String renders the summary line.
func (s summary) String() string {
	fields := s.postgresFields()
	if s.DB == dbMariaDB {
		fields = s.mariaDBFields()
	}
	var b strings.Builder
	b.WriteString("bench:")
	for _, f := range fields {
		fmt.Fprintf(&b, " %s=%s", f.name, f.value)
	}
	for _, f := range s.failures {
		for _, field := range f.fields() {
			b.WriteString(" " + field)
		}
	}
	return b.String()
}

// broker is the line's broker key: kfake unless the run said.
func (s summary) broker() string {
	if s.Broker == "" {
		return "kfake"
	}
	return s.Broker
}

// mariaDBFields are the line of -db mariadb: PostgreSQL's keys of the
// scenarios it runs, with mysqld's CPU where PostgreSQL's would be
// (mysqld_us_per_event, plain_mysqld_us_per_event, and db_cpu_vs_plain,
// the median of the rounds' relay ÷ plain), and the latency scenario's
// rate (latency_rate: half the relay's events/s unless -latency-rate said).
func (s summary) mariaDBFields() []field {
	return []field{
		{"db", dbMariaDB},
		{"relay_eps", eps(s.RelayEPS)},
		{"relay3_eps", eps(s.Relay3EPS)},
		{"plain_eps", eps(s.PlainEPS)},
		{"naive_eps", eps(s.NaiveEPS)},
		{"forwarder_eps", eps(s.ForwarderEPS)},
		{"dblimit_eps", eps(s.DBLimitEPS)},
		{"kafkalimit_eps", eps(s.KafkaLimitEPS)},
		{"ceiling_eps", eps(s.ceiling())},
		{"relay_vs_plain", ratio(s.RelayEPS / s.PlainEPS)},
		{"relay3_vs_plain", ratio(s.Relay3EPS / s.PlainEPS)},
		{"relay_vs_forwarder", ratio(s.RelayEPS / s.ForwarderEPS)},
		{"relay_vs_naive", ratio(s.RelayEPS / s.NaiveEPS)},
		{"relay_vs_ceiling", ratio(s.RelayEPS / s.ceiling())},
		{"order_violations", eps(s.OrderViolations)},
		{"latency_rate", eps(s.LatencyRate)},
		{"p50_ms", ratio(s.P50MS)},
		{"p99_ms", ratio(s.P99MS)},
		{"mysqld_us_per_event", ratio(figure(s.Relay, mysqldUS))},
		{"plain_mysqld_us_per_event", ratio(figure(s.Plain, mysqldUS))},
		{"cpu_us_per_event", ratio(figure(s.Relay, totalUS))},
		{"plain_cpu_us_per_event", ratio(figure(s.Plain, totalUS))},
		{"db_cpu_vs_plain", ratio(s.DBVsPlain)},
		{"cpu_vs_plain", ratio(s.CPUVsPlain)},
		{"kafkabatch_eps", eps(s.KafkaBatchEPS)},
		{"relay_vs_kafkabatch", ratio(s.RelayEPS / s.KafkaBatchEPS)},
		{"broker", s.broker()},
	}
}

// postgresFields are the line of a PostgreSQL run.
func (s summary) postgresFields() []field {
	return []field{
		{"relay_eps", eps(s.RelayEPS)},
		{"relay3_eps", eps(s.Relay3EPS)},
		{"naive_eps", eps(s.NaiveEPS)},
		{"forwarder_eps", eps(s.ForwarderEPS)},
		{"dblimit_eps", eps(s.DBLimitEPS)},
		{"kafkalimit_eps", eps(s.KafkaLimitEPS)},
		{"ceiling_eps", eps(s.ceiling())},
		{"relay_vs_naive", ratio(s.RelayEPS / s.NaiveEPS)},
		{"relay_vs_forwarder", ratio(s.RelayEPS / s.ForwarderEPS)},
		{"relay_vs_ceiling", ratio(s.RelayEPS / s.ceiling())},
		{"order_violations", eps(s.OrderViolations)},
		{"p50_ms", ratio(s.P50MS)},
		{"p99_ms", ratio(s.P99MS)},
		{"gorm_overhead", ratio(s.GormOverhead)},
		{"ent_overhead", ratio(s.EntOverhead)},
		{"claim_flatness", ratio(s.ClaimFlatness)},
		{"relay_rss_mib", ratio(s.RelayRSSMiB)},
		{"plain_eps", eps(s.PlainEPS)},
		{"relay_vs_plain", ratio(s.RelayEPS / s.PlainEPS)},
		{"relay3_vs_plain", ratio(s.Relay3EPS / s.PlainEPS)},
		{"pg_us_per_event", ratio(figure(s.Relay, pgUS))},
		{"plain_pg_us_per_event", ratio(figure(s.Plain, pgUS))},
		{"cpu_us_per_event", ratio(figure(s.Relay, totalUS))},
		{"plain_cpu_us_per_event", ratio(figure(s.Plain, totalUS))},
		{"wal_bytes_per_event", eps(figure(s.Relay, walBytes))},
		{"plain_wal_bytes_per_event", eps(figure(s.Plain, walBytes))},
		{"wal_eps", eps(s.WALEPS)},
		{"wal_vs_relay", ratio(s.WALVsRelay)},
		{"wal_pg_us_per_event", ratio(s.WALPGUSPerEvent)},
		{"wal_wal_bytes_per_event", ratio(s.WALWALBytesPerEvent)},
		{"wal_p99_ms", ratio(s.WALP99MS)},
		{"pg_vs_plain", ratio(s.DBVsPlain)},
		{"cpu_vs_plain", ratio(s.CPUVsPlain)},
		{"broker", s.broker()},
		{"debezium_eps", eps(s.DebeziumEPS)},
		{"wal_vs_debezium", ratio(s.WALEPS / s.DebeziumEPS)},
		{"wal_cpu_vs_debezium", ratio(s.WALTotalUS / s.DebeziumTotalUS)},
		{"wal_p99_vs_debezium", ratio(s.WALP99MS / s.DebeziumP99MS)},
		{"river_eps", eps(s.RiverEPS)},
		{"river1_eps", eps(s.River1EPS)},
		{"relay_vs_river1", ratio(s.RelayEPS / s.River1EPS)},
		{"relay_vs_river", ratio(s.RelayEPS / s.RiverEPS)},
		{"relay_pg_vs_river", ratio(figure(s.Relay, pgUS) / s.RiverPGUS)},
		{"river_order_violations", eps(s.RiverOrderViolations)},
		{"scheduled_vs_relay", ratio(s.ScheduledVsRelay)},
		{"scheduled_pg_vs_relay", ratio(s.ScheduledPGVsRelay)},
		{"kafkabatch_eps", eps(s.KafkaBatchEPS)},
		{"relay_vs_kafkabatch", ratio(s.RelayEPS / s.KafkaBatchEPS)},
		{"large_mbps", ratio(s.LargeMBPS)},
		{"direct_mbps", ratio(s.DirectMBPS)},
		{"large_vs_direct", ratio(s.LargeMBPS / s.DirectMBPS)},
		{"large_p99_ms", ratio(s.LargeP99MS)},
		{"direct_p99_ms", ratio(s.DirectP99MS)},
		{"large_cpu_ms_per_mb", ratio(s.LargeCPUMSMB)},
		{"direct_cpu_ms_per_mb", ratio(s.DirectCPUMSMB)},
		{"large_file_mbps", ratio(s.LargeFileMBPS)},
		{"large_file_vs_direct", ratio(s.LargeFileMBPS / s.DirectMBPS)},
		{"large_file_cpu_ms_per_mb", ratio(s.LargeFileCPUMSMB)},
		{"idle_pg_ms_per_s", ratio(s.IdlePGMS[0])},
		{"idle3_pg_ms_per_s", ratio(s.IdlePGMS[1])},
		{"idle100_pg_ms_per_s", ratio(s.IdlePGMS[2])},
		{"idle3x100_pg_ms_per_s", ratio(s.IdlePGMS[3])},
		{"steady_pg_us_per_event", ratio(s.SteadyPGUS)},
		{"steady_plain_pg_us_per_event", ratio(s.SteadyPlainPGUS)},
		{"steady_pg_vs_plain", ratio(s.SteadyPGUS / s.SteadyPlainPGUS)},
	}
}

// addViolations adds a scenario's order violations to the total.
func (s *summary) addViolations(n int) {
	if math.IsNaN(s.OrderViolations) {
		s.OrderViolations = 0
	}
	s.OrderViolations += float64(n)
}

func pgUS(c *cost) *float64     { return c.PGUS }
func mysqldUS(c *cost) *float64 { return c.MySQLdUS }

// serverUS is the database server's CPU per event: PostgreSQL's, or
// mysqld's.
func serverUS(c *cost) *float64 { return cmp.Or(c.PGUS, c.MySQLdUS) }
func totalUS(c *cost) *float64  { return c.TotalUS }
func walBytes(c *cost) *float64 { return c.WALBytes }

// pairedRatio is the median over the rounds of the ratio of a's figure to
// b's in the same round. The relay's and the plain loop's drains of a round
// run a minute apart, while the machine's speed moves from one round to
// the next by more than the difference measured (in one run of seven
// rounds the relay took 14.0–20.4 µs of PostgreSQL CPU per event and the
// plain loop 15.7–22.3, both falling as the run went on). The two medians
// can then come from rounds at different speeds; a ratio within each round
// leaves out what changes between rounds, though not a drift within one,
// which raises or lowers the rounds' ratios by turns as the side that
// drains first alternates. NaN when no round has the figure on both sides.
func pairedRatio(a, b []throughput, pick func(*cost) *float64) float64 {
	var ratios []float64
	for _, x := range a {
		for _, y := range b {
			if x.Round != y.Round || x.Cost == nil || y.Cost == nil || pick(x.Cost) == nil || pick(y.Cost) == nil {
				continue
			}
			if d := *pick(y.Cost); d > 0 {
				ratios = append(ratios, *pick(x.Cost)/d)
			}
		}
	}
	return median(ratios)
}

// median is the middle of values, or the mean of the middle two; NaN for
// none. values is left as it is.
func median(values []float64) float64 {
	v := slices.Sorted(slices.Values(values))
	n := len(v)
	switch {
	case n == 0:
		return math.NaN()
	case n%2 == 1:
		return v[n/2]
	default:
		return (v[n/2-1] + v[n/2]) / 2
	}
}
