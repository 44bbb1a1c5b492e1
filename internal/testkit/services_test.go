package testkit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServicesAnswer checks that the MariaDB and S3 servers .ci/services
// runs are there, as CI runs them.
func TestServicesAnswer(t *testing.T) {
	t.Parallel()
	if u := MySQLURL(t); !strings.HasPrefix(u, "mysql://") {
		t.Errorf("MySQLURL = %q, want a mysql:// URL", u)
	}
	if s := S3Server(t); s.Endpoint == "" || s.Region == "" || s.AccessKeyID == "" || s.SecretAccessKey == "" {
		t.Errorf("S3Server = %+v, want every field set", s)
	}
}

// serveOnce listens on loopback and writes reply to every connection,
// then closes it; it returns the address.
func serveOnce(t *testing.T, reply []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write(reply)
			c.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// packet frames payload as a MySQL protocol packet of sequence number 0.
func packet(payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), 0}, payload...)
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestMySQLAnswers(t *testing.T) {
	t.Parallel()
	greeting := packet(append([]byte{10}, "10.11.19-MariaDB\x00"...))
	tooMany := packet(append([]byte{0xff, 0x10, 0x04}, "Too many connections"...)) // error 1040
	for _, tc := range []struct {
		name string
		url  string
		want []string // in the error; none: it answers
	}{
		{"greeting", "mysql://u:secret@" + serveOnce(t, greeting) + "/db", nil},
		{"error packet", "mysql://u:secret@" + serveOnce(t, tooMany) + "/db",
			[]string{"error 1040: Too many connections", "bash .ci/services mariadb"}},
		{"another protocol", "mysql://u:secret@" + serveOnce(t, []byte("HTTP/1.1 400 Bad Request\r\n\r\n")) + "/db",
			[]string{"not the MySQL protocol", "bash .ci/services mariadb"}},
		{"nothing listens", "mysql://u:secret@" + closedAddr(t) + "/db",
			[]string{"connection refused", "bash .ci/services mariadb"}},
		{"no host", "mysql:///db", []string{`MariaDB URL "mysql:///db"`, "mysql://user:password@host:port/database"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			err := mysqlAnswers(ctx, tc.url)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("mysqlAnswers: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("mysqlAnswers: nil, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

func TestS3Answers(t *testing.T) {
	t.Parallel()
	// A server that checks signatures refuses an unsigned request: it
	// answers all the same.
	refuses := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "AccessDenied", http.StatusForbidden)
	}))
	t.Cleanup(refuses.Close)
	for _, tc := range []struct {
		name     string
		endpoint string
		want     []string
	}{
		{"answers", refuses.URL, nil},
		{"nothing listens", "http://" + closedAddr(t), []string{"connection refused", "bash .ci/services s3"}},
		{"no host", "127.0.0.1:9000", []string{`S3 endpoint "127.0.0.1:9000"`, "want http://host:port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			err := s3Answers(ctx, tc.endpoint)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("s3Answers: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("s3Answers: nil, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
		})
	}
}
