package schema

import (
	"context"

	"entgo.io/ent"
)

type beforeStatementKey struct{}

// BeforeStatement returns a context whose Order mutations call fn after the
// outbox hook's reads and just before their statement, so a test can change
// rows concurrently at that moment.
func BeforeStatement(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, beforeStatementKey{}, fn)
}

func testHook(next ent.Mutator) ent.Mutator {
	return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
		if fn, ok := ctx.Value(beforeStatementKey{}).(func()); ok {
			fn()
		}
		return next.Mutate(ctx, m)
	})
}
