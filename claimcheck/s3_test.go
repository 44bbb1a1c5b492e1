package claimcheck_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob/s3blob"

	"github.com/txoutbox/txoutbox/claimcheck"
)

// s3Stub is an S3 server of one bucket that keeps the objects put into
// it and the headers of every request.
type s3Stub struct {
	mu      sync.Mutex
	objects map[string][]byte
	headers map[string][]http.Header // by method
}

func (s *s3Stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.headers[r.Method] = append(s.headers[r.Method], r.Header.Clone())
	switch r.Method {
	case http.MethodPut:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.objects[r.URL.Path] = body
		w.Header().Set("ETag", `"etag"`)
	case http.MethodGet:
		body, ok := s.objects[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `<Error><Code>NoSuchKey</Code></Error>`)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Write(body)
	default:
		w.WriteHeader(http.StatusNotImplemented)
	}
}

func (s *s3Stub) requests(method string) []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headers[method]
}

// openS3Stub returns a store on a bucket of a fresh s3Stub, reached over
// plain HTTP, with the client's RequestChecksumCalculation calc and the
// SDK's other defaults.
func openS3Stub(t *testing.T, calc aws.RequestChecksumCalculation) (*claimcheck.Store, *s3Stub) {
	t.Helper()
	stub := &s3Stub{objects: map[string][]byte{}, headers: map[string][]http.Header{}}
	srv := httptest.NewServer(stub)
	t.Cleanup(srv.Close)
	client := s3.New(s3.Options{
		Region:                     "us-east-1",
		BaseEndpoint:               aws.String(srv.URL),
		UsePathStyle:               true,
		RequestChecksumCalculation: calc,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenSupported, // the SDK's default, as config.LoadDefaultConfig resolves it
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
	})
	bucket, err := s3blob.OpenBucket(context.Background(), client, "payloads", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	s, err := claimcheck.New(bucket, "s3://payloads", claimcheck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s, stub
}

// An upload to S3 carries the payload's SHA-256, the reference's, both as
// the object's checksum and as the signature's payload hash: S3 checks
// the bytes it stores against the digest consumers check, and no other
// checksum is sent. A fetch leaves the check to the reference's digest.
func TestS3UploadCarriesTheReferenceDigest(t *testing.T) {
	t.Parallel()
	s, stub := openS3Stub(t, aws.RequestChecksumCalculationWhenSupported)
	msg := eventMessage(t, large(2<<20))
	ref, err := s.Offload(context.Background(), table, msg)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(msg.Payload)
	if got := ref.Metadata.Get(claimcheck.HeaderSHA256); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("reference digest %s, want the payload's %x", got, sum)
	}
	puts := stub.requests(http.MethodPut)
	if len(puts) != 1 {
		t.Fatalf("%d PUTs, want one", len(puts))
	}
	h := puts[0]
	if got, want := h.Get("X-Amz-Checksum-Sha256"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
		t.Errorf("x-amz-checksum-sha256 %q, want the payload's SHA-256 %q", got, want)
	}
	if got := h.Get("X-Amz-Content-Sha256"); got != hex.EncodeToString(sum[:]) {
		t.Errorf("x-amz-content-sha256 %q, want the payload's SHA-256 (a signed payload over plain HTTP)", got)
	}
	if !strings.Contains(h.Get("Authorization"), "x-amz-content-sha256") {
		t.Errorf("the signature does not cover x-amz-content-sha256: %s", h.Get("Authorization"))
	}
	for k := range h {
		if k := strings.ToLower(k); (strings.HasPrefix(k, "x-amz-checksum-") && k != "x-amz-checksum-sha256") || k == "content-md5" {
			t.Errorf("the upload also sends %s", k)
		}
	}

	got, err := s.Fetch(context.Background(), ref.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(msg.Payload) {
		t.Fatal("the fetched payload differs")
	}
	if mode := stub.requests(http.MethodGet)[0].Get("X-Amz-Checksum-Mode"); mode != "" {
		t.Errorf("the fetch asks for the stored checksum (x-amz-checksum-mode %s): the SDK would hash the body again", mode)
	}
}

// With a client that sends checksums only where S3 requires them (for
// S3-compatible servers that refuse them), the upload sends none, and is
// still signed with the payload's SHA-256.
func TestS3UploadWithChecksumsWhenRequired(t *testing.T) {
	t.Parallel()
	s, stub := openS3Stub(t, aws.RequestChecksumCalculationWhenRequired)
	msg := eventMessage(t, large(64<<10))
	if _, err := s.Offload(context.Background(), table, msg); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(msg.Payload)
	h := stub.requests(http.MethodPut)[0]
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-amz-checksum-") || strings.EqualFold(k, "x-amz-sdk-checksum-algorithm") {
			t.Errorf("the upload sends %s", k)
		}
	}
	if got := h.Get("X-Amz-Content-Sha256"); got != hex.EncodeToString(sum[:]) {
		t.Errorf("x-amz-content-sha256 %q, want the payload's SHA-256", got)
	}
}
