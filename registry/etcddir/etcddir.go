// Package etcddir is the cluster directory: registry.Directory on etcd.
//
// Layout under the cluster prefix P (default /capsule-host/default/):
//
//	P nodes/<node>             node record (address, capacity, version), under the node's lease
//	P scopes/<sk>/gen          bumped by every change of the scope's counts: the CAS point
//	P scopes/<sk>/n/<node>     what <node> holds for the scope, under <node>'s lease
//	P procs/<hex key>          a persistent process: keyed ID hash, owner, node, label
//	P load/<node>              what <node> runs in all (placement), under <node>'s lease
//	P gone/<node>              when <node> was first seen gone (sweep.go)
//
// <sk> is a hash of (capsule, principal, fallback). A scope's total is the
// sum of its per-node counts, so a node whose lease expires gives its
// slots back by itself; a reservation is one transaction that succeeds
// only if the scope's gen did not move since the counts it checked.
// Process records carry no lease: a record whose node is gone reads as
// lost, not as no-such-process.
package etcddir

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/capsule-host/capsule-host/registry"
)

// reconnect is how the etcd client redials a lost etcd: at most a second
// apart. gRPC's default backoff grows to 120 s, so after an outage of a
// few seconds the next attempt could come well after etcd returned —
// past the lease's TTL as the client counts it, which turns a short
// outage into a lost lease (new spawns refused until re-registration).
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: callBound,
}

// Defaults.
const (
	DefaultTTL    = 10 * time.Second
	defaultPrefix = "/capsule-host/default/"
	callBound     = 3 * time.Second // one etcd round trip, at most
	// unavailableRetries: see retry.
	unavailableRetries = 2
	retryBound         = 6 * time.Second // retries through a leader election (etcd's default election timeout is 1 s)
	healthBound        = time.Second     // health answers fast, etcd or not
	casAttempts        = 64              // a reservation's retries under contention
)

// Config opens a Dir.
type Config struct {
	Endpoints []string // client URLs, http://host:port
	Prefix    string   // key prefix of this cluster; default /capsule-host/default/
	Node      string   // this node's name: unique among live nodes
	Address   string   // where other nodes reach this one
	Capacity  int      // concurrent processes this node accepts (placement)
	Version   string   // the daemon's version, shown by `nodes`
	TTL       time.Duration
	// LeaseID, when not zero, is the lease an earlier run of this node
	// held: reused when still alive (a restart within the TTL keeps every
	// record and count), else a new one is granted.
	LeaseID int64
	// OnLease, when set, is told every lease the node registers under (the
	// daemon persists it for LeaseID).
	OnLease func(id int64)
	// LostGrace is how long the records of a node whose lease expired
	// read as lost before they are deleted (sweep.go); default 1 h.
	LostGrace time.Duration
	// TLS, when set, is the client side of TLS to etcd (its CA, and the
	// node's client certificate when etcd runs --client-cert-auth): the
	// endpoints are dialled as https. The client drops TLS on an http://
	// endpoint, so Open rewrites them rather than trusting the scheme.
	TLS    *tls.Config
	Logger *slog.Logger
}

// NodeRecord is one node as the directory holds it.
type NodeRecord struct {
	Name     string    `json:"name"`
	Address  string    `json:"address"`
	Capacity int       `json:"capacity"`
	Version  string    `json:"version"`
	Started  time.Time `json:"started"`
}

type scopeCount struct {
	registry.DirHolding
	Owner registry.DirScope `json:"owner"`
}

type procValue struct {
	Owner registry.DirScope `json:"owner"`
	Node  string            `json:"node"`
	Label string            `json:"label"`
}

// scopeState is the last seen state of one scope (a cache: a
// transaction on a stale one fails and returns the fresh state).
type scopeState struct {
	genRev int64
	nodes  map[string]registry.DirHolding
	fresh  bool // read from etcd, not derived from our own last write
}

func (s *scopeState) total() registry.DirHolding {
	var t registry.DirHolding
	for _, h := range s.nodes {
		t.Running += h.Running
		t.Retained += h.Retained
	}
	return t
}

// Dir is the etcd directory of one node.
type Dir struct {
	cfg    Config
	cli    *clientv3.Client
	log    *slog.Logger
	prefix string
	node   string

	lease atomic.Int64
	live  atomic.Bool
	stop  chan struct{}
	done  chan struct{}

	loadKick  chan struct{} // load.go
	loadDone  chan struct{}
	sweepDone chan struct{} // sweep.go

	locks sync.Map // scope key → *sync.Mutex: one CAS in flight per scope on this node

	mu    sync.Mutex
	cache map[string]*scopeState
	mine  map[string]scopeCount        // what this node holds: the truth it rewrites after a lost lease
	dirty map[string]registry.DirScope // scopes whose count in etcd lags mine (a failed release)
	// adopting: re-registered within the lease, the registry's Adopt not
	// yet done (AdoptDone). etcd keeps the earlier run's counts (an upper
	// bound: no other node can over-reserve meanwhile) while tally counts
	// what is adopted, released and reserved; AdoptDone makes tally the
	// truth.
	adopting  bool
	tally     map[string]scopeCount
	published map[[32]byte]registry.DirProcess
}

// ParseURL reads etcd://host:port[,host:port...][/cluster] into client
// endpoints and the cluster's key prefix.
func ParseURL(s string) (endpoints []string, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "etcd" || u.Host == "" {
		return nil, "", fmt.Errorf("%w: cluster %q: want etcd://host:port[,host:port...][/name]", registry.ErrInvalidInput, s)
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, "", fmt.Errorf("%w: cluster %q: empty endpoint", registry.ErrInvalidInput, s)
		}
		endpoints = append(endpoints, "http://"+h)
	}
	name := strings.Trim(u.Path, "/")
	if name == "" {
		name = "default"
	}
	if strings.ContainsAny(name, "/ ") {
		return nil, "", fmt.Errorf("%w: cluster name %q: one path segment", registry.ErrInvalidInput, name)
	}
	return endpoints, "/capsule-host/" + name + "/", nil
}

// Open connects, registers this node under a lease (refusing a name a
// live node holds) and keeps the lease alive until Close.
func Open(ctx context.Context, cfg Config) (*Dir, error) {
	if cfg.Node == "" || strings.ContainsAny(cfg.Node, "/ ") {
		return nil, fmt.Errorf("%w: node name %q: one non-empty path segment", registry.ErrInvalidInput, cfg.Node)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if cfg.LostGrace <= 0 {
		cfg.LostGrace = DefaultLostGrace
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: withScheme(cfg.Endpoints, cfg.TLS != nil), TLS: cfg.TLS, DialTimeout: callBound, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(reconnect)}})
	if err != nil {
		return nil, fmt.Errorf("%w: etcd client: %v", registry.ErrUnavailable, err)
	}
	d := &Dir{
		cfg: cfg, cli: cli, log: cfg.Logger, prefix: cfg.Prefix, node: cfg.Node,
		stop: make(chan struct{}), done: make(chan struct{}),
		loadKick: make(chan struct{}, 1), loadDone: make(chan struct{}), sweepDone: make(chan struct{}),
		cache: map[string]*scopeState{}, mine: map[string]scopeCount{}, dirty: map[string]registry.DirScope{},
		published: map[[32]byte]registry.DirProcess{},
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	ka, err := d.register(ctx, cfg.LeaseID)
	if err != nil {
		cli.Close()
		return nil, explainTLS(ctx, cfg.TLS, cfg.Endpoints, err)
	}
	go d.keepAlive(ka)
	go d.loadWriter()
	go d.sweeper()
	d.kickLoad()
	return d, nil
}

// withScheme sets every endpoint's scheme to https under TLS, http
// otherwise (ParseURL's endpoints are http://host:port).
func withScheme(eps []string, secure bool) []string {
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	out := make([]string, len(eps))
	for i, e := range eps {
		if _, h, ok := strings.Cut(e, "://"); ok {
			e = h
		}
		out[i] = scheme + e
	}
	return out
}

// Node is this node's name.
func (d *Dir) Node() string { return d.node }

// LeaseID is the lease the node holds now (the daemon persists it so a
// restart within the TTL reuses it).
func (d *Dir) LeaseID() int64 { return d.lease.Load() }

// Health is nil while the node holds its lease and etcd answers. The
// node's record must be under its lease: a lease revoked or expired
// behind the node's back (split brain) shows here at once, not only when
// the keep-alive notices (up to TTL/3 later).
func (d *Dir) Health(ctx context.Context) error {
	if !d.live.Load() {
		return fmt.Errorf("%w: node %q has no lease in etcd (re-registering): new spawns are refused", registry.ErrUnavailable, d.node)
	}
	cctx, cancel := context.WithTimeout(ctx, healthBound)
	defer cancel()
	resp, err := d.cli.Get(cctx, d.nodeKey(d.node), clientv3.WithSerializable())
	if err != nil {
		return unavailable("etcd health", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != d.lease.Load() {
		return fmt.Errorf("%w: node %q: its record in etcd is not under its lease (revoked or expired): new spawns are refused until it re-registers", registry.ErrUnavailable, d.node)
	}
	return nil
}

// Close stops the keep-alive, revokes nothing (a restart within the TTL
// re-adopts) and closes the client.
func (d *Dir) Close() error {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
	<-d.loadDone
	<-d.sweepDone
	return d.cli.Close()
}

// Revoke gives up the lease now: this node's counts and record vanish
// (a clean shutdown that holds no process any more).
func (d *Dir) Revoke(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, callBound)
	defer cancel()
	_, err := d.cli.Revoke(cctx, clientv3.LeaseID(d.lease.Load()))
	return unavailableIf("revoke lease", err)
}

func (d *Dir) nodeKey(n string) string      { return d.prefix + "nodes/" + n }
func (d *Dir) genKey(sk string) string      { return d.prefix + "scopes/" + sk + "/gen" }
func (d *Dir) countsKey(sk string) string   { return d.prefix + "scopes/" + sk + "/n/" }
func (d *Dir) procKey(k [32]byte) string    { return d.prefix + "procs/" + hex.EncodeToString(k[:]) }
func (d *Dir) countKey(sk, n string) string { return d.countsKey(sk) + n }

// scopeKey names a scope in keys without its principal in clear.
func scopeKey(s registry.DirScope) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%t", s.Capsule, s.Principal, s.Fallback)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (d *Dir) scopeLock(sk string) *sync.Mutex {
	m, _ := d.locks.LoadOrStore(sk, &sync.Mutex{})
	return m.(*sync.Mutex)
}

func unavailable(what string, err error) error {
	var re *registry.DirRecordError
	if errors.As(err, &re) {
		return err
	}
	return fmt.Errorf("%w: %s: etcd: %v", registry.ErrUnavailable, what, err)
}

func unavailableIf(what string, err error) error {
	if err == nil {
		return nil
	}
	return unavailable(what, err)
}

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callBound)
}

// transient says whether an etcd error is a majority changing leaders
// (or a proposal lost with the old one): the next attempt will likely
// succeed, so the caller should not see an outage. The client retries
// these itself only for reads that are not transactions.
func transient(err error) bool {
	for _, e := range []error{rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retry runs op, each attempt bounded by callBound, again while it fails
// transiently and retryBound has not passed. Every op here is safe to
// repeat: puts and deletes write absolute values, and a count's CAS that
// did commit fails its compare the second time and returns fresh state.
//
// A connection that broke under the call (gRPC Unavailable, "error
// reading from server: EOF": the member it was talking to died) gets
// unavailableRetries more attempts, on whichever member the client's
// balancer picks next (TestMemberLoss kills the leader under a Reserve);
// no more, so that with etcd down a call still fails in about a second
// rather than after retryBound.
func retry(ctx context.Context, op func(context.Context) error) error {
	deadline := time.Now().Add(retryBound)
	wait := 20 * time.Millisecond
	broken := 0
	for {
		actx, cancel := bounded(ctx)
		err := op(actx)
		cancel()
		again := transient(err)
		if !again && status.Code(err) == codes.Unavailable && broken < unavailableRetries {
			broken++
			again = true
		}
		if err == nil || !again || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// get, txn, put and del are the client's calls through retry.
func (d *Dir) get(ctx context.Context, key string, opts ...clientv3.OpOption) (resp *clientv3.GetResponse, err error) {
	err = retry(ctx, func(ctx context.Context) (e error) { resp, e = d.cli.Get(ctx, key, opts...); return })
	return resp, err
}

func (d *Dir) txn(ctx context.Context, ifs []clientv3.Cmp, then, els []clientv3.Op) (resp *clientv3.TxnResponse, err error) {
	err = retry(ctx, func(ctx context.Context) (e error) {
		resp, e = d.cli.Txn(ctx).If(ifs...).Then(then...).Else(els...).Commit()
		return
	})
	return resp, err
}

func (d *Dir) put(ctx context.Context, key, val string, opts ...clientv3.OpOption) error {
	return retry(ctx, func(ctx context.Context) error { _, e := d.cli.Put(ctx, key, val, opts...); return e })
}

func (d *Dir) del(ctx context.Context, key string) error {
	return retry(ctx, func(ctx context.Context) error { _, e := d.cli.Delete(ctx, key); return e })
}
