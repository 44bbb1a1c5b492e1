package outboxadmin

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// stateErr is a PostgreSQL error with its SQLSTATE, as pgconn.PgError
// shows it.
type stateErr string

func (e stateErr) Error() string    { return "server said " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

// A transaction the database ended as a deadlock's victim, or for a
// serialization failure, runs again, up to victimAttempts in all; any
// other error ends it at once.
func TestRetryVictim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		errs  []error
		calls int
		want  error
	}{
		{"a deadlock, then through", []error{stateErr("40P01"), nil}, 2, nil},
		{"a serialization failure, then through", []error{fmt.Errorf("commit: %w", stateErr("40001")), nil}, 2, nil},
		{"a victim every time", []error{stateErr("40P01"), stateErr("40P01"), stateErr("40P01"), nil}, victimAttempts, stateErr("40P01")},
		{"another error", []error{stateErr("23505"), nil}, 1, stateErr("23505")},
		{"a lock wait that timed out", []error{stateErr("55P03"), nil}, 1, stateErr("55P03")},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := retryVictim(context.Background(), func() error {
				calls++
				return c.errs[calls-1]
			})
			if calls != c.calls || !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
				t.Errorf("%d calls, error %v; want %d calls, error %v", calls, err, c.calls, c.want)
			}
		})
	}
}
