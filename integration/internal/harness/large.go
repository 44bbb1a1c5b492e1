package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gocloud.dev/blob"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// LargeConfig turns the claim check on in a scenario: the relays run
// with --large-payloads on a bucket of the scenario's own on the S3 API
// server of .ci/services (moto), each relay through a Proxy of its own
// (kept across restarts under its id), so a fault can take the store away
// or kill a relay right after an upload; and some of the GORM writers'
// events are large.
type LargeConfig struct {
	// Percent of the GORM writers' events carry Bytes more of payload.
	Percent int
	Bytes   int
	// Over is the relays' --large-payloads-over: events over it go by
	// reference.
	Over int
	// Orphans large events go to a topic the broker refuses (auto-creation
	// off): each is uploaded, then its reference is refused until it is
	// dead, which leaves its object an orphan, for the scenario's check to
	// find and the store's Prune to remove.
	Orphans int
}

// largeStore is a scenario's claim check store: its bucket, and the
// proxies in front of the S3 server that the relays use.
type largeStore struct {
	cfg    LargeConfig
	s3     testkit.S3
	bucket string
	prefix string // the objects' key prefix for the scenario's table

	mu      sync.Mutex
	proxies map[string]*Proxy // by relay id
	down    bool              // a store outage: proxies made now start down

	outages     atomic.Int64
	uploadKills atomic.Int64
	mu2         sync.Mutex
	killedAfter []string // event ids whose upload a relay was killed after
}

func newLargeStore(ctx context.Context, env *Env, cfg LargeConfig) (*largeStore, error) {
	s3, err := testkit.FindS3(ctx)
	if err != nil {
		return nil, fmt.Errorf("the claim check's store: %w", err)
	}
	bucket, err := s3.NewBucket(ctx, "chaos")
	if err != nil {
		return nil, err
	}
	// The keys claimcheck.Store.Key gives the scenario's table: on MySQL
	// the table has no schema (the relay's Table.Schema is empty; its
	// database is the connection's).
	prefix := claimcheck.PrefixDefault + url.PathEscape(env.DB.Schema) + "." + url.PathEscape(txoutbox.TableNameDefault) + "/"
	if env.MySQL() {
		prefix = claimcheck.PrefixDefault + url.PathEscape(txoutbox.TableNameDefault) + "/"
	}
	return &largeStore{cfg: cfg, s3: s3, bucket: bucket, prefix: prefix, proxies: map[string]*Proxy{}}, nil
}

// relayArgs are relay id's flags for the store, through its proxy.
func (l *largeStore) relayArgs(id string) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.proxies[id]
	if p == nil {
		u, err := url.Parse(l.s3.Endpoint)
		if err != nil {
			return nil, err
		}
		if p, err = NewProxy(u.Host); err != nil {
			return nil, err
		}
		if l.down {
			p.Down()
		}
		l.proxies[id] = p
	}
	return []string{"--large-payloads", testkit.StoreURL("http://"+p.Addr(), l.bucket), "--large-payloads-over", fmt.Sprint(l.cfg.Over)}, nil
}

// relayEnv is the relays' environment: the S3 server's credentials.
func (l *largeStore) relayEnv() []string {
	return append(os.Environ(), "AWS_ACCESS_KEY_ID="+l.s3.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+l.s3.SecretAccessKey, "AWS_REGION="+l.s3.Region)
}

// setDown takes the store away from every relay (connections refused), or
// brings it back.
func (l *largeStore) setDown(down bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
	var errs []error
	for _, p := range l.proxies {
		if down {
			p.Down()
		} else {
			errs = append(errs, p.Up())
		}
	}
	return errors.Join(errs...)
}

func (l *largeStore) proxy(id string) *Proxy {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proxies[id]
}

func (l *largeStore) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		p.Close()
	}
}

// open opens the bucket directly (not through a proxy), with retention.
func (l *largeStore) open(ctx context.Context, retention time.Duration) (*claimcheck.Store, error) {
	l.s3.Setenv()
	return claimcheck.Open(ctx, l.s3.StoreURL(l.bucket), claimcheck.Config{Retention: retention})
}

// KillAfterUpload arms relay id's store proxy: the next reply that
// acknowledges an object's upload (an HTTP 200 to a PUT under the
// scenario's prefix) is held while the relay is SIGKILLed, so it dies
// with the payload stored and its reference not published. It reports
// whether that happened within wait.
func (l *largeStore) killAfterUpload(ctx context.Context, f *Fleet, id string, wait time.Duration) bool {
	p := l.proxy(id)
	if p == nil {
		return false
	}
	put := []byte("PUT /" + l.bucket + "/" + l.prefix)
	var armed atomic.Bool
	armed.Store(true)
	fired := make(chan struct{})
	p.OnReply(func(req, reply []byte) {
		if !bytes.HasPrefix(req, put) || !bytes.HasPrefix(reply, []byte("HTTP/1.1 200")) || !armed.CompareAndSwap(true, false) {
			return
		}
		if f.Kill(id) == nil {
			l.uploadKills.Add(1)
			event, _, _ := strings.Cut(string(req[len(put):]), " ") // "<event id>?x-id=PutObject HTTP/1.1"
			event, _, _ = strings.Cut(event, "?")
			l.mu2.Lock()
			l.killedAfter = append(l.killedAfter, event)
			l.mu2.Unlock()
		}
		close(fired)
	})
	defer p.OnReply(nil)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-fired:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	if !armed.CompareAndSwap(true, false) {
		<-fired // fired meanwhile
		return true
	}
	return false
}

// UploadKills SIGKILLs relays at least min times, every other time right
// after an upload (the store holds the payload, the reference is not
// published: the kill lands between the two) and otherwise at random, and
// starts a replacement after each. One in-flight window per kill.
func UploadKills(min int) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		n := 0
		err := until(ctx, w, min, 300*time.Millisecond, 1500*time.Millisecond, func(k int) error {
			id, ok := victim(ctx, w, k, 2*time.Second)
			if !ok {
				return nil
			}
			if k%2 == 0 {
				if !w.large.killAfterUpload(ctx, w.Fleet, id, 5*time.Second) {
					return nil // no upload by it meanwhile
				}
			} else if err := w.Fleet.Kill(id); err != nil {
				return nil // killed by another fault meanwhile
			}
			n++
			if !sleep(ctx, w.Env.Duration(0, 500*time.Millisecond)) {
				return ctx.Err()
			}
			return w.Fleet.startRetry(ctx, "")
		})
		return n, err
	}
}

// StoreOutage takes the payload store away from every relay for d (its
// connections refused), after a moment of normal load.
func StoreOutage(d time.Duration) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		if !sleep(ctx, 2*time.Second) {
			return 0, ctx.Err()
		}
		w.Env.Logf("store outage: the payload store refuses connections for %s", d)
		if err := w.large.setDown(true); err != nil {
			return 0, err
		}
		w.large.outages.Add(1)
		ok := sleep(ctx, d)
		if err := w.large.setDown(false); err != nil {
			return 0, err
		}
		if !ok {
			return 0, ctx.Err()
		}
		w.Env.Logf("store outage: the payload store is back")
		return 0, nil
	}
}

// emitOrphans writes the orphan-to-be events: large, to a topic the
// broker refuses, each on an aggregate of its own.
func emitOrphans(ctx context.Context, w *World, n int) error {
	for i := range n {
		e := jsonEvent(PoisonTopic, fmt.Sprintf("orphan-%d", i), "doc.orphaned", w.large.cfg.Bytes)
		if err := w.Writers.Emit(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// checkLarge checks what the claim check did in a scenario: every event
// over the threshold went by reference and every other one did not; every
// reference's object holds the event's bytes (Fetch checks them against
// the reference's digest, which must be the outbox row's); the events
// whose relay was killed after their upload were delivered; the objects
// no delivered reference names (orphans) are exactly those of the dead
// events; and once past its retention, Prune removes them.
func checkLarge(ctx context.Context, w *World, res *Result) error {
	l := w.large
	names, err := w.Env.names()
	if err != nil {
		return err
	}
	digests := map[string]string{} // event id -> the row's SHA-256, for rows over the threshold
	rows, err := w.Env.DB.SQL.QueryContext(ctx, largeRowsQuery(w.Env, names.Table), l.cfg.Over/2)
	if err != nil {
		return fmt.Errorf("read the large rows: %w", err)
	}
	for rows.Next() {
		var id, sum string
		if err := rows.Scan(&id, &sum); err != nil {
			rows.Close()
			return err
		}
		digests[id] = sum
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	store, err := l.open(ctx, claimcheck.RetentionFloor)
	if err != nil {
		return err
	}
	defer store.Close()
	var errs []error
	referenced := map[string]bool{}
	topics := dedupe(append([]string{TopicEnt, TopicGorm}, w.topics...))
	err = kafkatest.ReadAll(ctx, strings.Split(w.Broker.Addr(), ","), topics, func(r *kgo.Record) error {
		md := map[string]string{}
		for _, h := range r.Headers {
			md[h.Key] = string(h.Value)
		}
		id := md[txoutbox.HeaderEventID]
		sum, large := digests[id]
		switch {
		case claimcheck.IsReference(md) && !large:
			errs = append(errs, fmt.Errorf("event %s went by reference, and it is not large", id))
		case !claimcheck.IsReference(md) && large && len(r.Value) > l.cfg.Over:
			errs = append(errs, fmt.Errorf("event %s of %d bytes went as it is, over the threshold %d", id, len(r.Value), l.cfg.Over))
		case claimcheck.IsReference(md):
			if md[claimcheck.HeaderSHA256] != sum {
				errs = append(errs, fmt.Errorf("event %s: the reference's SHA-256 %s is not the row's %s", id, md[claimcheck.HeaderSHA256], sum))
			}
			if referenced[id] {
				return nil // a duplicate: its object was checked
			}
			referenced[id] = true
			if _, err := store.Fetch(ctx, md); err != nil {
				errs = append(errs, fmt.Errorf("event %s: %w", id, err))
			}
		}
		if len(errs) > 10 {
			return errors.Join(errs...)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.LargeRefs = len(referenced)
	res.UploadKills = int(l.uploadKills.Load())
	res.StoreOutages = int(l.outages.Load())
	dead := map[string]bool{}
	for _, d := range res.DeadEvents {
		dead[d.EventID] = true
	}
	l.mu2.Lock()
	for _, id := range l.killedAfter {
		// An orphan-to-be's upload can be the one its relay dies after:
		// it goes dead for its topic, as the others do.
		if !referenced[id] && !dead[id] {
			errs = append(errs, fmt.Errorf("event %s, whose relay was killed after its upload, was not delivered", id))
		}
	}
	l.mu2.Unlock()
	if res.LargeRefs == 0 {
		errs = append(errs, errors.New("no event went by reference: the scenario wrote nothing large"))
	}

	orphans, newest, err := l.orphans(ctx, referenced)
	if err != nil {
		return err
	}
	res.Orphans = len(orphans)
	for _, id := range orphans {
		if !dead[id] {
			errs = append(errs, fmt.Errorf("object of event %s is an orphan, and the event is not dead", id))
		}
	}
	if len(orphans) != l.cfg.Orphans {
		errs = append(errs, fmt.Errorf("%d orphan objects, want %d (one per event refused for good after its upload)", len(orphans), l.cfg.Orphans))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(orphans) == 0 {
		return nil
	}
	// The cleanup: Prune, once the orphans are past their retention.
	wait := time.Until(newest.Add(claimcheck.RetentionFloor + time.Second))
	w.Env.Logf("%d orphan objects; pruning in %s, once they are past the retention (%s)", len(orphans), wait.Round(time.Second), claimcheck.RetentionFloor)
	if !sleep(ctx, wait) {
		return ctx.Err()
	}
	if res.Pruned, err = store.Prune(ctx); err != nil {
		return err
	}
	left, _, err := l.orphans(ctx, referenced)
	if err != nil {
		return err
	}
	if len(left) != 0 || res.Pruned < len(orphans) {
		return fmt.Errorf("Prune deleted %d objects and left %d of the %d orphans", res.Pruned, len(left), len(orphans))
	}
	return nil
}

// orphans lists the scenario's objects and returns the event ids of those
// no delivered reference names, and when the newest of them was written.
func (l *largeStore) orphans(ctx context.Context, referenced map[string]bool) ([]string, time.Time, error) {
	b, err := blob.OpenBucket(ctx, l.s3.StoreURL(l.bucket))
	if err != nil {
		return nil, time.Time{}, err
	}
	defer b.Close()
	var (
		out    []string
		newest time.Time
	)
	it := b.List(&blob.ListOptions{Prefix: l.prefix})
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, time.Time{}, fmt.Errorf("list the bucket %s: %w", l.bucket, err)
		}
		id := strings.TrimPrefix(obj.Key, l.prefix)
		if !referenced[id] {
			out = append(out, id)
			if obj.ModTime.After(newest) {
				newest = obj.ModTime
			}
		}
	}
	return out, newest, nil
}

// largeRowsQuery selects the event id and the hex SHA-256 of the payload
// of the rows whose payload is over $1 bytes.
func largeRowsQuery(env *Env, table string) string {
	if env.MySQL() {
		return `SELECT event_id, LOWER(SHA2(payload, 256)) FROM ` + table + ` WHERE LENGTH(payload) > ?`
	}
	return `SELECT event_id::text, encode(sha256(payload), 'hex') FROM ` + table + ` WHERE octet_length(payload) > $1`
}
