package client

import "context"

// Node is one live node of a cluster (GET /v1/cluster/nodes).
type Node struct {
	Name     string `json:"name"`
	Address  string `json:"address"`
	Capacity int    `json:"capacity"`
	Version  string `json:"version"`
	// StartedMS is the node's registration time, Unix milliseconds.
	StartedMS int64 `json:"started_ms"`
	// Self marks the node that answered.
	Self bool `json:"self,omitempty"`
}

// NodeList answers GET /v1/cluster/nodes.
type NodeList struct {
	Cluster string `json:"cluster"`
	Nodes   []Node `json:"nodes"`
}

// Nodes lists the cluster's live nodes (operator only; a daemon not in
// cluster mode answers CodeUnavailable).
func (c *Client) Nodes(ctx context.Context) (NodeList, error) {
	var l NodeList
	return l, c.do(ctx, "GET", "/v1/cluster/nodes", nil, &l)
}
