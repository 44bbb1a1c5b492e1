package relay

import "errors"

// Permanent marks err, a publish error, as the event's own fault: the
// broker refused that message (too large, a topic that cannot exist, not
// authorised), and publishing it again would fail the same way. A
// publisher returns it from Publish, or in PublishBatch's slice, for the
// events it concerns; kafkapub does for Kafka's refusals.
//
// Only such failures make an event dead: once an event has failed
// MaxAttempts times and the last failure is permanent, it is dead. Every
// other error is taken for an outage (the broker, the network or the
// publisher away): the event is retried, with a backoff capped at
// OutageBackoffMax, for as long as the outage lasts, and never goes dead.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, is marked as the
// event's own fault: made by Permanent, or any error with a method
// Permanent() bool that returns true, so publishers that do not import this
// package can mark their errors too.
func IsPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() error   { return e.err }
func (e permanentError) Permanent() bool { return true }
