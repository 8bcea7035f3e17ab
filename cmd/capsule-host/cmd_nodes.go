package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/capsule-host/capsule-host/host/config"
)

// clusterFlags are serve's cluster-mode flags; each overrides its
// [cluster] key.
type clusterFlags struct {
	url, node, listen, advertise, keyFile string
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "cluster", "", "cluster mode: share one registry in etcd at `etcd://host:port[,...][/name]` (overrides [cluster] url)")
	fs.StringVar(&c.node, "node", "", "this daemon's `name` in the cluster (default: the hostname)")
	fs.StringVar(&c.listen, "cluster-listen", "", "node-to-node listener `host:port`")
	fs.StringVar(&c.advertise, "cluster-advertise", "", "the `host:port` other nodes dial (default --cluster-listen)")
	fs.StringVar(&c.keyFile, "cluster-key-file", "", "the cluster's shared secret `file` (at least 32 bytes)")
}

func (c *clusterFlags) apply(cfg *config.Config) {
	for _, f := range []struct{ flag, dst *string }{
		{&c.url, &cfg.Cluster.URL}, {&c.node, &cfg.Cluster.Node}, {&c.listen, &cfg.Cluster.Listen},
		{&c.advertise, &cfg.Cluster.Advertise}, {&c.keyFile, &cfg.Cluster.KeyFile},
	} {
		if *f.flag != "" {
			*f.dst = *f.flag
		}
	}
}

func init() {
	commands = append(commands, &command{
		name: "nodes", summary: "list the live nodes of the daemon's cluster", maxArgs: 0,
		help: `Lists the nodes registered in the cluster the daemon belongs to (serve
--cluster etcd://...): name, the address other nodes reach it at, capacity,
version and registration time; * marks the daemon that answered. A node is
listed while its lease lives: a node killed is listed until its lease TTL
passes, and its processes answer "unavailable" naming it until then.`,
		run: runNodes,
	})
}

func runNodes(e *env, _ *opts, _ []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	l, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tCAPACITY\tVERSION\tSTARTED")
	for _, n := range l.Nodes {
		name := n.Name
		if n.Self {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", name, dash(n.Address), n.Capacity, dash(n.Version), time.UnixMilli(n.StartedMS).UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}
