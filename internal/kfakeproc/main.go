// Command kfakeproc runs a kfake Kafka-protocol broker in its own OS process,
// so tests can stop it (SIGTERM), kill it or restart it on the same port and
// data directory while their clients keep running, and so its CPU stays out
// of the profile of the process under test.
//
//	kfakeproc -port 39092 -dir /tmp/broker -topics orders,payments -partitions 8
//
// It prints "kfakeproc: listening on ADDR" on stdout once the broker accepts
// connections, and closes the cluster cleanly (flushing DataDir) on SIGINT or
// SIGTERM. Topics named by -topics are created on first start; with
// -auto-create=false a produce to any other topic is refused with
// UNKNOWN_TOPIC_OR_PARTITION.
//
// Two options exist for fault injection:
//
//   - -advertise HOST:PORT makes the broker announce that address in its
//     metadata instead of the one it listens on. kfake advertises its
//     listener's address, and clients connect to what the metadata says
//     after the first request, so a TCP proxy in front of the broker is only
//     on every path if the broker advertises the proxy.
//   - -control-addr 127.0.0.1:PORT serves a loopback HTTP control endpoint
//     (it prints "kfakeproc: control on ADDR"). POST
//     /hold-produce?window=1s&for=12s holds every produce request that
//     arrives in the next window for the given time before answering it
//     normally (the records are stored afterwards): a slow broker, as a
//     replica stuck under acks=all makes one, without failing anything.
//     GET /stats reports how many produce requests were held so far.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func main() {
	var (
		port       = flag.Int("port", 0, "loopback port to listen on (0: any free port)")
		dir        = flag.String("dir", "", "data directory; a restart with the same directory serves what was acknowledged before (empty: in memory)")
		topics     = flag.String("topics", "", "comma-separated topics to create")
		partitions = flag.Int("partitions", 8, "partitions of created topics, and of auto-created ones")
		autoCreate = flag.Bool("auto-create", true, "create unknown topics on first use")
		maxMessage = flag.Int("max-message-bytes", 0, "broker message.max.bytes: larger record batches are refused with MESSAGE_TOO_LARGE (0: kfake's default, 1048588)")
		advertise  = flag.String("advertise", "", "HOST:PORT to advertise in metadata instead of the listen address (a proxy in front of the broker)")
		control    = flag.String("control-addr", "", "loopback HOST:PORT of the HTTP fault-control endpoint (empty: none)")
	)
	flag.Parse()
	o := options{port: *port, dir: *dir, topics: *topics, partitions: *partitions, autoCreate: *autoCreate,
		maxMessage: *maxMessage, advertise: *advertise, control: *control}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "kfakeproc:", err)
		os.Exit(1)
	}
}

type options struct {
	port               int
	dir, topics        string
	partitions         int
	autoCreate         bool
	maxMessage         int
	advertise, control string
}

func run(o options) error {
	if o.partitions < 1 {
		return fmt.Errorf("-partitions must be at least 1, got %d", o.partitions)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(o.port),
		kfake.DefaultNumPartitions(o.partitions),
	}
	if o.dir != "" {
		opts = append(opts, kfake.DataDir(o.dir))
	}
	if o.autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if o.maxMessage > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(o.maxMessage)}))
	}
	if o.advertise != "" {
		adv, err := net.ResolveTCPAddr("tcp", o.advertise)
		if err != nil {
			return fmt.Errorf("-advertise: %w", err)
		}
		opts = append(opts, kfake.ListenFn(func(network, address string) (net.Listener, error) {
			ln, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			return advertised{Listener: ln, addr: adv}, nil
		}))
	}
	var names []string
	for _, t := range strings.Split(o.topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			names = append(names, t)
		}
	}
	if len(names) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(o.partitions), names...))
	}

	// Subscribe before the broker exists, so a signal sent right after the
	// "listening" line is never lost to the default handler.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	if o.control != "" {
		addr, err := serveControl(c, o.control)
		if err != nil {
			c.Close()
			return err
		}
		fmt.Printf("kfakeproc: control on %s\n", addr)
	}
	fmt.Printf("kfakeproc: listening on %s\n", strings.Join(c.ListenAddrs(), ","))
	<-sig
	c.Close()
	return nil
}

// advertised is a listener that reports another address, which kfake then
// puts in its metadata responses.
type advertised struct {
	net.Listener
	addr net.Addr
}

// Addr is what kfake reads to build its metadata's host and port.
func (a advertised) Addr() net.Addr { return a.addr }

// holder holds produce requests that arrive before until for hold each.
type holder struct {
	mu    sync.Mutex
	until time.Time
	hold  time.Duration
	held  atomic.Int64
}

// serveControl installs the produce hold on c and serves the HTTP control
// endpoint on addr, which must be a loopback address: the endpoint has no
// authentication.
func serveControl(c *kfake.Cluster, addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("-control-addr: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("-control-addr %s: want a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("control listener: %w", err)
	}
	h := &holder{}
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		h.mu.Lock()
		hold := h.hold
		active := time.Now().Before(h.until)
		h.mu.Unlock()
		if active {
			h.held.Add(1)
			// SleepControl yields the cluster's loop to other
			// connections while this request waits; afterwards the
			// request is handled normally (not handled here).
			c.SleepControl(func() { time.Sleep(hold) })
		}
		return nil, nil, false
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hold-produce", func(w http.ResponseWriter, r *http.Request) {
		window, err1 := time.ParseDuration(r.URL.Query().Get("window"))
		hold, err2 := time.ParseDuration(r.URL.Query().Get("for"))
		if err1 != nil || err2 != nil || window <= 0 || hold <= 0 {
			http.Error(w, "want window=DURATION&for=DURATION, both positive", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.until, h.hold = time.Now().Add(window), hold
		h.mu.Unlock()
		fmt.Fprintf(w, "holding produce requests arriving in the next %s for %s\n", window, hold)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "held_produce=%d\n", h.held.Load())
	})
	go func() { _ = http.Serve(ln, mux) }()
	return ln.Addr().String(), nil
}
