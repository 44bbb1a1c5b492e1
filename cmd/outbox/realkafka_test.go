package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

// The relay command against the real Apache Kafka cluster of .ci/services,
// on its TLS listener and on its SASL/SCRAM listener, each of its own: the
// event arrives, keyed by its aggregate, read back by an independent
// client over the same listener.

func TestRelayOverTLSToApacheKafka(t *testing.T) {
	kafkatest.LockCluster(t, false)
	kafkatest.Cluster(t)
	brokers := kafkatest.ClusterTLSBrokersDefault
	pem, err := os.ReadFile(kafkatest.ClusterCAFile())
	if err != nil {
		t.Fatalf("the cluster's CA (made by .ci/services): %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	e := newOps(t)
	topic := realTopic(t, e)
	id, eventID := e.write(t, topic, "o-1", "order.placed")
	env := map[string]string{"OUTBOX_BROKERS": brokers, "OUTBOX_TLS_CA": kafkatest.ClusterCAFile()}
	b := startOutbox(t, env, append([]string{"relay", "--poll-interval", "50ms"}, e.flags...)...)
	waitFor(t, 30*time.Second, "the event published over TLS", func() bool { s, _ := e.state(t, id); return s == "published" })
	b.stop(t)
	readBack(t, brokers, topic, eventID, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))

	// Without the CA the broker's certificate does not verify: no
	// connection, nothing claimed.
	wantNoKafka(t, "unverified broker", topic, map[string]string{"OUTBOX_BROKERS": brokers, "OUTBOX_TLS": "true"})
}

func TestRelayOverSCRAMToApacheKafka(t *testing.T) {
	kafkatest.LockCluster(t, false)
	kafkatest.Cluster(t)
	brokers := kafkatest.ClusterSASLBrokersDefault
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel() // each waits seconds for the broker to refuse a wrong password
			e := newOps(t)
			topic := realTopic(t, e)
			id, eventID := e.write(t, topic, "o-1", "order.placed")
			env := map[string]string{"OUTBOX_BROKERS": brokers, "OUTBOX_SASL_MECHANISM": mech,
				"OUTBOX_SASL_USER": kafkatest.ClusterSCRAMUser, "OUTBOX_SASL_PASSWORD": kafkatest.ClusterSCRAMPassword}
			b := startOutbox(t, env, append([]string{"relay", "--poll-interval", "50ms"}, e.flags...)...)
			waitFor(t, 30*time.Second, "the event published with "+mech, func() bool { s, _ := e.state(t, id); return s == "published" })
			b.stop(t)
			if out := b.stdout.String() + b.stderr.String(); strings.Contains(out, kafkatest.ClusterSCRAMPassword) {
				t.Errorf("the password is in the output:\n%s", out)
			}
			auth := scram.Auth{User: kafkatest.ClusterSCRAMUser, Pass: kafkatest.ClusterSCRAMPassword}
			m := auth.AsSha256Mechanism()
			if mech == "SCRAM-SHA-512" {
				m = auth.AsSha512Mechanism()
			}
			readBack(t, brokers, topic, eventID, kgo.SASL(m))

			// The wrong password: the broker refuses the login.
			env["OUTBOX_SASL_PASSWORD"] = "wrong"
			wantNoKafka(t, "wrong password", topic, env)
		})
	}
}

// realTopic creates a topic of the test's own on the cluster, which
// creates none on first use.
func realTopic(t *testing.T, e *opsEnv) string {
	t.Helper()
	topic := "txoutbox_" + e.db.Schema
	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	if err := kafkatest.CreateTopic(ctx, kafkatest.ClusterBrokers(), topic, 3, 3, nil); err != nil {
		t.Fatal(err)
	}
	return topic
}

// readBack reads topic over the listener at brokers (with opts) and wants
// exactly the one event, keyed o-1.
func readBack(t *testing.T, brokers, topic, eventID string, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	var recs []*kgo.Record
	err := kafkatest.Consume(ctx, strings.Split(brokers, ","), []string{topic}, 2*time.Second,
		func(r *kgo.Record) bool { recs = append(recs, r); return true }, opts...)
	if !errors.Is(err, kafkatest.ErrIdle) {
		t.Fatalf("read back: %v", err)
	}
	if len(recs) != 1 || string(recs[0].Key) != "o-1" || kafkatest.Header(recs[0], txoutbox.HeaderEventID) != eventID {
		t.Fatalf("read back %d records, want the event %s keyed o-1", len(recs), eventID)
	}
}
