package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// testPKI is a CA, a broker certificate for 127.0.0.1 and a client
// certificate, generated for one test, with the client's files on disk.
type testPKI struct {
	caFile, certFile, keyFile string
	server                    tls.Certificate
	pool                      *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "txoutbox test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	p := &testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client-key.pem"),
		pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	serverCert, serverKey := issue(2, "broker", x509.ExtKeyUsageServerAuth)
	if p.server, err = tls.X509KeyPair(serverCert, serverKey); err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey := issue(3, "relay", x509.ExtKeyUsageClientAuth)
	for file, body := range map[string][]byte{p.caFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), p.certFile: clientCert, p.keyFile: clientKey} {
		if err := os.WriteFile(file, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// A broker that requires TLS with client certificates: the relay verifies
// it against --tls-ca and presents --tls-cert, and the record arrives.
func TestRelayOverMutualTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	brokers := kafkatest.New(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})).ListenAddrs()
	e := newOps(t)
	id, eventID := e.write(t, "orders", "o-1", "order.placed")
	env := map[string]string{"OUTBOX_BROKERS": strings.Join(brokers, ","), "OUTBOX_TLS_CA": pki.caFile,
		"OUTBOX_TLS_CERT": pki.certFile, "OUTBOX_TLS_KEY": pki.keyFile}
	b := startOutbox(t, env, append([]string{"relay", "--poll-interval", "50ms"}, e.flags...)...)
	waitFor(t, 20*time.Second, "the event published over TLS", func() bool { s, _ := e.state(t, id); return s == "published" })
	log := b.stderr.String()
	for _, want := range []string{"connected to kafka", "tls=true", "tls_ca=" + pki.caFile, "tls_client_cert=" + pki.certFile} {
		if !strings.Contains(log, want) {
			t.Errorf("log does not say %q:\n%s", want, log)
		}
	}

	// A consumer with the same CA reads it back.
	ctx, cancel := contextTimeout(20 * time.Second)
	defer cancel()
	var recs []*kgo.Record
	err := kafkatest.Consume(ctx, brokers, []string{"orders"}, time.Second, func(r *kgo.Record) bool { recs = append(recs, r); return true },
		kgo.DialTLSConfig(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{mustLoad(t, pki)}, MinVersion: tls.VersionTLS12}))
	if !errors.Is(err, kafkatest.ErrIdle) {
		t.Fatalf("read back over TLS: %v", err)
	}
	if len(recs) != 1 || string(recs[0].Key) != "o-1" || kafkatest.Header(recs[0], txoutbox.HeaderEventID) != eventID {
		t.Fatalf("read back %v, want the event %s keyed o-1", recs, eventID)
	}
}

func mustLoad(t *testing.T, p *testPKI) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A broker whose certificate the relay cannot verify: the relay fails to
// start and Sarama's reason reaches the log. Not parallel: Sarama has one
// logger per process.
func TestRelayRefusesAnUnverifiedBroker(t *testing.T) {
	pki := newTestPKI(t)
	brokers := kafkatest.New(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS12})).ListenAddrs()
	errOut := wantNoKafka(t, "unverified broker", "orders", map[string]string{"OUTBOX_BROKERS": strings.Join(brokers, ","), "OUTBOX_TLS": "true"})
	if !strings.Contains(errOut, "x509") || !strings.Contains(errOut, "component=sarama") {
		t.Errorf("Sarama's reason (x509) is not in the log:\n%s", errOut)
	}
}

// wantNoKafka runs the relay in env on an outbox of its own holding one
// event of topic, with brokers it cannot connect to: the relay must exit 1
// saying so and leave the event pending. It returns the relay's stderr.
func wantNoKafka(t *testing.T, what, topic string, env map[string]string) string {
	t.Helper()
	e := newOps(t)
	id, _ := e.write(t, topic, "o-2", "order.placed")
	code, _, errOut := outboxEnv(t, env, append([]string{"relay"}, e.flags...)...)
	if code != 1 || !strings.Contains(errOut, "connect to kafka") {
		t.Errorf("%s: exit %d, want 1; stderr:\n%s", what, code, errOut)
	}
	if s, _ := e.state(t, id); s != "pending" {
		t.Errorf("%s: row is %s, want pending", what, s)
	}
	return errOut
}

// SASL with each mechanism against a broker that requires it; the password
// comes from the environment and appears in no output.
func TestRelayOverSASL(t *testing.T) {
	t.Parallel()
	const password = "pa55-w0rd-never-logged"
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			brokers := kafkatest.New(t, kfake.EnableSASL(), kfake.Superuser(mech, "relay", password)).ListenAddrs()
			e := newOps(t)
			id, _ := e.write(t, "orders", "o-1", "order.placed")
			env := map[string]string{"OUTBOX_BROKERS": strings.Join(brokers, ","), "OUTBOX_SASL_MECHANISM": mech,
				"OUTBOX_SASL_USER": "relay", "OUTBOX_SASL_PASSWORD": password}
			b := startOutbox(t, env, append([]string{"relay", "--poll-interval", "50ms", "--log-level", "debug"}, e.flags...)...)
			waitFor(t, 20*time.Second, "the event published with SASL", func() bool { s, _ := e.state(t, id); return s == "published" })
			b.stop(t)
			out := b.stdout.String() + b.stderr.String()
			if strings.Contains(out, password) {
				t.Errorf("the password is in the output:\n%s", out)
			}
			if !strings.Contains(out, "sasl="+mech) || !strings.Contains(out, "sasl_user=relay") {
				t.Errorf("log does not say how it authenticated:\n%s", out)
			}

			// The wrong password: no connection, nothing published.
			env["OUTBOX_SASL_PASSWORD"] = "wrong"
			wantNoKafka(t, "wrong password", "orders", env)
		})
	}
}

func TestKafkaFlagErrors(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	base := []string{"relay", "--database-url", "postgres://nobody@127.0.0.1:1/none", "--brokers", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		msg  string
	}{
		{[]string{"--tls-ca", "/no/such/ca.pem"}, nil, "--tls-ca"},
		{[]string{"--tls-ca", pki.keyFile}, nil, "no PEM certificate"},
		{[]string{"--tls-cert", pki.certFile}, nil, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", pki.certFile, "--tls-key", pki.caFile}, nil, "--tls-cert/--tls-key"},
		{[]string{"--sasl-mechanism", "GSSAPI"}, nil, "want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{[]string{"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "u"}, nil, "OUTBOX_SASL_PASSWORD"},
		{[]string{"--sasl-user", "u"}, nil, "without --sasl-mechanism"},
		{[]string{"--kafka-version", "banana"}, nil, "--kafka-version"},
		{[]string{"--kafka-compression", "brotli"}, nil, "--kafka-compression"},
		{[]string{"--kafka-compression", "zstd", "--kafka-version", "1.0.0"}, nil, "zstd needs"},
		{[]string{"--kafka-linger", "-1ms"}, nil, "--kafka-linger -1ms is below its floor 0"},
		{[]string{"--kafka-linger", "10s"}, nil, "--kafka-linger 10s is not below the producer's timeout"},
		{nil, map[string]string{"OUTBOX_TLS_INSECURE_SKIP_VERIFY": "yes please"}, "OUTBOX_TLS_INSECURE_SKIP_VERIFY"},
		{nil, map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "otlp only"},
		{nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http/protobuf only"},
		{[]string{"--metrics-addr", "not an address"}, nil, "--metrics-addr"},
	} {
		code, _, errOut := outboxEnv(t, tc.env, append(base, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v %v: exit %d, stderr %q; want %d mentioning %q", tc.args, tc.env, code, errOut, exitUsage, tc.msg)
		}
	}
}

// --kafka-linger is kafkapub's Linger: its default unless given, and 0
// (no linger) as kafkapub's negative.
func TestKafkaLingerFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want time.Duration
	}{{nil, kafkapub.LingerDefault}, {[]string{"--kafka-linger", "20ms"}, 20 * time.Millisecond}, {[]string{"--kafka-linger", "0"}, -1}} {
		var k kafkaFlags
		fs := flag.NewFlagSet("relay", flag.ContinueOnError)
		k.register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := k.config(nil)
		if err != nil || cfg.Linger != c.want {
			t.Errorf("%v: Linger %v, %v; want %v", c.args, cfg.Linger, err, c.want)
		}
	}
}
