package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// logsOpts are the line flags of logs: --tail, --since, --timestamps and
// --merged work on lines timed by the capture time of their first byte
// (the daemon records a time per write, LogChunk.Times).
type logsOpts struct {
	tail       string
	since      string
	timestamps bool
	merged     bool
}

func (lo *logsOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&lo.tail, "tail", "", "print only the last `N` lines (then follow, with -f)")
	fs.StringVar(&lo.since, "since", "", "only lines captured within this `duration` (10m) or since an RFC 3339 time")
	fs.BoolVar(&lo.timestamps, "timestamps", false, "prefix each line with its capture time (UTC, RFC 3339)")
	fs.BoolVar(&lo.merged, "merged", false, "stdout and stderr interleaved in capture order")
}

func (lo *logsOpts) lineMode() bool {
	return lo.tail != "" || lo.since != "" || lo.timestamps || lo.merged
}

// logsPlan is the parsed line flags.
type logsPlan struct {
	tail    int       // -1: all
	since   time.Time // zero: no cutoff
	streams []string
	stamps  bool
}

const lineFlags = "--tail/--since/--timestamps/--merged"

func parseLogsPlan(o *opts, now time.Time) (logsPlan, error) {
	lo := &o.logs
	p := logsPlan{tail: -1, streams: []string{"stdout"}, stamps: lo.timestamps}
	switch {
	case o.max != 0:
		return p, usagef("--max bounds a raw read; it does not go with %s", lineFlags)
	case lo.merged && o.stderr:
		return p, usagef("--merged already prints stderr; drop --stderr")
	case lo.merged && o.cursor != "":
		return p, usagef("--cursor names a place in one stream; it does not go with --merged")
	}
	if o.stderr {
		p.streams = []string{"stderr"}
	}
	if lo.merged {
		p.streams = []string{"stdout", "stderr"}
	}
	if lo.tail != "" {
		n, err := strconv.Atoi(lo.tail)
		if err != nil || n < 0 {
			return p, usagef("--tail %q: want a line count >= 0", lo.tail)
		}
		p.tail = n
	}
	if lo.since != "" {
		if d, err := time.ParseDuration(lo.since); err == nil {
			if d <= 0 {
				return p, usagef("--since %q: want a positive duration like 10m", lo.since)
			}
			p.since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, lo.since); err == nil {
			p.since = t
		} else {
			return p, usagef("--since %q: want a duration like 10m or an RFC 3339 time like 2006-01-02T15:04:05Z", lo.since)
		}
	}
	return p, nil
}

// logLine is one line of one stream; t is its capture time in unix
// nanoseconds, 0 when unknown.
type logLine struct {
	stream int
	t      int64
	text   []byte // with its newline, unless it is an unfinished last line
}

// lineCutter cuts one stream's chunks into lines. An unfinished line waits
// for the next chunk; a gap (bytes lost) ends it.
type lineCutter struct {
	stream  int
	partial []byte
	pt      int64
	lost    uint64
}

func chunkTime(ch api.LogChunk, pos int) int64 {
	var t int64
	for _, lt := range ch.Times {
		if lt.At > pos {
			break
		}
		t = lt.UnixNano
	}
	return t
}

func (c *lineCutter) feed(ch api.LogChunk, emit func(logLine)) {
	if ch.BytesDropped > 0 {
		c.lost += ch.BytesDropped
		c.flush(emit)
	}
	d := ch.Data
	for pos := 0; pos < len(d); {
		if len(c.partial) == 0 {
			c.pt = chunkTime(ch, pos)
		}
		end := len(d)
		if i := bytes.IndexByte(d[pos:], '\n'); i >= 0 {
			end = pos + i + 1
		}
		c.partial = append(c.partial, d[pos:end]...)
		if d[end-1] == '\n' {
			c.flush(emit)
		}
		pos = end
	}
}

func (c *lineCutter) flush(emit func(logLine)) {
	if len(c.partial) > 0 {
		emit(logLine{stream: c.stream, t: c.pt, text: c.partial})
		c.partial = nil
	}
}

// mergeLines interleaves two streams' lines by capture time, keeping each
// stream's own order (a clock step back never reorders one stream); on a
// tie stdout comes first.
func mergeLines(a, b []logLine) []logLine {
	out := make([]logLine, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].t <= b[0].t {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

const stampWidth = len("2006-01-02T15:04:05.000000000Z")

// lineWriter prints lines. A line that ends without a newline (a stream's
// unfinished last line) gets one before the next line is printed, so two
// streams' lines never run together on one line.
type lineWriter struct {
	w      io.Writer
	stamps bool
	open   bool // the last line printed had no newline
}

func (lw *lineWriter) write(l logLine) error {
	if lw.open {
		if _, err := io.WriteString(lw.w, "\n"); err != nil {
			return err
		}
	}
	if lw.stamps {
		s := "-"
		if l.t != 0 {
			s = time.Unix(0, l.t).UTC().Format("2006-01-02T15:04:05.000000000Z")
		}
		if _, err := fmt.Fprintf(lw.w, "%-*s ", stampWidth, s); err != nil {
			return err
		}
	}
	lw.open = len(l.text) > 0 && l.text[len(l.text)-1] != '\n'
	_, err := lw.w.Write(l.text)
	return err
}

// readRetained reads one stream from cursor to its current end. It returns
// the complete lines, the cutter holding an unfinished last line, and the
// cursor after what was read.
func readRetained(ctx context.Context, c *api.Client, id string, q api.LogQuery, cut *lineCutter) ([]logLine, string, bool, error) {
	var lines []logLine
	emit := func(l logLine) { lines = append(lines, l) }
	for {
		ch, err := c.Logs(ctx, id, q)
		if err != nil {
			return nil, "", false, err
		}
		cut.feed(ch, emit)
		if ch.Next != "" {
			q.Cursor = ch.Next
		}
		if ch.EOF || len(ch.Data) == 0 {
			return lines, q.Cursor, ch.EOF, nil
		}
	}
}

// runLogLines is logs with line flags: read what is retained of each
// stream, filter, merge, tail, print; with -f then follow each stream from
// where the read ended. Loss is reported on stderr: bytes the log limits
// dropped, and lines --since left out because their time is unknown.
// funclen: one sequence of read, filter, print and follow reads best whole.
func runLogLines(e *env, o *opts, id string) error {
	p, err := parseLogsPlan(o, time.Now())
	if err != nil {
		return err
	}
	if e.g.json {
		return usagef("--json prints raw chunks; it does not go with %s", lineFlags)
	}
	c, err := client(e)
	if err != nil {
		return err
	}
	cuts := make([]*lineCutter, len(p.streams))
	cursors := make([]string, len(p.streams))
	eofs := make([]bool, len(p.streams))
	var all []logLine
	for i, s := range p.streams {
		cuts[i] = &lineCutter{stream: i}
		var lines []logLine
		lines, cursors[i], eofs[i], err = readRetained(e.ctx, c, id, api.LogQuery{Stream: s, Cursor: o.cursor}, cuts[i])
		if err != nil {
			return err
		}
		if eofs[i] || !o.follow {
			cuts[i].flush(func(l logLine) { lines = append(lines, l) })
		}
		if cuts[i].lost > 0 {
			fmt.Fprintf(e.stderr, "capsule-host logs: %d bytes of %s were lost before this output (log limits)\n", cuts[i].lost, s)
			cuts[i].lost = 0
		}
		all = mergeLines(all, lines)
	}
	if !p.since.IsZero() {
		kept, unknown := all[:0], 0
		for _, l := range all {
			if l.t == 0 {
				unknown++
			} else if l.t >= p.since.UnixNano() {
				kept = append(kept, l)
			}
		}
		all = kept
		if unknown > 0 {
			fmt.Fprintf(e.stderr, "capsule-host logs: %d lines have no recorded capture time (written before the keeper's restart, or by an older one); --since left them out\n", unknown)
		}
	}
	if p.tail >= 0 && len(all) > p.tail {
		all = all[len(all)-p.tail:]
	}
	lw := &lineWriter{w: e.stdout, stamps: p.stamps}
	for _, l := range all {
		if err := lw.write(l); err != nil {
			return err
		}
	}
	if !o.follow {
		return nil
	}
	return followLines(e, c, id, lw, p, cuts, cursors, eofs)
}

// followLines follows each stream (both, with --merged, each on its own
// goroutine) and prints whole lines as they complete, in arrival order.
func followLines(e *env, c *api.Client, id string, lw *lineWriter, p logsPlan, cuts []*lineCutter, cursors []string, eofs []bool) error {
	info, err := c.Process(e.ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "following process %s (%s, %s); Ctrl-C stops following, not the process\n", info.LogID, info.Capsule, info.Principal)
	var mu sync.Mutex
	var werr error
	emit := func(l logLine) {
		mu.Lock()
		defer mu.Unlock()
		if werr == nil {
			werr = lw.write(l)
		}
	}
	errs := make(chan error, len(p.streams))
	for i, s := range p.streams {
		if eofs[i] {
			errs <- nil
			continue
		}
		go func() {
			err := c.Follow(e.ctx, id, api.LogQuery{Stream: s, Cursor: cursors[i]}, func(ch api.LogChunk) error {
				cuts[i].feed(ch, emit)
				if cuts[i].lost > 0 {
					fmt.Fprintf(e.stderr, "capsule-host logs: %d bytes of %s were lost here (log limits)\n", cuts[i].lost, s)
					cuts[i].lost = 0
				}
				mu.Lock()
				defer mu.Unlock()
				return werr
			})
			cuts[i].flush(emit)
			errs <- err
		}()
	}
	for range p.streams {
		if ferr := <-errs; ferr != nil && err == nil {
			err = ferr
		}
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(e.stderr, "stopped following; the process keeps running\n")
		return nil
	}
	if err != nil {
		return err
	}
	if p2, err := c.Process(context.WithoutCancel(e.ctx), id); err == nil {
		fmt.Fprintf(e.stderr, "process %s ended: %s\n", info.LogID, api.ExitText(p2.Exit))
	}
	return nil
}
