package claimcheck

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:///path
	_ "gocloud.dev/blob/memblob"  // mem://, for tests
	_ "gocloud.dev/blob/s3blob"   // s3://bucket?endpoint=…&region=…

	"github.com/txoutbox/txoutbox"
)

// Defaults and floors of Config: a field left zero takes its default, and
// one below its floor is refused.
const (
	// PrefixDefault is Config.Prefix's default.
	PrefixDefault = "txoutbox/"
	// TimeoutDefault bounds one upload, download, check or prune
	// request: a 50 MB payload at 10 MB/s, with room.
	TimeoutDefault = time.Minute
	// TimeoutFloor leaves a request a round trip to the store.
	TimeoutFloor = 100 * time.Millisecond
	// RetentionDefault is how long Prune keeps an object after it was
	// last written: the polling relay's retention of published rows,
	// which a consumer lagging longer could not be served from anyway.
	RetentionDefault = 7 * 24 * time.Hour
	// RetentionFloor: an object pruned sooner than a consumer fetches it
	// is lost to that consumer; under a minute is a unit slip.
	RetentionFloor = time.Minute
)

// ErrInvalidConfig is matched by every error Open and New return for a
// bad Config or URL.
var ErrInvalidConfig = errors.New("claimcheck: invalid config")

// Config configures a Store. The zero value is valid.
type Config struct {
	// Prefix starts every object's key; the key is Prefix, the outbox
	// table ("schema.name", path-escaped) and the event id:
	// "txoutbox/public.outbox/0190…". Prune looks under it only. Default
	// PrefixDefault.
	Prefix string

	// Timeout bounds each request to the store: an upload, a download,
	// a check, a page of a prune. Default TimeoutDefault (1m); at least
	// TimeoutFloor (100ms).
	Timeout time.Duration

	// Retention is how long Prune keeps an object after it was last
	// written (each publish attempt writes it again). It must outlast
	// the longest a consumer may lag behind the relay, or a reference
	// will name a pruned object (ErrObjectMissing). Default
	// RetentionDefault (7 days); at least RetentionFloor (1m).
	Retention time.Duration
}

// Store keeps the payloads of large events in a bucket: the relay
// uploads them (Offload, which makes it a relay.LargePayloads) and
// consumers read them back (Fetch, Middleware). It is safe for
// concurrent use.
type Store struct {
	bucket *blob.Bucket
	s3     *s3Upload // nil when the bucket is not on S3
	local  bool      // the bucket is a directory of this host (fileblob)
	name   string
	cfg    Config
	owned  bool // Close closes bucket

	mu       sync.Mutex
	failure  error     // the last upload's error, nil after a success
	failedAt time.Time // when it failed
}

// failureRemembered is how long Check reports an upload's failure when no
// upload came after it. A relay retries a failed event at least every
// OutageBackoffMax (30s by default), which refreshes it while the store
// keeps failing; one whose event a peer published meanwhile must not keep
// this relay unready for good.
const failureRemembered = 5 * time.Minute

// Open opens the store at urlstr, a gocloud.dev/blob URL:
//
//	s3://bucket?region=eu-west-1                        (AWS S3; credentials from the AWS_* environment)
//	s3://bucket?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1 (S3-compatible servers)
//	file:///var/lib/outbox-payloads                     (a local directory, for development; objects are written beside their place unless no_tmp_dir is given)
//	mem://                                              (in memory, for tests)
//
// Other gocloud.dev/blob schemes (gs://, azblob://) work once their
// driver package is imported. Open makes no request: Check tells whether
// the bucket answers. An unknown scheme or a malformed URL fails with
// ErrInvalidConfig.
func Open(ctx context.Context, urlstr string, cfg Config) (*Store, error) {
	u, err := url.Parse(urlstr)
	if err != nil {
		return nil, fmt.Errorf("%w: store URL: %w", ErrInvalidConfig, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: store URL %q has no scheme (s3://bucket, file:///path)", ErrInvalidConfig, urlstr)
	}
	if !blob.DefaultURLMux().ValidBucketScheme(u.Scheme) {
		return nil, fmt.Errorf("%w: store URL %q: unknown scheme %q (s3, file, mem, or a gocloud.dev/blob driver imported)", ErrInvalidConfig, Name(urlstr), u.Scheme)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if q := u.Query(); u.Scheme == "file" && !q.Has("no_tmp_dir") {
		// fileblob writes each object to os.TempDir and renames it into
		// place, which fails when the directory is on another file system
		// (a volume of its own, as payloads get): write it beside its
		// place instead. A crash's leftover is an object Prune removes.
		q.Set("no_tmp_dir", "true")
		u.RawQuery = q.Encode()
		urlstr = u.String()
	}
	b, err := blob.OpenBucket(ctx, urlstr)
	if err != nil {
		return nil, fmt.Errorf("%w: store %s: %w", ErrInvalidConfig, Name(urlstr), err)
	}
	s := newStore(b, Name(urlstr), cfg)
	s.owned = true
	return s, nil
}

// New returns a store on bucket, which the caller opened and closes.
// name names it in errors and in the reference's HeaderStore (a URL
// without credentials, such as "s3://payloads").
func New(bucket *blob.Bucket, name string, cfg Config) (*Store, error) {
	if bucket == nil {
		return nil, fmt.Errorf("%w: bucket is nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newStore(bucket, name, cfg), nil
}

func newStore(b *blob.Bucket, name string, cfg Config) *Store {
	cfg.Prefix = cmp.Or(cfg.Prefix, PrefixDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	var fi os.FileInfo
	return &Store{bucket: b, s3: newS3Upload(b), local: b.As(&fi), name: name, cfg: cfg}
}

// Validate reports whether c, with its zero fields taken as their
// defaults, is valid; the error matches ErrInvalidConfig.
func (c Config) Validate() error {
	if c.Timeout != 0 && c.Timeout < TimeoutFloor {
		return fmt.Errorf("%w: Timeout %s is below its floor %s", ErrInvalidConfig, c.Timeout, TimeoutFloor)
	}
	if c.Retention != 0 && c.Retention < RetentionFloor {
		return fmt.Errorf("%w: Retention %s is below its floor %s", ErrInvalidConfig, c.Retention, RetentionFloor)
	}
	return nil
}

// Name is urlstr without its query and user information: what names a
// store in errors and in HeaderStore ("s3://payloads", "file:///var/lib/x").
func Name(urlstr string) string {
	u, err := url.Parse(urlstr)
	if err != nil {
		return "(a malformed URL)"
	}
	u.RawQuery, u.User, u.Fragment = "", nil, ""
	return u.String()
}

// Name names the store: its URL without query, or New's name.
func (s *Store) Name() string { return s.name }

// Key is the key under which the payload of table's event eventID is
// stored: the same for every attempt, relay and replay.
func (s *Store) Key(table txoutbox.Table, eventID uuid.UUID) string {
	t := url.PathEscape(cmp.Or(table.Name, txoutbox.TableNameDefault))
	if table.Schema != "" {
		t = url.PathEscape(table.Schema) + "." + t
	}
	return s.cfg.Prefix + t + "/" + eventID.String()
}

// Offload stores msg's payload under Key(table, the event id in msg's
// UUID) and returns the reference to publish in its place: msg's UUID and
// metadata (so the same key, event id, headers and CloudEvents
// attributes), an empty payload, and the headers HeaderKey, HeaderStore,
// HeaderSize and HeaderSHA256. Writing the object again, on a retry or
// by another relay, writes the same bytes. An error is the store's
// (away, slow, refusing): the relay retries the event.
func (s *Store) Offload(ctx context.Context, table txoutbox.Table, msg *message.Message) (*message.Message, error) {
	id, err := uuid.Parse(msg.UUID)
	if err != nil {
		return nil, fmt.Errorf("claimcheck: message UUID %q is not an event id: %w", msg.UUID, err)
	}
	key := s.Key(table, id)
	sum := sha256.Sum256(msg.Payload)
	digest := hex.EncodeToString(sum[:])
	opts := &blob.WriterOptions{
		ContentType: cmp.Or(msg.Metadata.Get(txoutbox.HeaderContentType), "application/octet-stream"),
		Metadata:    map[string]string{"event_id": msg.UUID, "sha256": digest},
	}
	// The store must refuse bytes damaged on the way: S3 checks the
	// SHA-256 (s3Upload), GCS and Azure the MD5. A directory of this host
	// has no way for them to be damaged on, and an MD5 given would be
	// computed twice more (by gocloud.dev to check it, by fileblob for
	// the object's attributes).
	switch {
	case s.s3 != nil:
		opts.BeforeWrite = s.s3.beforeWrite(len(msg.Payload), sum)
	case !s.local:
		check := md5.Sum(msg.Payload)
		opts.ContentMD5 = check[:]
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	// Upload, not WriteAll: WriteAll computes an MD5 when given none, and
	// gocloud.dev hashes what goes through a Writer again when ContentMD5
	// is set; Upload without it hands the reader to the driver as it is.
	err = s.bucket.Upload(ctx, key, bytes.NewReader(msg.Payload), opts)
	s.note(err)
	if err != nil {
		return nil, fmt.Errorf("claimcheck: store %s: upload %s (%d bytes): %w", s.name, key, len(msg.Payload), err)
	}
	ref := message.NewMessage(msg.UUID, []byte{}) // empty, not null: no tombstone on a compacted topic
	for k, v := range msg.Metadata {
		ref.Metadata.Set(k, v)
	}
	ref.Metadata.Set(HeaderKey, key)
	ref.Metadata.Set(HeaderStore, s.name)
	ref.Metadata.Set(HeaderSize, strconv.Itoa(len(msg.Payload)))
	ref.Metadata.Set(HeaderSHA256, digest)
	ref.SetContext(msg.Context())
	return ref, nil
}

// note remembers the outcome of an upload for Check.
func (s *Store) note(err error) {
	s.mu.Lock()
	s.failure, s.failedAt = err, time.Now()
	s.mu.Unlock()
}

// Check reports whether the store works, for a readiness probe: nil when
// the bucket answers and the last upload, if any, succeeded (or failed
// more than five minutes ago, with none since). Its error
// names the store: the bucket missing, access refused, the store away or
// slow, or the last upload's failure (a permission to list but not to
// write shows there).
func (s *Store) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	ok, err := s.bucket.IsAccessible(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("claimcheck: store %s: %w", s.name, err)
	case !ok:
		return fmt.Errorf("claimcheck: store %s: the bucket does not exist", s.name)
	}
	s.mu.Lock()
	failure, at := s.failure, s.failedAt
	s.mu.Unlock()
	if failure != nil && time.Since(at) < failureRemembered {
		return fmt.Errorf("claimcheck: store %s: the last upload failed: %w", s.name, failure)
	}
	return nil
}

// Prune deletes the objects under Config.Prefix last written more than
// Config.Retention ago, and returns how many it deleted. Run it
// periodically (outbox relay does, with --large-payloads); several
// processes may run it at once. Each publish attempt of an event writes
// its object again, so an object is pruned only Retention after the last
// time its reference was published (a replay included).
func (s *Store) Prune(ctx context.Context) (int, error) {
	before := time.Now().Add(-s.cfg.Retention)
	deleted := 0
	token := blob.FirstPageToken
	for {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		page, next, err := s.bucket.ListPage(pctx, token, 1000, &blob.ListOptions{Prefix: s.cfg.Prefix})
		cancel()
		if err != nil {
			return deleted, fmt.Errorf("claimcheck: store %s: list %s: %w", s.name, s.cfg.Prefix, err)
		}
		for _, obj := range page {
			if obj.IsDir || !obj.ModTime.Before(before) || strings.HasSuffix(obj.Key, "/") {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
			err := s.bucket.Delete(dctx, obj.Key)
			cancel()
			switch {
			case err == nil:
				deleted++
			case isNotFound(err): // another pruner's
			default:
				return deleted, fmt.Errorf("claimcheck: store %s: delete %s: %w", s.name, obj.Key, err)
			}
		}
		if len(next) == 0 {
			return deleted, nil
		}
		token = next
	}
}

// Close closes the bucket, when Open opened it.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.bucket.Close()
}
