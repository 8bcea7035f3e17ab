package registry

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Placement of persistent spawns across a cluster. The node that receives
// a spawn validates it (so bad input is refused where it arrived), picks
// a node from the directory's live nodes and their published load, and
// forwards the spawn there; the chosen node validates it again against
// its own policy, reserves in the directory (the cluster-wide quota) and
// starts it. Workspaces are per node: a spawn placed elsewhere sees that
// node's workspace of the principal, which is why the default keeps
// spawns local while the local node has room. Ephemeral spawns (run to
// completion, background handles) are tied to the calling instance and
// always run here.

// Placement names a placement policy ([cluster] placement).
type Placement string

// The policies.
const (
	// PlaceLocalFirst: here while this node is under its capacity, else
	// the least-loaded live node with room.
	PlaceLocalFirst Placement = "local-first"
	// PlaceLeastLoaded: the least-loaded live node with room, this one
	// included (ties: this node, then by name).
	PlaceLeastLoaded Placement = "least-loaded"
	// PlaceLocal: always here (a full node refuses with ErrNodeFull).
	PlaceLocal Placement = "local"
)

// ParsePlacement checks a configured policy; "" is PlaceLocalFirst.
func ParsePlacement(s string) (Placement, error) {
	switch p := Placement(s); p {
	case "":
		return PlaceLocalFirst, nil
	case PlaceLocalFirst, PlaceLeastLoaded, PlaceLocal:
		return p, nil
	}
	return "", fmt.Errorf("%w: placement %q: want %s, %s or %s", ErrInvalidInput, s, PlaceLocalFirst, PlaceLeastLoaded, PlaceLocal)
}

// placeOrder is the nodes to try, best first: those with room, least
// loaded first (this node first among equals, then by name). self's load
// and capacity are the exact local figures, not its published ones.
func placeOrder(policy Placement, me DirNode, nodes []DirNode) []string {
	self := me.Name
	var c []DirNode
	for _, n := range nodes {
		if n.Name == self {
			n = me
		}
		if n.Capacity > 0 && n.Running >= n.Capacity {
			continue
		}
		if policy == PlaceLocalFirst && n.Name == self {
			return []string{self}
		}
		c = append(c, n)
	}
	slices.SortFunc(c, func(a, b DirNode) int {
		if a.Running != b.Running {
			return a.Running - b.Running
		}
		if (a.Name == self) != (b.Name == self) {
			if a.Name == self {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	out := make([]string, len(c))
	for i, n := range c {
		out[i] = n.Name
	}
	return out
}

// spawnPlaced runs a persistent spawn on another node when placement
// says so: placed is false when it should start here. A node that turns
// out full (its published load lagged) or unreachable is skipped for the
// next; when none is left the answer is ErrNodeFull naming what was
// tried.
func (r *Registry) spawnPlaced(ctx context.Context, req SpawnRequest, o PersistOptions) (id string, placed bool, err error) {
	pol := r.cfg.Placement
	if r.cfg.Forwarder == nil || pol == PlaceLocal || ctx.Value(noForwardKey{}) != nil {
		return "", false, nil
	}
	r.mu.Lock()
	running := r.running
	r.mu.Unlock()
	if c := r.cfg.NodeCapacity; pol != PlaceLeastLoaded && (c == 0 || running < c) {
		return "", false, nil // the fast path: no directory read
	}
	nodes, err := r.dir.LiveNodes(ctx)
	if err != nil {
		return "", true, err
	}
	self := r.dir.Node()
	c, _ := CallerFrom(ctx)
	call := RemoteCall{Op: OpSpawnPersistent, Caller: c, Spawn: &req, Persist: &o, From: self, Request: rand.Text()}
	var tried []string
	for _, n := range placeOrder(pol, DirNode{Name: self, Capacity: r.cfg.NodeCapacity, Running: running}, nodes) {
		if n == self {
			return "", false, nil
		}
		raw, ferr := r.forwardSpawn(ctx, n, call)
		var he *HeldElsewhereError
		if errors.Is(ferr, ErrNodeFull) || errors.As(ferr, &he) {
			tried = append(tried, n)
			r.log.Info("placement: node refused or unreachable, trying the next", "node", n, "err", ferr)
			continue
		}
		if ferr != nil {
			return "", true, ferr
		}
		if err := json.Unmarshal(raw, &id); err != nil || id == "" {
			return "", true, fmt.Errorf("%w: node %q answered a spawn with %v", ErrInternal, n, err)
		}
		r.log.Info("placement: spawn placed on another node", "node", n, "capsule", c.Capsule)
		return id, true, nil
	}
	err = fmt.Errorf("%w: no live node has room (%d registered; this node %q runs %d of %d; tried %v)", ErrNodeFull, len(nodes), self, running, r.cfg.NodeCapacity, tried)
	r.log.Warn("placement: spawn refused", "err", err)
	return "", true, err
}

// placeRetryFor bounds the retries of a placed spawn whose answer was
// lost (well under dedupKeep, the target's memory of it).
const placeRetryFor = 15 * time.Second

// forwardSpawn sends a placed spawn to node. An answer lost after the
// request left (AnswerLostError) is retried on the same node with the
// same request ID for up to placeRetryFor, never on another node: the
// target's memory (spawn_dedup.go) answers a repeat with the process the
// first attempt started, so a lost answer never makes two processes. Any
// answer from the node is final; one that fails before sending
// (HeldElsewhereError) lets the caller try the next node only on the
// first attempt.
func (r *Registry) forwardSpawn(ctx context.Context, node string, call RemoteCall) (json.RawMessage, error) {
	raw, err := r.cfg.Forwarder.Forward(ctx, node, call)
	var lost *AnswerLostError
	if !errors.As(err, &lost) {
		return raw, err
	}
	deadline := time.Now().Add(placeRetryFor)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		r.log.Warn("placement: a spawn's answer was lost after it was sent; retrying the same node with the same request ID", "node", node, "err", err)
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("%w: node %q: a placed spawn's answer was lost and the node did not answer its retries for %v (a process may have started there, listed as the caller's): %v", ErrUnavailable, node, placeRetryFor, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: retrying a placed spawn on node %q: %v", ErrCancelled, node, ctx.Err())
		case <-time.After(wait):
		}
		raw, err = r.cfg.Forwarder.Forward(ctx, node, call)
		if !errors.As(err, &lost) && !errors.As(err, new(*HeldElsewhereError)) {
			return raw, err
		}
	}
}
