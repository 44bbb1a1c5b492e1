package writertrace

import "github.com/txoutbox/txoutbox"

// event is the Writer's tests' helper (integration/dbtests/txoutbox), repeated here.
func event(aggregate string, n int) txoutbox.Event {
	e, _ := txoutbox.NewEvent("orders", "order", aggregate, "order.placed", map[string]int{"n": n})
	return e
}
