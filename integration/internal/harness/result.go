package harness

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
)

// Result is what a scenario proved. Committed counts every committed event,
// dead ones included: an event is either delivered or dead, or it is lost.
type Result struct {
	Scenario    string
	Mode        string // the relay mode: "" (poll) or "wal"
	Broker      string // BrokerKfake ("" too) or BrokerKafka
	DB          string // "" (PostgreSQL) or "mariadb"
	LeaderKills int    // brokers leading partitions killed (LeaderKills)
	// The claim check's (Plan.Large): events delivered by reference,
	// relays killed right after an upload, store outages, objects no
	// delivered reference names, and objects Prune deleted.
	LargeRefs, UploadKills, StoreOutages, Orphans, Pruned int
	Committed                                             int // events in the outbox after the run
	RolledBack                                            int // events written in transactions that rolled back
	DeliveredUnique                                       int // distinct committed events on the broker
	Lost                                                  int // committed, not dead, never delivered
	Phantom                                               int // records whose event id the outbox does not hold (rolled back, or never existed)
	OrderViolations                                       int // first deliveries of a key out of outbox id order
	Duplicates                                            int // records beyond the first of an event id
	Dead                                                  int // events the relay gave up on
	Crashes                                               int // relays SIGKILLed (fresh-id and same-id restarts alike)
	SameIDRestarts                                        int // relays SIGKILLed and restarted under the same --id
	Pauses                                                int // relays SIGSTOPped past StaleAfter and the lease
	Partitions                                            int // proxy freezes or drops between a relay and PostgreSQL or the broker
	AdminOps                                              int // outbox CLI runs (dead retry, dead drop, replay, dry runs)
	DBCrashes                                             int // PostgreSQL stopped with -m immediate and started again
	SlowBroker                                            int // windows in which the broker held every produce past the lease
	ConnLosses                                            int // rounds in which the server ended every relay connection to the database

	Records   int // records read from the broker
	Unordered int // first deliveries left out of the order check: events that were dead once and retried
	Misrouted int // records whose topic or key differ from their outbox row
	Unsettled int // rows neither published nor dead at the end

	Early           int // first deliveries sent before their row's not_before
	Delayed         int // committed rows with a not_before
	HeldBehindDelay int // delivered rows written while an earlier row of their aggregate was not yet due

	// DupBound is the most duplicates the scenario's faults may cause:
	// one in-flight window (MaxInFlight) per fault that can interrupt a
	// relay between the broker's ack and the mark.
	DupBound   int
	DeadEvents []DeadEvent
	Notes      []string // the first problems found, for the failure message
	// DupNotes describe the first duplicates, for a failure on the bound:
	// a copy stored next to the first with the same producer timestamp is
	// the producer's retry; one seconds later, a second publish.
	DupNotes []string
}

// DeadEvent is an outbox row in state dead.
type DeadEvent struct {
	EventID, Topic, AggregateID, Error string
	Delivered                          bool
}

func (r *Result) note(format string, args ...any) {
	if len(r.Notes) < 20 {
		r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	}
}

// noteDuplicate describes a duplicate delivery d of the row first
// delivered as f.
func (r *Result) noteDuplicate(f, d Delivery, row dbRow) {
	if len(r.DupNotes) < 10 {
		r.DupNotes = append(r.DupNotes, fmt.Sprintf("duplicate: row %d (attempts=%d last_error=%q) at %s/%d@%d sent %s by producer %d epoch %d, again @%d sent %s (%+dms) by producer %d epoch %d",
			row.id, row.attempts, row.lastError, f.Topic, f.Partition, f.Offset, f.Timestamp.Format("15:04:05.000"), f.Producer, f.Epoch,
			d.Offset, d.Timestamp.Format("15:04:05.000"), d.Timestamp.Sub(f.Timestamp).Milliseconds(), d.Producer, d.Epoch))
	}
}

// Line is the suite's result contract.
func (r Result) Line() string {
	return fmt.Sprintf("chaos: committed=%d rolled_back=%d delivered_unique=%d lost=%d phantom=%d order_violations=%d duplicates=%d dead=%d crashes=%d same_id_restarts=%d pauses=%d partitions=%d admin_ops=%d db_crashes=%d",
		r.Committed, r.RolledBack, r.DeliveredUnique, r.Lost, r.Phantom, r.OrderViolations, r.Duplicates, r.Dead, r.Crashes,
		r.SameIDRestarts, r.Pauses, r.Partitions, r.AdminOps, r.DBCrashes) + r.leaderTag() + r.largeTag() + r.modeTag() + r.connTag() + r.dbTag() + " broker=" + r.brokerName()
}

// connTag counts the rounds of connection losses where a scenario made
// some.
func (r Result) connTag() string {
	if r.ConnLosses == 0 {
		return ""
	}
	return fmt.Sprintf(" conn_losses=%d", r.ConnLosses)
}

// largeTag counts what the claim check did where a scenario turned it on.
func (r Result) largeTag() string {
	if r.LargeRefs == 0 {
		return ""
	}
	return fmt.Sprintf(" large_refs=%d upload_kills=%d store_outages=%d orphans=%d pruned=%d", r.LargeRefs, r.UploadKills, r.StoreOutages, r.Orphans, r.Pruned)
}

// leaderTag counts the leader kills where a scenario made some.
func (r Result) leaderTag() string {
	if r.LeaderKills == 0 {
		return ""
	}
	return fmt.Sprintf(" leader_kills=%d", r.LeaderKills)
}

func (r Result) brokerName() string {
	if r.Broker == "" {
		return BrokerKfake
	}
	return r.Broker
}

// Add sums two results, for the suite's total line.
// dbTag tags a MariaDB line; PostgreSQL's is unchanged.
func (r Result) dbTag() string {
	if r.DB == "" {
		return ""
	}
	return " db=" + r.DB
}

// modeTag tags a WAL-mode line; the polling relay's line is unchanged.
func (r Result) modeTag() string {
	if r.Mode == "" {
		return ""
	}
	return " mode=" + r.Mode
}

func (r Result) Add(o Result) Result {
	r.Committed += o.Committed
	r.RolledBack += o.RolledBack
	r.DeliveredUnique += o.DeliveredUnique
	r.Lost += o.Lost
	r.Phantom += o.Phantom
	r.OrderViolations += o.OrderViolations
	r.Duplicates += o.Duplicates
	r.Dead += o.Dead
	r.Crashes += o.Crashes
	r.SameIDRestarts += o.SameIDRestarts
	r.Pauses += o.Pauses
	r.Partitions += o.Partitions
	r.AdminOps += o.AdminOps
	r.DBCrashes += o.DBCrashes
	r.SlowBroker += o.SlowBroker
	r.ConnLosses += o.ConnLosses
	r.LeaderKills += o.LeaderKills
	r.LargeRefs += o.LargeRefs
	r.UploadKills += o.UploadKills
	r.StoreOutages += o.StoreOutages
	r.Orphans += o.Orphans
	r.Pruned += o.Pruned
	r.Unordered += o.Unordered
	r.Records += o.Records
	r.Misrouted += o.Misrouted
	r.Unsettled += o.Unsettled
	r.Early += o.Early
	r.Delayed += o.Delayed
	r.HeldBehindDelay += o.HeldBehindDelay
	r.DupBound += o.DupBound
	r.DB = cmp.Or(r.DB, o.DB)
	return r
}

// Check returns an error for every broken promise: a lost, phantom,
// misrouted, out-of-order or early event, an unsettled row, or more duplicates
// than the faults allow. Dead events are the scenario's to judge.
func (r Result) Check() error {
	var errs []error
	for _, c := range []struct {
		name string
		n    int
	}{{"lost", r.Lost}, {"phantom", r.Phantom}, {"order_violations", r.OrderViolations}, {"misrouted", r.Misrouted}, {"unsettled", r.Unsettled}, {"early", r.Early}} {
		if c.n != 0 {
			errs = append(errs, fmt.Errorf("%s=%d", c.name, c.n))
		}
	}
	if r.Duplicates > r.DupBound {
		errs = append(errs, fmt.Errorf("duplicates=%d exceed the bound %d (one MaxInFlight window per fault, plus replayed rows)", r.Duplicates, r.DupBound))
	}
	if r.DeliveredUnique+r.Dead-countDelivered(r.DeadEvents) != r.Committed-r.Lost {
		errs = append(errs, fmt.Errorf("accounting: delivered_unique=%d + undelivered dead != committed=%d - lost=%d", r.DeliveredUnique, r.Committed, r.Lost))
	}
	if len(errs) == 0 {
		return nil
	}
	notes := r.Notes
	if r.Duplicates > r.DupBound {
		notes = append(notes, r.DupNotes...)
	}
	return fmt.Errorf("%s: %w\n%s", r.Scenario, errors.Join(errs...), strings.Join(notes, "\n"))
}

func countDelivered(dead []DeadEvent) int {
	n := 0
	for _, d := range dead {
		if d.Delivered {
			n++
		}
	}
	return n
}
