package main

import (
	"fmt"
	"io"

	api "github.com/capsule-host/capsule-host/client"
)

func init() {
	commands = append(commands, &command{
		name: "reload", args: "[NAME]", summary: "reload capsules without a restart, keeping their processes", maxArgs: 1,
		help: `Asks the daemon to re-read the host config's capsule directories and the
bundled set (SIGHUP to serve does the same), then: loads new capsules,
replaces changed ones (manifest, module sha256 or directory), leaves
unchanged ones alone, and removes capsules that are no longer configured.
With NAME only that capsule is reloaded.

A replaced capsule keeps every process and its IDs; calls already running
finish on the old version. A capsule that fails to reload keeps its
previous version serving and is listed by "capsules". A removed capsule's
persistent processes are stopped (reason removed). Prints one line per
capsule; exits 1 if any failed. Operator only (the unix socket).`,
		run: runReload,
	})
}

func runReload(e *env, o *opts, args []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	name := ""
	if len(args) == 1 {
		name = args[0]
	}
	res, err := c.Reload(e.ctx, name)
	if err != nil {
		return err
	}
	if e.g.json {
		if err := printJSON(e.stdout, res); err != nil {
			return err
		}
	} else {
		printReload(e.stdout, res)
	}
	if len(res.Failed) > 0 {
		return fmt.Errorf("reload: %d capsule directories failed to load (listed above)", len(res.Failed))
	}
	return nil
}

func printReload(w io.Writer, res api.ReloadResponse) {
	for _, l := range []struct {
		what  string
		names []string
	}{{"added", res.Added}, {"replaced", res.Replaced}, {"unchanged", res.Unchanged}, {"removed", res.Removed}} {
		for _, n := range l.names {
			fmt.Fprintf(w, "%-10s %s\n", l.what, n)
		}
	}
	if res.ProcessesStopped > 0 {
		fmt.Fprintf(w, "stopped    %d persistent process(es) of removed capsules\n", res.ProcessesStopped)
	}
	for _, f := range res.Failed {
		serving := "nothing serves in its place"
		if f.Serving != "" {
			serving = "version " + f.Serving + " keeps serving"
		}
		fmt.Fprintf(w, "failed     %s (%s): %s: %s; %s\n", dash(f.Name), f.Dir, f.Kind, oneLine(f.Error), serving)
	}
}
