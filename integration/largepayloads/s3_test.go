package largepayloads

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The S3 API server the tests use: .ci/services runs moto there (any
// credentials, path-style buckets). TXOUTBOX_TEST_S3_ENDPOINT, or
// S3_ENDPOINT (what `.ci/services s3-env` exports), names another.
const s3EndpointDefault = "http://127.0.0.1:9000"

// TestMain gives the AWS SDK credentials and a region when the
// environment has none, as `.ci/services s3-env` would: moto takes any.
// The store reads them from the environment, as in production.
func TestMain(m *testing.M) {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"} {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	os.Exit(m.Run())
}

// s3Endpoint returns the S3 server's endpoint after checking, for up to
// 10 seconds, that it answers HTTP. One that does not fails the test, with
// how to start it: the tests never skip.
func s3Endpoint(t *testing.T) string {
	t.Helper()
	ep := s3EndpointDefault
	for _, env := range []string{"TXOUTBOX_TEST_S3_ENDPOINT", "S3_ENDPOINT"} {
		if v := os.Getenv(env); v != "" {
			ep = v
			break
		}
	}
	ok := testkit.Eventually(10*time.Second, func() bool {
		resp, err := http.Get(ep)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	if !ok {
		t.Fatalf("the S3 server at %s does not answer (start it with: bash .ci/services)", ep)
	}
	return ep
}

// s3URL is the store URL of bucket on the server at endpoint.
func s3URL(endpoint, bucket string) string {
	return "s3://" + bucket + "?endpoint=" + url.QueryEscape(endpoint) + "&use_path_style=true&region=us-east-1"
}

// newBucket creates a bucket of the test's own and returns its store URL.
func newBucket(t *testing.T) string {
	t.Helper()
	ep := s3Endpoint(t)
	bucket := "txoutbox-" + strings.ToLower(strings.ReplaceAll(uuid.NewString(), "-", ""))[:20]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, ep+"/"+bucket, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create bucket %s: %s", bucket, resp.Status)
	}
	return s3URL(ep, bucket)
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
	store := openS3(t, newBucket(t))
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
	ep := s3Endpoint(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	away := "http://" + ln.Addr().String()
	ln.Close()
	for what, u := range map[string]string{
		"no bucket":   s3URL(ep, "txoutbox-no-such-bucket"),
		"server away": s3URL(away, "txoutbox-any"),
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
