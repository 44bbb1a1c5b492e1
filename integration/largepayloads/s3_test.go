package largepayloads

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// TestMain gives the AWS SDK the S3 server's credentials and region when
// the environment has none, as `.ci/services s3-env` would: the store
// reads them from the environment, as in production.
func TestMain(m *testing.M) {
	testkit.S3Config().Setenv()
	os.Exit(m.Run())
}

func openS3(t *testing.T, u string) *claimcheck.Store {
	t.Helper()
	s, err := claimcheck.Open(context.Background(), u, claimcheck.Config{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Through a real S3 API: large events mixed with small ones of the same
// aggregates arrive whole and in order, the large ones' payloads fetched
// from the bucket by the reference's headers.
func TestPollingRelayThroughS3(t *testing.T) {
	t.Parallel()
	store := openS3(t, testkit.S3Server(t).Bucket(t))
	if err := store.Check(context.Background()); err != nil {
		t.Fatalf("Check on a fresh bucket: %v", err)
	}
	db := testkit.NewOutbox(t)
	brokers := kafkatest.New(t).ListenAddrs()
	wrote := writeMixed(t, db, "s3-docs", 2, 4)
	runRelay(t, db, publisher(t, brokers), fastConfig(db, store))
	got := consume(t, brokers, "s3-docs", store, len(wrote))
	checkDelivered(t, wrote, got)
	if n, err := store.Prune(context.Background()); err != nil || n != 0 {
		t.Errorf("Prune of objects within retention = %d, %v; want 0 deleted", n, err)
	}
}

// A bucket that does not exist, and a server that does not answer, fail
// Check (the readiness probe's) with an error naming the store, and
// uploads with an error that is no refusal of the event.
func TestS3StoreRefusingOrAwayFailsCheck(t *testing.T) {
	t.Parallel()
	ep := testkit.S3Server(t).Endpoint
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	away := "http://" + ln.Addr().String()
	ln.Close()
	for what, u := range map[string]string{
		"no bucket":   testkit.StoreURL(ep, "txoutbox-no-such-bucket"),
		"server away": testkit.StoreURL(away, "txoutbox-any"),
	} {
		store := openS3(t, u)
		err := store.Check(context.Background())
		if err == nil || !strings.Contains(err.Error(), store.Name()) {
			t.Errorf("%s: Check = %v, want an error naming %s", what, err, store.Name())
		}
		if what == "no bucket" && !strings.Contains(fmt.Sprint(err), "does not exist") {
			t.Errorf("no bucket: Check = %v, want it to say the bucket does not exist", err)
		}
	}
}
