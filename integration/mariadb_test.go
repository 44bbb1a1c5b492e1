package integration_test

import (
	"context"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the relay's database in TestMariaDBCrash

	"github.com/txoutbox/txoutbox/integration/internal/harness"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// TestMariaDBCrash is the crash suite on MariaDB at CI's size: the relays
// (outbox relay on a mysql:// URL) SIGKILLed, restarted under their ids,
// paused and partitioned from the database and the broker, their
// connections KILLed by the server, the broker slowed, operators retrying,
// dropping and replaying events (outbox dead and replay), and the suite's
// own mariadbd (port 3307, testkit.ChaosMySQLd) SIGKILLed and started
// again, all at once under load (harness.Mixed and harness.ConnLosses);
// then two consumers read everything through the inbox on MariaDB
// (harness.WithInbox). `go run ./integration/chaos -db mariadb` runs every
// scenario that applies on MariaDB, at full size. It runs in the cluster
// lane: one scenario that crashes a server of its own at a time.
func TestMariaDBCrash(t *testing.T) {
	plan := harness.Mixed(harness.Size{Events: 3000, Over: 15 * time.Second})
	plan.Fault = harness.Mix(plan.Fault, harness.ConnLosses(2))
	plan = harness.WithInbox(plan)
	defer enterLane(t, "the crash suite's scenario on MariaDB", clusterLane, false)()
	m := testkit.ChaosMySQLd
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	unlock, err := m.Lock(ctx) // another process may be crashing it
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer unlock()
	url, err := m.Ensure(ctx)
	if err != nil {
		cancel()
		// A missing service is a failure, in CI and elsewhere.
		t.Fatalf("%s needs a MariaDB server of its own: %v", plan.Name, err)
	}
	db, drop, err := testkit.CreateMySQLDatabase(ctx, url, testkit.SchemaName("t_"+t.Name()), true)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Log(err)
		}
	})
	env := &harness.Env{DB: *db, Bin: bin, Dir: t.TempDir(), Logf: t.Logf, Seed: seed(), MySQLd: &m}
	res := runEnv(t, env, plan)
	if res.DBCrashes < 1 || res.Crashes < 2 || res.SameIDRestarts < 3 || res.Partitions < 2 || res.ConnLosses < 2 || res.AdminOps < 10 {
		t.Fatalf("faults injected: %d mariadbd crashes, %d kills, %d same-id restarts, %d partitions, %d connection losses, %d operator commands; want at least 1, 2, 3, 2, 2, 10",
			res.DBCrashes, res.Crashes, res.SameIDRestarts, res.Partitions, res.ConnLosses, res.AdminOps)
	}
}
