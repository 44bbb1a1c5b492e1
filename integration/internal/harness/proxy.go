package harness

import (
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
type Proxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed on Thaw; replaced on Freeze
	conns  map[net.Conn]struct{}
	closed bool
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
	p := &Proxy{ln: ln, upstream: upstream, thawed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.thawed)
	go p.accept()
	return p
}

// Addr is the address clients dial instead of upstream.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

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
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Drop()
}

func (p *Proxy) accept() {
	for {
		down, err := p.ln.Accept()
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
	go func() { p.copy(up, down); done <- struct{}{} }()
	go func() { p.copy(down, up); done <- struct{}{} }()
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

// copy forwards src to dst, waiting before each write while the proxy is
// frozen. Bytes read while frozen are held, not lost: after a thaw the
// stream continues exactly where it stopped.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
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
