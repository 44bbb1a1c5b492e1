package relay

import (
	"testing"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

func TestStaleAfterDefaultIsTheRelays(t *testing.T) {
	t.Parallel()
	if outboxadmin.StaleAfterDefault != StaleAfterDefault {
		t.Fatalf("outboxadmin.StaleAfterDefault = %s, relay.StaleAfterDefault = %s: Status would count relays alive by another rule than the relays' own",
			outboxadmin.StaleAfterDefault, StaleAfterDefault)
	}
}
