package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/mysqlclaim"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// mysqlClaimDB is the claim cycle on MySQL and MariaDB: internal/mysqlclaim's
// Claim, Mark, FailTx and Release, each in a mysqlTx transaction. A row's
// version is its claim's lease_expires_at, a time.Time, which mysqlclaim
// makes later than the incarnation's previous claim's (Params.After): the
// claimDB keeps the last one per incarnation.
type mysqlClaimDB struct {
	tx    *mysqlTx
	names outboxsql.Names

	mu   sync.Mutex
	last map[string]time.Time // the version of each incarnation's last claim
}

var (
	_ claimDB   = (*mysqlClaimDB)(nil)
	_ dueProber = (*mysqlClaimDB)(nil)
)

func newMySQLClaimDB(tx *mysqlTx, names outboxsql.Names) *mysqlClaimDB {
	return &mysqlClaimDB{tx: tx, names: names, last: map[string]time.Time{}}
}

// claim runs mysqlclaim.Claim on a connection with the session's
// settings; the rows that do not decode are made dead in its transaction.
func (m *mysqlClaimDB) claim(ctx context.Context, cp claimParams) ([]*claimedRow, []undecodableRow, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*m.tx.timeout+m.tx.lock)
	defer cancel()
	conn, err := m.tx.conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	defer conn.Close()
	m.mu.Lock()
	after := m.last[cp.owner]
	m.mu.Unlock()
	p := mysqlclaim.Params{
		Owner: cp.owner, Limit: min(cp.limit, mysqlclaim.MaxLimit), Lease: cp.lease, Shards: cp.shards, Bytes: cp.bytes,
		After: after, Undecodable: mysqlUndecodable,
	}
	c, err := mysqlclaim.Claim(ctx, conn, m.names, p)
	if !c.Version.IsZero() {
		m.mu.Lock()
		if c.Version.After(m.last[cp.owner]) {
			m.last[cp.owner] = c.Version
		}
		m.mu.Unlock()
	}
	out := make([]*claimedRow, 0, len(c.Rows))
	for _, r := range c.Rows {
		row, derr := mysqlClaimed(r, c.Version)
		if derr != nil {
			// mysqlUndecodable let it through: it cannot happen.
			return nil, nil, fmt.Errorf("claim batch: row %d: %w", r.ID, derr)
		}
		out = append(out, row)
	}
	if err != nil {
		if len(out) > 0 {
			return out, nil, fmt.Errorf("claim batch: %w", err) // the rows of a claim whose commit was not confirmed
		}
		return nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	var bad []undecodableRow
	for _, d := range c.Dead {
		bad = append(bad, undecodableRow{id: d.ID, err: d.Err})
	}
	return out, bad, nil
}

// anyDue runs MySQLAnyDue on a connection of the pool, outside any
// transaction: a consistent read, which waits on no row lock.
func (m *mysqlClaimDB) anyDue(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, m.tx.timeout)
	defer cancel()
	var due bool
	if err := m.tx.db.QueryRowContext(ctx, m.names.Render(outboxsql.MySQLAnyDue)).Scan(&due); err != nil {
		return false, fmt.Errorf("look for due rows: %w", err)
	}
	return due, nil
}

// mysqlUndecodable says why r cannot become a message, "" when it can.
func mysqlUndecodable(r mysqlclaim.Row) string {
	_, err := mysqlClaimed(r, time.Time{})
	if err == nil {
		return ""
	}
	return storableText("undecodable event: "+err.Error(), maxErrorText)
}

// mysqlClaimed is the claimed row r of the claim of version v.
func mysqlClaimed(r mysqlclaim.Row, v time.Time) (*claimedRow, error) {
	id, err := uuid.Parse(r.EventID)
	if err != nil {
		return nil, fmt.Errorf("event_id: %w", err)
	}
	e := txoutbox.Event{
		ID: id, Topic: r.Topic, AggregateType: r.AggregateType, AggregateID: r.AggregateID, Type: r.EventType,
		ContentType: r.ContentType, Payload: r.Payload, CreatedAt: r.CreatedAt,
	}
	if r.Headers != "" && r.Headers != "{}" {
		if err := json.Unmarshal([]byte(r.Headers), &e.Headers); err != nil {
			return nil, fmt.Errorf("headers must be a JSON object of strings: %w", err)
		}
	}
	return &claimedRow{id: r.ID, event: e, attempts: r.Attempts, version: v, bytes: int64(len(r.Payload))}, nil
}

// mark runs a Mark per claim in one transaction (heeding the lockout).
func (m *mysqlClaimDB) mark(ctx context.Context, rows []claimRef) error {
	claims, err := mysqlClaims(rows)
	if err != nil {
		return err
	}
	return m.tx.run(ctx, true, func(tx *sql.Tx) error {
		for _, c := range claims {
			if _, err := mysqlclaim.Mark(ctx, tx, m.names, c.owner, c.version, c.ids); err != nil {
				return err
			}
		}
		return nil
	})
}

// settle runs FailTx, a Release per claim and a Mark per claim in one
// transaction.
func (m *mysqlClaimDB) settle(ctx context.Context, s settlement) ([]failOutcome, error) {
	releases, err := mysqlClaims(s.releases)
	if err != nil {
		return nil, err
	}
	marks, err := mysqlClaims(s.marks)
	if err != nil {
		return nil, err
	}
	fails := make([]mysqlclaim.Failure, len(s.fails))
	for i, f := range s.fails {
		v, ok := f.version.(time.Time)
		if !ok {
			return nil, fmt.Errorf("row %d: claim version %T is not a MySQL claim's", f.id, f.version)
		}
		fails[i] = mysqlclaim.Failure{ID: f.id, Owner: f.owner, Version: v, Err: f.err, Permanent: f.permanent, Delay: f.delay}
	}
	var outcomes []failOutcome
	err = m.tx.run(ctx, false, func(tx *sql.Tx) error {
		outcomes = nil
		if len(fails) > 0 {
			recorded, err := mysqlclaim.FailTx(ctx, tx, m.names, s.maxAttempts, fails)
			if err != nil {
				return err
			}
			for _, o := range recorded {
				outcomes = append(outcomes, failOutcome{id: o.ID, dead: o.State == "dead"})
			}
		}
		for _, c := range releases {
			if _, err := mysqlclaim.Release(ctx, tx, m.names, c.owner, c.version, c.ids); err != nil {
				return err
			}
		}
		for _, c := range marks {
			if _, err := mysqlclaim.Mark(ctx, tx, m.names, c.owner, c.version, c.ids); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// release runs a Release per claim in one transaction.
func (m *mysqlClaimDB) release(ctx context.Context, rows []claimRef) (int64, error) {
	claims, err := mysqlClaims(rows)
	if err != nil {
		return 0, err
	}
	var n int64
	err = m.tx.run(ctx, false, func(tx *sql.Tx) error {
		n = 0
		for _, c := range claims {
			k, err := mysqlclaim.Release(ctx, tx, m.names, c.owner, c.version, c.ids)
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	return n, err
}

// mysqlClaim is the rows of one claim to settle.
type mysqlClaim struct {
	owner   string
	version time.Time
	ids     []int64
}

// mysqlClaims groups rows by claim: the rows of one incarnation's claim
// share their version.
func mysqlClaims(rows []claimRef) ([]mysqlClaim, error) {
	type key struct {
		owner string
		at    int64
	}
	var out []mysqlClaim
	at := make(map[key]int, 2)
	for _, row := range rows {
		v, ok := row.version.(time.Time)
		if !ok {
			return nil, fmt.Errorf("row %d: claim version %T is not a MySQL claim's", row.id, row.version)
		}
		k := key{row.owner, v.UnixMicro()}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, mysqlClaim{owner: row.owner, version: v})
		}
		out[i].ids = append(out[i].ids, row.id)
	}
	return out, nil
}
