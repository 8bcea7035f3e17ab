package oci

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/capsule-host/capsule-host/internal/procfs"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// A monitor is the host binary re-executed (reexec role monitorRole, see
// monitor.go), and a Go binary's startup (runtime, package inits) costs
// 2-4 ms here: as much as everything else the backend adds to a start.
// So the process keeps one spare monitor started ahead of need, idle on
// its config pipe. Start takes it, sends it the container's config, and
// starts the next spare in the background, while the container runs. The
// spare is the same process, in its own session, a child of the host,
// that a monitor started on demand would be: nothing about the exit
// record changes. An unused spare exits when the host does (EOF on its
// config pipe).
//
// monitorProc is a started monitor and the host's ends of its pipes.
type monitorProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	start  uint64 // the monitor's start time (procfs.StartTime)
	// The host's ends: the monitor's (and so the container's) stdin,
	// stdout and stderr; its status lines (fd 3); its config (fd 4).
	stdinW, outR, errR, statR, cfgW *os.File
}

func (m *monitorProc) closeHost() {
	for _, f := range []*os.File{m.stdinW, m.outR, m.errR, m.statR, m.cfgW} {
		if f != nil {
			f.Close()
		}
	}
}

// discard ends an unused monitor: EOF on its config makes it exit.
func (m *monitorProc) discard() {
	m.closeHost()
	<-m.exited
}

// startMonitor starts a monitor that waits for its config on fd 4.
func startMonitor() (*monitorProc, error) {
	var child []*os.File
	m := &monitorProc{}
	fail := func(err error) (*monitorProc, error) {
		for _, f := range child {
			f.Close()
		}
		m.closeHost()
		return nil, err
	}
	pipe := func(hostRead bool) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		if hostRead {
			child = append(child, w)
			return r, nil
		}
		child = append(child, r)
		return w, nil
	}
	var err error
	// The order of child is the monitor's fds 0, 1, 2, 3, 4.
	if m.stdinW, err = pipe(false); err != nil {
		return fail(err)
	}
	if m.outR, err = pipe(true); err != nil {
		return fail(err)
	}
	if m.errR, err = pipe(true); err != nil {
		return fail(err)
	}
	if m.statR, err = pipe(true); err != nil {
		return fail(err)
	}
	if m.cfgW, err = pipe(false); err != nil {
		return fail(err)
	}
	cmd := reexec.Command(monitorRole, strconv.Itoa(monitorConfigFD))
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = child[0], child[1], child[2]
	cmd.ExtraFiles = []*os.File{child[3], child[4]}
	// Own session: the monitor (and through it the container) is not in
	// any process group the host or its terminal signals.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("oci monitor: %w", err))
	}
	for _, f := range child {
		f.Close()
	}
	m.cmd = cmd
	m.start = procfs.StartTime(cmd.Process.Pid)
	m.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(m.exited)
	}()
	return m, nil
}

var spare struct {
	sync.Mutex
	m       *monitorProc
	filling bool
	off     bool // benchmarks: start every monitor on demand
}

// takeMonitor returns the spare monitor if there is a live one, else a
// new one. The caller then calls refill, to start the next spare in the
// background.
func takeMonitor() (*monitorProc, error) {
	spare.Lock()
	if spare.off {
		spare.Unlock()
		return startMonitor()
	}
	m := spare.m
	spare.m = nil
	spare.Unlock()
	if m != nil {
		select {
		case <-m.exited: // killed while idle: not usable
			m.closeHost()
			m = nil
		default:
		}
	}
	if m == nil {
		return startMonitor()
	}
	return m, nil
}

// refill starts the next spare in the background unless one is there or
// on its way.
func refill() {
	spare.Lock()
	start := !spare.filling && spare.m == nil && !spare.off
	if start {
		spare.filling = true
	}
	spare.Unlock()
	if start {
		go refillSpare()
	}
}

func refillSpare() {
	m, err := startMonitor()
	spare.Lock()
	spare.filling = false
	if err != nil || spare.m != nil {
		spare.Unlock()
		if m != nil {
			m.discard()
		}
		return
	}
	spare.m = m
	spare.Unlock()
}

// statusLines are the monitor's status lines (its fd 3) as the host reads
// them: the first says whether the container started, the next carries
// the exit record, the last that the container is empty. EOF ends each
// wait: the monitor is gone.
type statusLines struct {
	first   chan monitorStatus // one value
	exit    chan struct{}      // closed once rec is set, or at EOF
	rec     *exitRecord        // set before exit closes
	settled chan struct{}      // closed on the settled line or at EOF
}

// readStatus reads r (closing it at the end) in the background.
func readStatus(r *os.File) *statusLines {
	s := &statusLines{first: make(chan monitorStatus, 1), exit: make(chan struct{}), settled: make(chan struct{})}
	go s.read(r)
	return s
}

func (s *statusLines) read(r *os.File) {
	defer close(s.settled)
	exitClosed := false
	defer func() {
		if !exitClosed {
			close(s.exit)
		}
	}()
	defer r.Close()
	rd := bufio.NewReader(r)
	var first monitorStatus
	line, err := rd.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		first.Error = fmt.Sprintf("monitor exited without a status: %v", err)
	} else if err := json.Unmarshal(line, &first); err != nil {
		first.Error = fmt.Sprintf("monitor status %q: %v", line, err)
	}
	s.first <- first
	if first.Error != "" {
		return
	}
	for {
		line, err := rd.ReadBytes('\n')
		var m monitorStatus
		if len(line) > 0 && json.Unmarshal(line, &m) == nil {
			if m.Exit && !exitClosed {
				s.rec = m.Record
				close(s.exit)
				exitClosed = true
			}
			if m.Settled {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
