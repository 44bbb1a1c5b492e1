package harness

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy is a loopback TCP proxy for network partitions between a relay and
// PostgreSQL or the broker. A relay pointed at it sees a healthy network
// until the scenario freezes it (sockets stay open and bytes stop flowing
// both ways: the peer sees silence, not a reset, which is what a real
// partition or a stalled middlebox looks like and the case timeouts must
// handle) or drops it (every connection is closed on both sides: what a
// pooler restart or a firewall reset looks like). Thaw lets bytes flow
// again; new connections are accepted while frozen but stay silent too.
// Down takes it away altogether (connections refused, as from a stopped
// server) until Up. OnReply watches the requests and replies of a
// request-reply protocol such as HTTP/1.1 going through it.
type Proxy struct {
	ln       net.Listener
	addr     string
	upstream string

	mu      sync.Mutex
	frozen  bool
	thawed  chan struct{} // closed on Thaw; replaced on Freeze
	conns   map[net.Conn]struct{}
	closed  bool
	down    bool
	onReply func(request, reply []byte)
}

// NewProxy listens on a free loopback port and forwards each connection to
// upstream.
func NewProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	return newProxy(ln, upstream), nil
}

func newProxy(ln net.Listener, upstream string) *Proxy {
	p := &Proxy{ln: ln, addr: ln.Addr().String(), upstream: upstream, thawed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.thawed)
	go p.accept(ln)
	return p
}

// Addr is the address clients dial instead of upstream.
func (p *Proxy) Addr() string { return p.addr }

// Down stops listening and closes every connection: a client's
// connections are reset and new ones refused, as when the upstream server
// is stopped, until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	if p.down || p.closed {
		p.mu.Unlock()
		return
	}
	p.down = true
	_ = p.ln.Close()
	p.mu.Unlock()
	p.Drop()
}

// Up listens again, on the same address, after Down.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.down || p.closed {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("proxy listen again on %s: %w", p.addr, err)
	}
	p.ln, p.down = ln, false
	go p.accept(ln)
	return nil
}

// OnReply makes the proxy call fn before it forwards the start of each
// reply (upstream to client, after the client sent a request), with the
// first bytes of the request and of the reply; the reply waits until fn
// returns. For HTTP/1.1: an interim reply (1xx, as to Expect:
// 100-continue) does not end its request. Nil stops it.
func (p *Proxy) OnReply(fn func(request, reply []byte)) {
	p.mu.Lock()
	p.onReply = fn
	p.mu.Unlock()
}

// Freeze stops copying bytes on every connection, open or new, and keeps
// the sockets open.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen = true
		p.thawed = make(chan struct{})
	}
}

// Thaw lets bytes flow again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
}

// Drop closes every open connection on both sides and thaws: new
// connections work at once, as after a reset.
func (p *Proxy) Drop() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.Thaw()
}

// Conns is how many connections (both sides counted) are open through the
// proxy: a partition that froze none proved nothing.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	p.mu.Unlock()
	_ = ln.Close()
	p.Drop()
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		down, err := ln.Accept()
		if err != nil {
			return
		}
		go p.serve(down)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) serve(down net.Conn) {
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		_ = down.Close()
		return
	}
	if !p.track(down, up) {
		_ = down.Close()
		_ = up.Close()
		return
	}
	done := make(chan struct{}, 2)
	x := &exchange{}
	go func() { p.copy(up, down, x.request); done <- struct{}{} }()
	go func() { p.copy(down, up, p.replyHook(x)); done <- struct{}{} }()
	<-done
	// One side closed: close both, so the other copy ends too.
	_ = down.Close()
	_ = up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, down)
	delete(p.conns, up)
	p.mu.Unlock()
}

// exchange is where a connection's request and reply stand, for OnReply.
type exchange struct {
	mu      sync.Mutex
	head    []byte // the first bytes of the request being answered
	replied bool   // its reply has started: the client's next bytes are a new request
}

// headLen is how much of a request or reply OnReply sees.
const headLen = 256

func (x *exchange) request(b []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.head == nil || x.replied {
		x.head, x.replied = append([]byte(nil), b[:min(len(b), headLen)]...), false
	}
}

// replyHook is what the upstream-to-client copy calls with each chunk: the
// proxy's OnReply, at the start of a reply.
func (p *Proxy) replyHook(x *exchange) func([]byte) {
	return func(b []byte) {
		x.mu.Lock()
		start := !x.replied && x.head != nil
		interim := bytes.HasPrefix(b, []byte("HTTP/1.1 1"))
		if start && !interim {
			x.replied = true
		}
		head := x.head
		x.mu.Unlock()
		p.mu.Lock()
		fn := p.onReply
		p.mu.Unlock()
		if start && fn != nil {
			fn(head, b[:min(len(b), headLen)])
		}
	}
}

// copy forwards src to dst, waiting before each write while the proxy is
// frozen, and showing each chunk to seen first. Bytes read while frozen
// are held, not lost: after a thaw the stream continues exactly where it
// stopped.
func (p *Proxy) copy(dst, src net.Conn, seen func([]byte)) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen(buf[:n])
			p.mu.Lock()
			thawed := p.thawed
			p.mu.Unlock()
			<-thawed
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed socket alike
			return
		}
	}
}

// close is Close for a possibly nil proxy.
func (p *Proxy) close() {
	if p != nil {
		p.Close()
	}
}
