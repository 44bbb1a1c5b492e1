package testkit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// The MariaDB and S3 servers .ci/services runs beside PostgreSQL. Tests
// find them at these defaults, as they find the Kafka cluster
// (kafkatest.ClusterBrokersDefault); `.ci/services mariadb-env` and
// `s3-env` print the same values for a shell.
const (
	// MySQLURLDefault is the MariaDB server: user txoutbox, which may do
	// anything (a test machine's user), and the database txoutbox_test.
	MySQLURLDefault = "mysql://txoutbox:txoutbox-test-secret@127.0.0.1:3306/txoutbox_test"
	// EnvMySQLURL names another MariaDB or MySQL server for the tests, as a
	// URL of MySQLURLDefault's form.
	EnvMySQLURL = "TXOUTBOX_TEST_MYSQL_URL"

	// S3EndpointDefault is the S3 API server (moto): buckets path-style,
	// any credentials.
	S3EndpointDefault = "http://127.0.0.1:9000"
	// EnvS3Endpoint names another S3 API server for the tests.
	EnvS3Endpoint = "TXOUTBOX_TEST_S3_ENDPOINT"
)

// serviceWait is how long a server that does not answer is waited for: a
// test that crashed and restarted it may be a moment ahead of its
// recovery.
const serviceWait = 10 * time.Second

// MySQLURL returns the URL of the MariaDB (or MySQL) server the tests use,
// EnvMySQLURL or MySQLURLDefault, after checking that it greets a client
// with the MySQL protocol. A server that is not there fails the test, with
// how to start it: the tests never skip.
func MySQLURL(t testing.TB) string {
	t.Helper()
	u := mysqlServerURL()
	ctx, cancel := context.WithTimeout(context.Background(), serviceWait)
	defer cancel()
	if err := mysqlAnswers(ctx, u); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return u
}

// mysqlAnswers waits until the server at rawURL sends the MySQL protocol's
// greeting (protocol version 10), or ctx ends.
func mysqlAnswers(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("MariaDB URL %q: want mysql://user:password@host:port/database", redact(rawURL))
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	for {
		err = mysqlGreets(ctx, addr)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("MariaDB at %s is not serving (start it with: bash .ci/services mariadb): %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mysqlGreets reads the first packet the server at addr sends: a
// handshake, or an error packet (too many connections, a blocked host).
func mysqlGreets(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(2 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	var hdr [4]byte // payload length (3 bytes, little-endian), sequence number
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return fmt.Errorf("read the greeting: %w", err)
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if n == 0 || n > 1<<16 {
		return fmt.Errorf("not the MySQL protocol: a first packet of %d bytes", n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(conn, payload); err != nil {
		return fmt.Errorf("read the greeting: %w", err)
	}
	switch {
	case payload[0] == 10:
		return nil
	case payload[0] == 0xff && n >= 3:
		return fmt.Errorf("the server refused the connection: error %d: %s", binary.LittleEndian.Uint16(payload[1:3]), payload[3:])
	default:
		return fmt.Errorf("not the MySQL protocol: a greeting of protocol version %d", payload[0])
	}
}

// S3 is an S3 API server for tests and what a client needs for it.
type S3 struct {
	Endpoint        string // e.g. http://127.0.0.1:9000; buckets path-style
	Region          string
	AccessKeyID     string
	SecretAccessKey string
}

// S3Server returns the S3 API server the tests use, EnvS3Endpoint or
// S3EndpointDefault, after checking that it answers HTTP; with region
// us-east-1 and the credentials test/test, which moto takes. moto keeps
// its objects in memory: a restart of it empties every bucket. A server
// that is not there fails the test, with how to start it: the tests never
// skip.
func S3Server(t testing.TB) S3 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serviceWait)
	defer cancel()
	s, err := FindS3(ctx)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return s
}

// FindS3 is S3Server outside a test (the crash suite's runner): it waits
// until the server answers, or ctx ends.
func FindS3(ctx context.Context) (S3, error) {
	s := S3Config()
	return s, s3Answers(ctx, s.Endpoint)
}

// S3Config is the S3 server the tests use, as S3Server returns it, without
// asking it anything.
func S3Config() S3 {
	s := S3{Endpoint: S3EndpointDefault, Region: "us-east-1", AccessKeyID: "test", SecretAccessKey: "test"}
	if v := os.Getenv(EnvS3Endpoint); v != "" {
		s.Endpoint = v
	}
	return s
}

// StoreURL is the gocloud.dev/blob URL (claimcheck.Open's) of bucket on
// the server at endpoint, an http://host:port: path-style, region
// us-east-1. The credentials come from the AWS_* environment (Setenv).
func StoreURL(endpoint, bucket string) string {
	return "s3://" + bucket + "?endpoint=" + url.QueryEscape(endpoint) + "&use_path_style=true&region=us-east-1"
}

// StoreURL is the store URL of bucket on s.
func (s S3) StoreURL(bucket string) string { return StoreURL(s.Endpoint, bucket) }

// Setenv sets the AWS_* variables the AWS SDK reads to s's credentials
// and region, where they are unset: the process's stores (and the
// relays it starts) find them there, as in production.
func (s S3) Setenv() {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": s.AccessKeyID, "AWS_SECRET_ACCESS_KEY": s.SecretAccessKey, "AWS_REGION": s.Region} {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
}

// NewBucket creates a bucket named prefix and a random suffix (lower
// case, at most 63 characters) and returns its name. moto takes an
// unsigned request; a server that checks signatures refuses it.
func (s S3) NewBucket(ctx context.Context, prefix string) (string, error) {
	var r [8]byte
	_, _ = rand.Read(r[:])
	name := strings.ToLower(prefix) + "-" + hex.EncodeToString(r[:])
	if len(name) > 63 {
		return "", fmt.Errorf("testkit: bucket name %q is longer than 63 characters", name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.Endpoint+"/"+name, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("testkit: create bucket %s: %w", name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("testkit: create bucket %s: %s", name, resp.Status)
	}
	return name, nil
}

// Bucket creates a bucket of the test's own on s (NewBucket) and returns
// its store URL; it fails the test when the server refuses.
func (s S3) Bucket(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serviceWait)
	defer cancel()
	name, err := s.NewBucket(ctx, "txoutbox")
	if err != nil {
		t.Fatal(err)
	}
	return s.StoreURL(name)
}

// s3Answers waits until endpoint answers an unsigned GET with any status
// (a server that checks signatures refuses it, and answers), or ctx ends.
func s3Answers(ctx context.Context, endpoint string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil || req.URL.Host == "" {
		return fmt.Errorf("S3 endpoint %q: want http://host:port", endpoint)
	}
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("S3 at %s is not serving (start it with: bash .ci/services s3): %w", endpoint, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
