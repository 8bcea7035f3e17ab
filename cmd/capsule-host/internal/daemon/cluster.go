package daemon

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/blake2b"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host/config"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/etcddir"
)

// Cluster mode ([cluster] url, or serve --cluster): the registry reserves
// and publishes in the etcd directory, so quotas hold across every daemon
// of the cluster and any node finds which node holds a process. Without a
// URL nothing here runs and the daemon is the single node it always was.

// minClusterSecret is the shortest cluster key file accepted.
const minClusterSecret = 32

// leaseFile is where a node keeps its lease ID, so a restart within the
// TTL re-registers under it (same name, records and counts intact).
const leaseFile = "cluster-lease"

// cluster is a daemon's part of cluster mode.
type cluster struct {
	name   string // the etcd:// URL, for messages
	dir    *etcddir.Dir
	dirKey [32]byte // keys the directory's process names (Config.DirectoryKey)
	token  string   // the node-to-node bearer token, the same on every node
	peers  *peers   // nil without [cluster] listen: nothing is forwarded
	// capacity and placement: [cluster] capacity and placement.
	capacity  int
	placement registry.Placement
	log       *slog.Logger
}

// clusterSecrets derives the directory key and the node-to-node token
// from the cluster's one shared secret (separate derivations: the token
// travels, the key never does).
func clusterSecrets(path string) (dirKey [32]byte, token string, err error) {
	if path == "" {
		return dirKey, "", fmt.Errorf("cluster mode needs [cluster] key_file (or --cluster-key-file): a secret of at least %d bytes shared by every node", minClusterSecret)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return dirKey, "", fmt.Errorf("cluster key file: %w", err)
	}
	secret := []byte(strings.TrimSpace(string(b)))
	if len(secret) < minClusterSecret {
		return dirKey, "", fmt.Errorf("cluster key file %s: %d bytes, want at least %d", path, len(secret), minClusterSecret)
	}
	derive := func(label string) [32]byte {
		h, _ := blake2b.New256(secret[:min(len(secret), 64)])
		h.Write([]byte(label))
		var k [32]byte
		h.Sum(k[:0])
		return k
	}
	dirKey = derive("capsule-host directory names v1")
	tok := derive("capsule-host node-to-node token v1")
	return dirKey, hex.EncodeToString(tok[:]), nil
}

// openCluster registers this daemon in the cluster; nil, nil without a
// cluster URL.
func openCluster(ctx context.Context, cfg *config.Config, version string, lg *slog.Logger) (*cluster, error) {
	cc := cfg.Cluster
	if cc.URL == "" {
		return nil, nil
	}
	eps, prefix, err := etcddir.ParseURL(cc.URL)
	if err != nil {
		return nil, err
	}
	c := &cluster{name: cc.URL, log: lg}
	if c.dirKey, c.token, err = clusterSecrets(cc.KeyFile); err != nil {
		return nil, err
	}
	node := cc.Node
	if node == "" {
		if node, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("cluster node name: %w", err)
		}
	}
	adv := cc.Advertise
	if adv == "" {
		adv = cc.Listen
	}
	lf := filepath.Join(cfg.StateDir, leaseFile)
	var lease int64
	if b, err := os.ReadFile(lf); err == nil {
		lease, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 16, 64) // unreadable: a new lease
	}
	c.capacity = cc.Capacity
	if c.capacity == 0 {
		c.capacity = cmp.Or(cfg.Quotas.MaxEntries, registry.DefaultConfig().Quotas.MaxEntries)
	}
	if c.placement, err = registry.ParsePlacement(cc.Placement); err != nil {
		return nil, err
	}
	etls, err := loadEtcdTLS(cc)
	if err != nil {
		return nil, err
	}
	c.dir, err = etcddir.Open(ctx, etcddir.Config{
		Endpoints: eps, Prefix: prefix, Node: node, Address: adv, Capacity: c.capacity, TLS: etls,
		Version: version, TTL: cc.LeaseTTL.D(), LeaseID: lease, Logger: lg, LostGrace: cc.LostGrace.D(),
		OnLease: func(id int64) {
			if err := os.WriteFile(lf, []byte(strconv.FormatInt(id, 16)+"\n"), 0o600); err != nil {
				lg.Warn("cluster lease not persisted: a restart waits for its expiry", "err", err)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("joining cluster %s as node %q: %w", cc.URL, node, err)
	}
	if cc.Listen != "" {
		pt, err := loadPeerTLS(cc, node, lg)
		if err != nil {
			c.dir.Close()
			return nil, err
		}
		if c.peers, err = newPeers(c.dir, c.token, cc.Listen, pt); err != nil {
			c.dir.Close()
			return nil, err
		}
	}
	lg.Info("cluster mode: joined", "cluster", cc.URL, "node", node, "advertise", adv, "forwarding", c.peers != nil, "mtls", cc.TLSCA != "", "etcd_tls", etls != nil)
	return c, nil
}

// configure makes the registry use the cluster's directory.
func (c *cluster) configure(rc *registry.Config) {
	if c == nil {
		return
	}
	rc.Directory, rc.DirectoryKey = c.dir, &c.dirKey
	rc.NodeCapacity, rc.Placement = c.capacity, c.placement
	if c.peers != nil {
		rc.Forwarder = c.peers
	}
}

// serve starts answering forwarded calls (once the registry has adopted
// what it holds).
func (c *cluster) serve(reg *registry.Registry) {
	if c != nil && c.peers != nil {
		c.peers.serve(reg, c.log)
	}
}

// stopPeers ends the node-to-node listener, before the registry closes.
func (c *cluster) stopPeers(ctx context.Context) {
	if c != nil && c.peers != nil {
		c.peers.stop(ctx)
	}
}

// close leaves the cluster: with no process held any more (stop) the
// lease is revoked, so the node disappears at once; otherwise it stays
// until the TTL, for the next daemon to re-register under.
func (c *cluster) close(ctx context.Context, held bool) error {
	if c == nil {
		return nil
	}
	c.stopPeers(ctx) // idempotent: a failed start has not stopped them
	var errs []error
	if !held {
		if err := c.dir.Revoke(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.dir.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// closeIfFailed leaves the cluster when the start failed (*err set),
// keeping the lease: the start ended no process.
func (c *cluster) closeIfFailed(ctx context.Context, err *error) {
	if *err != nil {
		c.close(context.WithoutCancel(ctx), true)
	}
}

// health is "" outside cluster mode, else "ok (node N)" or why new
// spawns are refused.
func (c *cluster) health(ctx context.Context) string {
	if c == nil {
		return ""
	}
	if err := c.dir.Health(ctx); err != nil {
		return "degraded: " + err.Error()
	}
	return "ok (node " + c.dir.Node() + ")"
}

// nodes answers GET /v1/cluster/nodes (operator only).
func (s *Server) nodes(w http.ResponseWriter, r *http.Request) {
	c := s.rt.cluster
	if whoFrom(r).tcp {
		writeErr(w, http.StatusForbidden, api.CodeForbidden, "the node list is for the operator (the unix socket)")
		return
	}
	if c == nil {
		writeErr(w, http.StatusNotFound, api.CodeInvalidRequest, "this daemon is not in cluster mode (serve --cluster etcd://...)")
		return
	}
	ns, err := c.dir.Nodes(r.Context())
	if err != nil {
		code, status := api.CodeInternal, http.StatusInternalServerError
		if errors.Is(err, registry.ErrUnavailable) {
			status = http.StatusServiceUnavailable
		}
		writeErr(w, status, code, err.Error())
		return
	}
	out := api.NodeList{Cluster: c.name, Nodes: make([]api.Node, 0, len(ns))}
	for _, n := range ns {
		out.Nodes = append(out.Nodes, api.Node{Name: n.Name, Address: n.Address, Capacity: n.Capacity, Version: n.Version, StartedMS: n.Started.UnixMilli(), Self: n.Name == c.dir.Node()})
	}
	writeJSON(w, http.StatusOK, out)
}

// listOthers adds every other live node's processes matching f to out
// (the operator's `ps` across the cluster); a node that does not answer
// is named in out.Unreachable, never silently left out.
func (c *cluster) listOthers(ctx context.Context, f registry.OperatorFilter, out *api.ProcessList) {
	if c == nil || c.peers == nil {
		return
	}
	ns, err := c.dir.Nodes(ctx)
	if err != nil {
		out.Unreachable = append(out.Unreachable, "(directory: "+err.Error()+")")
		return
	}
	for _, n := range ns {
		if n.Name == c.dir.Node() {
			continue
		}
		infos, err := c.peers.listAll(ctx, n.Name, f)
		if err != nil {
			c.log.Warn("cluster ps: a node did not answer", "node", n.Name, "err", err)
			out.Unreachable = append(out.Unreachable, n.Name)
			continue
		}
		for _, in := range infos {
			p := processView(in)
			p.LogID = "" // the holder's log names it with its own key
			out.Processes = append(out.Processes, p)
		}
	}
}
