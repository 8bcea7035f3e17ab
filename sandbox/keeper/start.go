package keeper

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/sandbox/bwrap"
	"github.com/capsule-host/capsule-host/sandbox/oci"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// RoleName is the keeper's re-exec role (argv[0] of the keeper process).
const RoleName = "capsule-host-keeper"

func init() { reexec.Register(RoleName, roleMain) }

// Process is a keeper this process started.
type Process struct {
	PID  int
	done chan struct{}
	err  error
}

// Done is closed when the keeper has exited (while the starter lives).
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the keeper's exit status once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Start starts a keeper on cfg.Dir and returns once it listens, or with
// its startup error (a *LockedError if another keeper holds the dir).
//
// The keeper must outlive its starter: it gets its own session (setsid;
// a signal to the starter's process group or terminal never reaches it),
// stdin from /dev/null, stdout and stderr appended to <dir>/keeper.log,
// "/" as its working directory, and no parent-death signal, so a kill -9
// of the starter leaves it running. Its exit status is collected by a goroutine of the starter
// while the starter lives (no zombie); after that, by whoever inherits it.
func Start(cfg Config) (*Process, error) {
	cfg = cfg.withDefaults()
	if err := prepareDir(cfg.Dir); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, LogName), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keeper log: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("keeper ready pipe: %w", err)
	}
	defer r.Close()
	args := []string{"-dir", cfg.Dir, "-name", cfg.Name, "-frame-timeout", cfg.FrameTimeout.String(),
		"-write-timeout", cfg.WriteTimeout.String(), "-no-cgroups=" + strconv.FormatBool(cfg.NoCgroups), "-ready-fd", "3"}
	if cfg.SyncEach {
		args = append(args, "-sync-each")
	}
	if cfg.Bwrap != nil {
		b, err := json.Marshal(cfg.Bwrap)
		if err != nil {
			return nil, fmt.Errorf("keeper bwrap options: %w", err)
		}
		args = append(args, "-bwrap", string(b))
	}
	if cfg.OCI != nil {
		b, err := json.Marshal(cfg.OCI)
		if err != nil {
			return nil, fmt.Errorf("keeper oci options: %w", err)
		}
		args = append(args, "-oci", string(b))
	}
	cmd := reexec.Command(RoleName, args...)
	cmd.Stdout, cmd.Stderr = logf, logf // Stdin nil: /dev/null
	cmd.Dir = "/"                       // never pin the starter's cwd (an old release dir)
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("keeper start: %w", err)
	}
	p := &Process{PID: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := awaitReady(r, cfg.StartTimeout); err != nil {
		var le *LockedError
		if !errors.As(err, &le) {
			cmd.Process.Kill() // ours and not serving: nothing of it may linger
		}
		<-p.done
		return nil, err
	}
	return p, nil
}

// readyMsg is the one line a keeper writes on its ready pipe.
type readyMsg struct {
	OK    bool       `json:"ok"`
	Error *wireError `json:"error,omitempty"`
}

// awaitReady reads the keeper's ready line. EOF without one means the
// keeper died before it could say anything (see keeper.log).
func awaitReady(r *os.File, timeout time.Duration) error {
	r.SetReadDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("keeper not ready within %v: %w", timeout, ErrKeeperGone)
	}
	var m readyMsg
	if len(b) == 0 || json.Unmarshal(b, &m) != nil {
		return fmt.Errorf("keeper exited before it was ready (see %s): %w", LogName, ErrKeeperGone)
	}
	if m.Error != nil {
		err := fromWire("start", m.Error)
		var le *LockedError
		if errors.As(err, &le) {
			return le
		}
		return err
	}
	return nil
}

// roleMain is the keeper process: Serve until SIGTERM/SIGINT (which stop
// every process first) or a shutdown request.
func roleMain(args []string) int {
	fs := flag.NewFlagSet(RoleName, flag.ContinueOnError)
	var cfg Config
	fs.StringVar(&cfg.Dir, "dir", "", "state directory")
	fs.StringVar(&cfg.Name, "name", "", "backend name")
	fs.DurationVar(&cfg.FrameTimeout, "frame-timeout", 0, "hello and frame completion timeout")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", 0, "response write timeout")
	fs.BoolVar(&cfg.NoCgroups, "no-cgroups", false, "no cgroups in the embedded local backend")
	fs.BoolVar(&cfg.SyncEach, "sync-each", false, "each exit record fsynced alone (a benchmark's baseline)")
	readyFD := fs.Int("ready-fd", -1, "descriptor to report readiness on")
	bw := fs.String("bwrap", "", "bubblewrap options (JSON): embed bwrap instead of local")
	oc := fs.String("oci", "", "OCI backend options (JSON): embed OCI instead of local")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *oc != "" {
		cfg.OCI = new(oci.Options)
		if err := json.Unmarshal([]byte(*oc), cfg.OCI); err != nil {
			fmt.Fprintf(os.Stderr, "keeper: -oci: %v\n", err)
			return 2
		}
	}
	if *bw != "" {
		cfg.Bwrap = new(bwrap.Options)
		if err := json.Unmarshal([]byte(*bw), cfg.Bwrap); err != nil {
			fmt.Fprintf(os.Stderr, "keeper: -bwrap: %v\n", err)
			return 2
		}
	}
	var ready *os.File
	if *readyFD >= 0 {
		ready = os.NewFile(uintptr(*readyFD), "ready-"+strconv.Itoa(*readyFD))
		syscall.CloseOnExec(*readyFD)
	}
	report := func(err error) {
		if ready == nil {
			return
		}
		m := readyMsg{OK: err == nil}
		if err != nil {
			m.Error = toWire(err)
		}
		json.NewEncoder(ready).Encode(m)
		ready.Close()
		ready = nil
	}
	// SIGHUP is caught, not ignored: an ignored disposition would be
	// inherited across exec by every process the keeper starts.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			fmt.Fprintf(os.Stderr, "keeper[%d]: SIGHUP ignored\n", os.Getpid())
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg.Ready = func() { report(nil) }
	if !cfg.NoCgroups {
		defer ownCgroup(cfg)() // before Serve builds the backend
	}
	if err := Serve(ctx, cfg); err != nil {
		report(err)
		fmt.Fprintf(os.Stderr, "keeper[%d]: %v\n", os.Getpid(), err)
		return 1
	}
	return 0
}
