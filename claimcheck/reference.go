package claimcheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// The headers of a reference record, besides the event's own. A consumer
// without this package reads HeaderKey, fetches that object from the
// bucket HeaderStore names, and checks its length against HeaderSize and
// its SHA-256 against HeaderSHA256. The record's value is empty (not
// null: it is no tombstone).
const (
	HeaderKey    = "txoutbox_payload_key"    // the object's key in the bucket
	HeaderStore  = "txoutbox_payload_store"  // the store, as a URL without query ("s3://payloads")
	HeaderSize   = "txoutbox_payload_size"   // the payload's length in bytes, decimal
	HeaderSHA256 = "txoutbox_payload_sha256" // the payload's SHA-256, lower-case hex
)

// Errors of Fetch and the middleware, matched with errors.Is.
var (
	// ErrObjectMissing: the reference names an object the store does not
	// hold: pruned before the consumer came to it (Config.Retention
	// shorter than the consumer's lag), deleted by hand, or read from
	// another bucket than the relay wrote to.
	ErrObjectMissing = errors.New("claimcheck: the referenced payload is not in the store")

	// ErrPayloadMismatch: the object's length or SHA-256 differs from the
	// reference's: overwritten or corrupted in the store.
	ErrPayloadMismatch = errors.New("claimcheck: the stored payload differs from its reference")

	// ErrBadReference: a reference header is missing or malformed.
	ErrBadReference = errors.New("claimcheck: malformed reference")
)

// IsReference reports whether metadata (a message's, or a Kafka record's
// headers as a map) is a claim check's reference.
func IsReference(metadata map[string]string) bool {
	_, ok := metadata[HeaderKey]
	return ok
}

// Fetch returns the payload a reference's metadata names, checked against
// its size and digest. It fails with ErrObjectMissing when the store does
// not hold the object, ErrPayloadMismatch when the bytes differ,
// ErrBadReference when metadata is not a well-formed reference, and the
// store's error (naming it) when the store is away.
func (s *Store) Fetch(ctx context.Context, metadata map[string]string) ([]byte, error) {
	key := metadata[HeaderKey]
	if key == "" {
		return nil, fmt.Errorf("%w: no %s", ErrBadReference, HeaderKey)
	}
	size, err := strconv.ParseInt(metadata[HeaderSize], 10, 64)
	if err != nil || size < 0 {
		return nil, fmt.Errorf("%w: %s %q", ErrBadReference, HeaderSize, metadata[HeaderSize])
	}
	want, err := hex.DecodeString(metadata[HeaderSHA256])
	if err != nil || len(want) != sha256.Size {
		return nil, fmt.Errorf("%w: %s %q", ErrBadReference, HeaderSHA256, metadata[HeaderSHA256])
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	r, err := s.bucket.NewReader(ctx, key, &blob.ReaderOptions{BeforeRead: s3Read})
	switch {
	case isNotFound(err):
		return nil, fmt.Errorf("%w: %s in store %s", ErrObjectMissing, key, s.name)
	case err != nil:
		return nil, fmt.Errorf("claimcheck: store %s: read %s: %w", s.name, key, err)
	}
	defer r.Close()
	if r.Size() != size {
		return nil, fmt.Errorf("%w: %s in store %s is %d bytes, the reference says %d", ErrPayloadMismatch, key, s.name, r.Size(), size)
	}
	// Read into a buffer of the reference's size: one copy, no growing.
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("claimcheck: store %s: read %s: %w", s.name, key, err)
	}
	if n, _ := r.Read(make([]byte, 1)); n > 0 { // longer than it said: changed while read
		return nil, fmt.Errorf("%w: %s in store %s is longer than the %d bytes the reference says", ErrPayloadMismatch, key, s.name, size)
	}
	if got := sha256.Sum256(data); string(got[:]) != string(want) {
		return nil, fmt.Errorf("%w: %s in store %s has SHA-256 %x, the reference says %x", ErrPayloadMismatch, key, s.name, got, want)
	}
	return data, nil
}

// Middleware returns a Watermill handler middleware that replaces a
// reference by its payload, checked, before the handler sees the message:
// the payload becomes the event's, and the reference headers are removed,
// so the handler gets the message a small event would be. Other messages
// pass unchanged. A failed fetch fails the message (nacked, so
// redelivered) with Fetch's error: ErrObjectMissing and
// ErrPayloadMismatch do not heal by themselves, so a router should send
// such messages to a poison queue (Watermill's middleware.PoisonQueue).
//
// With package inbox, add this middleware first, so that the download
// happens before the inbox's transaction opens, not inside it:
//
//	router.AddMiddleware(claimcheck.Middleware(store), inboxMiddleware)
func Middleware(s *Store) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if err := s.Resolve(msg); err != nil {
				return nil, err
			}
			return h(msg)
		}
	}
}

// Resolve replaces msg's payload by the one its reference names, as
// Middleware does, and removes the reference headers; a message that is
// not a reference is left as it is. It fetches on msg's context.
func (s *Store) Resolve(msg *message.Message) error {
	if !IsReference(msg.Metadata) {
		return nil
	}
	data, err := s.Fetch(msg.Context(), msg.Metadata)
	if err != nil {
		return fmt.Errorf("claimcheck: message %s: %w", msg.UUID, err)
	}
	msg.Payload = data
	for _, h := range []string{HeaderKey, HeaderStore, HeaderSize, HeaderSHA256} {
		delete(msg.Metadata, h)
	}
	return nil
}

func isNotFound(err error) bool {
	return err != nil && gcerrors.Code(err) == gcerrors.NotFound
}
