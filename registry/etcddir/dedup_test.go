package etcddir

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry"
)

// cutProxy is a loopback TCP proxy in front of a node's peer server that,
// while cuts > 0, lets the request through but closes the caller's
// connection as soon as the node starts answering: the call ran there,
// its answer is lost.
type cutProxy struct {
	ln   net.Listener
	to   string
	cuts atomic.Int32
	cut  atomic.Int32 // answers cut so far
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn // closed at the end (an idle keep-alive would hold its relay)
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Go(func() { p.relay(c) })
	}
}

func (p *cutProxy) relay(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.to, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	p.mu.Lock()
	p.conns = append(p.conns, up) // b keeps its keep-alive open: cleanup must close it
	p.mu.Unlock()
	p.wg.Go(func() { io.Copy(up, c) }) // ends when either side closes
	if p.cuts.Add(-1) >= 0 {
		var b [1]byte
		up.SetReadDeadline(time.Now().Add(60 * time.Second))
		if _, err := up.Read(b[:]); err == nil {
			p.cut.Add(1)
		}
		return // the node answered; the caller never sees it
	}
	io.Copy(c, up)
}

// TestForwardedSpawnAnswerLost: a placed spawn whose answer is cut after
// the target started the process (a proxy closes the connection at the
// first byte of the answer) is retried on the same node with the same
// request ID; the target answers from its memory: exactly one process
// exists, the caller gets its ID, and it is on b.
func TestForwardedSpawnAnswerLost(t *testing.T) {
	var fw *loopForwarder
	regs, marker := clusterWith(t, 2, false, clusterOpts{capacity: 1, placement: registry.PlaceLocalFirst, forward: true, fw: &fw})
	a, b := regs[0], regs[1]
	ctx := as("alice")
	if _, err := a.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{}); err != nil {
		t.Fatal(err) // fills a
	}
	fw.mu.Lock()
	p := newCutProxy(t, strings.TrimPrefix(fw.urls["b"], "http://"))
	fw.urls["b"] = "http://" + p.ln.Addr().String()
	fw.mu.Unlock()
	fw.cli.CloseIdleConnections()
	p.cuts.Store(1)
	id, err := a.SpawnPersistent(ctx, sleeper(marker), registry.PersistOptions{})
	if err != nil {
		t.Fatalf("spawn placed on b with its first answer cut: %v", err)
	}
	if p.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d answers, want 1 (the test did not test a lost answer)", p.cut.Load())
	}
	if n := settleMarked(marker, 2); n != 2 {
		t.Fatalf("%d processes running, want 2 (one on a, exactly one on b)", n)
	}
	if in, err := a.Status(ctx, id); err != nil || in.Node != "b" {
		t.Fatalf("status of the placed spawn's ID: %+v %v, want on b", in, err)
	}
	l, err := b.List(ctx, nil)
	if err != nil || len(l) != 2 {
		t.Fatalf("list through b: %d processes, %v; want 2", len(l), err)
	}
	if size, hits, ev := b.SpawnDedupStats(); hits != 1 || size != 1 || ev != 0 {
		t.Fatalf("b's forwarded-spawn memory: size %d, hits %d, evicted %d; want 1, 1, 0", size, hits, ev)
	}
}
