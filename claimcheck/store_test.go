package claimcheck_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/relay"
)

// The Store is what the relay offloads through.
var _ relay.LargePayloads = (*claimcheck.Store)(nil)

var table = txoutbox.Table{Schema: "shop", Name: "outbox"}

// openFile opens a store on a fresh directory.
func openFile(t *testing.T, cfg claimcheck.Config) (*claimcheck.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := claimcheck.Open(context.Background(), "file://"+dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// eventMessage is the message the relay publishes for an event with
// payload, with a header and the CloudEvents attributes.
func eventMessage(t *testing.T, payload []byte) *message.Message {
	t.Helper()
	e, err := txoutbox.NewEvent("orders", "order", "order-1", "order.placed", json(payload))
	if err != nil {
		t.Fatal(err)
	}
	e.Headers = map[string]string{"tenant": "acme"}
	msg := relay.Message(e)
	msg.Metadata.Set("ce_id", e.ID.String())
	msg.Metadata.Set("ce_source", "/txoutbox/shop.outbox")
	return msg
}

// json makes payload a JSON string, as NewEvent needs valid JSON.
func json(payload []byte) rawJSON { return rawJSON(strconv.Quote(string(payload))) }

type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

func large(n int) []byte { return bytes.Repeat([]byte("abcdefgh"), n/8) }

// The reference keeps the message's UUID and every header, has an empty
// (not nil) payload, and names the object, the payload's size and its
// SHA-256; the object holds the payload.
func TestOffloadMakesAReference(t *testing.T) {
	t.Parallel()
	s, _ := openFile(t, claimcheck.Config{})
	msg := eventMessage(t, large(64<<10))
	ref, err := s.Offload(context.Background(), table, msg)
	if err != nil {
		t.Fatal(err)
	}
	if ref.UUID != msg.UUID || ref.Payload == nil || len(ref.Payload) != 0 {
		t.Fatalf("reference UUID %s payload %v: want %s and an empty, non-nil payload", ref.UUID, ref.Payload, msg.UUID)
	}
	for k, v := range msg.Metadata {
		if ref.Metadata.Get(k) != v {
			t.Errorf("reference header %s = %q, want the event's %q", k, ref.Metadata.Get(k), v)
		}
	}
	sum := sha256.Sum256(msg.Payload)
	want := map[string]string{
		claimcheck.HeaderKey:    "txoutbox/shop.outbox/" + msg.UUID,
		claimcheck.HeaderSize:   strconv.Itoa(len(msg.Payload)),
		claimcheck.HeaderSHA256: hex.EncodeToString(sum[:]),
		claimcheck.HeaderStore:  s.Name(),
	}
	for k, v := range want {
		if got := ref.Metadata.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if !claimcheck.IsReference(ref.Metadata) || claimcheck.IsReference(msg.Metadata) {
		t.Error("IsReference does not tell the reference from the event")
	}
	got, err := s.Fetch(context.Background(), ref.Metadata)
	if err != nil || !bytes.Equal(got, msg.Payload) {
		t.Fatalf("Fetch = %d bytes, %v; want the payload", len(got), err)
	}
}

// Every attempt writes the same object: one object per event, whoever
// writes it and however often.
func TestOffloadIsIdempotent(t *testing.T) {
	t.Parallel()
	s, dir := openFile(t, claimcheck.Config{})
	msg := eventMessage(t, large(4096))
	for range 3 {
		if _, err := s.Offload(context.Background(), table, msg); err != nil {
			t.Fatal(err)
		}
	}
	other, err := claimcheck.Open(context.Background(), "file://"+dir, claimcheck.Config{}) // a second relay
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Offload(context.Background(), table, msg); err != nil {
		t.Fatal(err)
	}
	if n := countObjects(t, dir); n != 1 {
		t.Fatalf("%d objects after four writes of one event, want 1", n)
	}
}

func countObjects(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".attrs") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The middleware hands the handler the payload and the event's headers,
// without the reference's; other messages pass unchanged.
func TestMiddlewareGivesThePayloadBack(t *testing.T) {
	t.Parallel()
	s, _ := openFile(t, claimcheck.Config{})
	msg := eventMessage(t, large(32<<10))
	ref, err := s.Offload(context.Background(), table, msg)
	if err != nil {
		t.Fatal(err)
	}
	var seen []*message.Message
	h := claimcheck.Middleware(s)(func(m *message.Message) ([]*message.Message, error) {
		seen = append(seen, m)
		return nil, nil
	})
	small := eventMessage(t, []byte("small"))
	for _, m := range []*message.Message{ref, small} {
		if _, err := h(m); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(seen[0].Payload, msg.Payload) {
		t.Fatalf("the handler got %d bytes, want the %d of the payload", len(seen[0].Payload), len(msg.Payload))
	}
	if claimcheck.IsReference(seen[0].Metadata) || len(seen[0].Metadata) != len(msg.Metadata) || seen[0].Metadata.Get("tenant") != "acme" {
		t.Fatalf("the handler got headers %v, want the event's %v", seen[0].Metadata, msg.Metadata)
	}
	if !bytes.Equal(seen[1].Payload, small.Payload) {
		t.Fatal("a message that is no reference was changed")
	}
}

// A reference to an object gone, or whose bytes differ, fails the message
// with an error that says which, names the object and the store.
func TestMiddlewareRefusesAMissingOrDifferentObject(t *testing.T) {
	t.Parallel()
	s, dir := openFile(t, claimcheck.Config{})
	h := claimcheck.Middleware(s)(func(*message.Message) ([]*message.Message, error) {
		t.Error("the handler ran")
		return nil, nil
	})
	msg := eventMessage(t, large(8192))
	ref, err := s.Offload(context.Background(), table, msg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.FromSlash(ref.Metadata.Get(claimcheck.HeaderKey)))

	changed := bytes.Clone(msg.Payload)
	changed[100] = 'X' // same size, other bytes
	if err := os.WriteFile(path, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h(ref); !errors.Is(err, claimcheck.ErrPayloadMismatch) || !strings.Contains(err.Error(), ref.Metadata.Get(claimcheck.HeaderKey)) {
		t.Errorf("changed object: %v, want ErrPayloadMismatch naming the key", err)
	}
	if err := os.WriteFile(path, changed[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h(ref); !errors.Is(err, claimcheck.ErrPayloadMismatch) || !strings.Contains(err.Error(), "100 bytes") {
		t.Errorf("truncated object: %v, want ErrPayloadMismatch giving the size", err)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := h(ref); !errors.Is(err, claimcheck.ErrObjectMissing) || !strings.Contains(err.Error(), s.Name()) {
		t.Errorf("missing object: %v, want ErrObjectMissing naming the store", err)
	}

	bad := message.NewMessage(ref.UUID, nil)
	bad.Metadata.Set(claimcheck.HeaderKey, "k")
	bad.Metadata.Set(claimcheck.HeaderSize, "many")
	if _, err := h(bad); !errors.Is(err, claimcheck.ErrBadReference) {
		t.Errorf("malformed reference: %v, want ErrBadReference", err)
	}
}

// Prune deletes the objects last written more than Retention ago, and
// only those, and only under the prefix.
func TestPruneDeletesObjectsPastRetention(t *testing.T) {
	t.Parallel()
	s, dir := openFile(t, claimcheck.Config{Retention: time.Hour})
	old, recent := eventMessage(t, large(2048)), eventMessage(t, large(2048))
	var paths []string
	for _, m := range []*message.Message{old, recent} {
		ref, err := s.Offload(context.Background(), table, m)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Join(dir, filepath.FromSlash(ref.Metadata.Get(claimcheck.HeaderKey))))
	}
	outside := filepath.Join(dir, "other", "file")
	if err := os.MkdirAll(filepath.Dir(outside), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * time.Hour)
	for _, p := range []string{paths[0], outside} {
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Prune(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1 object deleted", n, err)
	}
	for p, want := range map[string]bool{paths[0]: false, paths[1]: true, outside: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", p, err == nil, want)
		}
	}
	// The event published again (a replay) writes its object again.
	if _, err := s.Offload(context.Background(), table, old); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(context.Background()); err != nil || n != 0 {
		t.Fatalf("Prune after a replay = %d, %v; want nothing deleted", n, err)
	}
}

// A file store on another file system than the temporary directory (a
// volume of its own, as payloads get) stores, and Prune removes what a
// crash mid-write leaves beside the objects.
func TestFileStoreOnAVolumeOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	tmp, err := os.MkdirTemp("/dev/shm", "claimcheck-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(tmp, &b) != nil || a.Dev == b.Dev {
		t.Fatalf("%s and %s must be on two file systems", dir, tmp)
	}
	t.Setenv("TMPDIR", tmp)
	s, err := claimcheck.Open(context.Background(), "file://"+dir, claimcheck.Config{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msg := eventMessage(t, large(4096))
	ref, err := s.Offload(context.Background(), table, msg)
	if err != nil {
		t.Fatalf("Offload: %v", err)
	}
	got, err := s.Fetch(context.Background(), ref.Metadata)
	if err != nil || !bytes.Equal(got, msg.Payload) {
		t.Fatalf("Fetch = %v; want the payload back", err)
	}
	leftover := filepath.Join(dir, filepath.FromSlash(ref.Metadata.Get(claimcheck.HeaderKey))) + ".18eed7138c7c55da.tmp"
	if err := os.WriteFile(leftover, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(leftover, past, past); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(context.Background()); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want the leftover deleted", n, err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the leftover is still there: %v", err)
	}
}

// Open refuses a URL it cannot use with ErrInvalidConfig, naming it.
func TestOpenRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"ftp://host/path":                    `unknown scheme "ftp"`,
		"/var/lib/payloads":                  "has no scheme",
		"s3://bucket?no_such_param=1":        "no_such_param",
		"file://" + t.TempDir() + "/missing": "missing",
		"http://[::1":                        "store URL",
	} {
		s, err := claimcheck.Open(context.Background(), url, claimcheck.Config{})
		if !errors.Is(err, claimcheck.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v; want ErrInvalidConfig saying %q", url, err, want)
		}
		if s != nil {
			s.Close()
		}
	}
	if _, err := claimcheck.Open(context.Background(), "mem://", claimcheck.Config{Timeout: time.Millisecond}); !errors.Is(err, claimcheck.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "Timeout 1ms is below its floor 100ms") {
		t.Errorf("Timeout 1ms: %v", err)
	}
}

// Check passes on a working store and names the store when the bucket is
// gone or the last upload failed, until an upload succeeds again.
func TestCheckNamesTheStore(t *testing.T) {
	t.Parallel()
	s, dir := openFile(t, claimcheck.Config{})
	ctx := context.Background()
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check on a working store: %v", err)
	}
	breakDir(t, dir)
	if _, err := s.Offload(ctx, table, eventMessage(t, large(2048))); err == nil {
		t.Fatal("an upload to a store that is gone succeeded")
	}
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), s.Name()) {
		t.Fatalf("Check with the store gone = %v, want an error naming %s", err, s.Name())
	}
	mendDir(t, dir)
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "last upload failed") {
		t.Fatalf("Check after the store came back, before an upload = %v, want the last upload's failure", err)
	}
	if _, err := s.Offload(ctx, table, eventMessage(t, large(2048))); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after an upload succeeded: %v", err)
	}
}

// breakDir makes the file store at dir fail: the directory becomes a
// file (permissions do not stop root, which the tests may run as).
func breakDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mendDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestKeyIsTheTableAndEventID(t *testing.T) {
	t.Parallel()
	s, _ := openFile(t, claimcheck.Config{Prefix: "p/"})
	id := uuid.MustParse("01900000-0000-7000-8000-000000000001")
	for tb, want := range map[txoutbox.Table]string{
		{}:                              "p/outbox/" + id.String(),
		{Schema: "a b", Name: "x/y"}:    "p/a%20b.x%2Fy/" + id.String(),
		{Schema: "public", Name: "out"}: "p/public.out/" + id.String(),
	} {
		if got := s.Key(tb, id); got != want {
			t.Errorf("Key(%v) = %q, want %q", tb, got, want)
		}
	}
}
