package keeper

import (
	"fmt"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// wireSpec is sandbox.ProcessSpec on the wire. ProcessSpec would encode
// as is (durations as nanoseconds, enums as integers, Data as base64),
// but an explicit struct keeps the protocol from changing silently when a
// seam field is renamed or added (TestSpecWireCoversEveryField fails
// instead), and spells enums and durations so a human can read a frame.
type wireSpec struct {
	Argv      []string      `json:"argv"`
	Path      string        `json:"path,omitempty"` // absent from a daemon before it: Argv[0]
	Cwd       string        `json:"cwd"`
	Env       []string      `json:"env"`
	Stdin     wireStdin     `json:"stdin"`
	Output    wireOutput    `json:"output"`
	GraceNS   int64         `json:"grace_ns"`
	DrainNS   int64         `json:"drain_ns"`
	Limits    wireLimits    `json:"limits"`
	Terminal  *wireTerminal `json:"terminal,omitempty"`
	Isolation wireIsolation `json:"isolation"`
	Label     string        `json:"label,omitempty"`
}

type wireStdin struct {
	Mode string `json:"mode"` // "closed" | "bytes" | "open"
	Data []byte `json:"data,omitempty"`
}

type wireOutput struct {
	RingBytes  int    `json:"ring_bytes"`
	SpillBytes int64  `json:"spill_bytes"`
	Overflow   string `json:"overflow"` // "drop-oldest" | "backpressure"
	SpillDir   string `json:"spill_dir,omitempty"`
	// The capture rate (sandbox.OutputRate); absent: unbounded.
	RateBytes int64 `json:"rate_bytes_per_sec,omitempty"`
	RateBurst int64 `json:"rate_burst,omitempty"`
}

type wireLimits struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	CPUTimeNS   int64 `json:"cpu_time_ns,omitempty"`
	Pids        int   `json:"pids,omitempty"`
	OpenFiles   int   `json:"open_files,omitempty"`
}

type wireTerminal struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
	Term string `json:"term"`
}

type wireIsolation struct {
	Workspace string `json:"workspace,omitempty"`
	Network   bool   `json:"network,omitempty"`
	Profile   string `json:"profile,omitempty"`
}

var stdinModes = map[sandbox.StdinMode]string{sandbox.StdinClosed: "closed", sandbox.StdinBytes: "bytes", sandbox.StdinOpen: "open"}

var overflows = map[sandbox.Overflow]string{sandbox.DropOldest: "drop-oldest", sandbox.Backpressure: "backpressure"}

// specToWire converts a spec the caller validated. Strings JSON cannot
// carry are refused.
func specToWire(s sandbox.ProcessSpec) (wireSpec, error) {
	fields := []struct {
		name string
		ss   []string
	}{
		{"argv", s.Argv}, {"path", []string{s.Path}}, {"env", s.Env},
		{"cwd", []string{s.Cwd}}, {"output.spill-dir", []string{s.Output.SpillDir}},
		{"isolation", []string{s.Isolation.Workspace, s.Isolation.Profile}}, {"label", []string{s.Label}},
		{"terminal.term", []string{termOf(s.Terminal)}},
	}
	for _, f := range fields {
		if err := checkUTF8(f.name, f.ss...); err != nil {
			return wireSpec{}, err
		}
	}
	w := wireSpec{
		Argv: s.Argv, Path: s.Path, Cwd: s.Cwd, Env: s.Env,
		Stdin:   wireStdin{Mode: stdinModes[s.Stdin.Mode], Data: s.Stdin.Data},
		Output:  wireOutput{RingBytes: s.Output.RingBytes, SpillBytes: s.Output.SpillBytes, Overflow: overflows[s.Output.Overflow], SpillDir: s.Output.SpillDir, RateBytes: s.Output.Rate.BytesPerSec, RateBurst: s.Output.Rate.Burst},
		GraceNS: int64(s.Grace), DrainNS: int64(s.Drain),
		Limits:    wireLimits{MemoryBytes: s.Limits.MemoryBytes, CPUTimeNS: int64(s.Limits.CPUTime), Pids: s.Limits.Pids, OpenFiles: s.Limits.OpenFiles},
		Isolation: wireIsolation{Workspace: s.Isolation.Workspace, Network: s.Isolation.Network, Profile: s.Isolation.Profile},
		Label:     s.Label,
	}
	if s.Terminal != nil {
		w.Terminal = &wireTerminal{Rows: s.Terminal.Rows, Cols: s.Terminal.Cols, Term: s.Terminal.Term}
	}
	return w, nil
}

// spec converts back; an unknown enum name is ErrInvalidSpec. The result
// is validated by the backend, as any spec.
func (w wireSpec) spec() (sandbox.ProcessSpec, error) {
	s := sandbox.ProcessSpec{
		Argv: w.Argv, Path: w.Path, Cwd: w.Cwd, Env: w.Env,
		Stdin:  sandbox.StdinSpec{Data: w.Stdin.Data},
		Output: sandbox.OutputSpec{RingBytes: w.Output.RingBytes, SpillBytes: w.Output.SpillBytes, SpillDir: w.Output.SpillDir, Rate: sandbox.OutputRate{BytesPerSec: w.Output.RateBytes, Burst: w.Output.RateBurst}},
		Grace:  time.Duration(w.GraceNS), Drain: time.Duration(w.DrainNS),
		Limits:    sandbox.Limits{MemoryBytes: w.Limits.MemoryBytes, CPUTime: time.Duration(w.Limits.CPUTimeNS), Pids: w.Limits.Pids, OpenFiles: w.Limits.OpenFiles},
		Isolation: sandbox.IsolationSpec{Workspace: w.Isolation.Workspace, Network: w.Isolation.Network, Profile: w.Isolation.Profile},
		Label:     w.Label,
	}
	var ok bool
	if s.Stdin.Mode, ok = lookup(stdinModes, w.Stdin.Mode); !ok {
		return s, fmt.Errorf("stdin.mode %q: %w", w.Stdin.Mode, sandbox.ErrInvalidSpec)
	}
	if s.Output.Overflow, ok = lookup(overflows, w.Output.Overflow); !ok {
		return s, fmt.Errorf("output.overflow %q: %w", w.Output.Overflow, sandbox.ErrInvalidSpec)
	}
	if w.Terminal != nil {
		s.Terminal = &sandbox.TerminalSpec{Rows: w.Terminal.Rows, Cols: w.Terminal.Cols, Term: w.Terminal.Term}
	}
	return s, nil
}

func lookup[K comparable](m map[K]string, name string) (K, bool) {
	for k, v := range m {
		if v == name {
			return k, true
		}
	}
	var zero K
	return zero, false
}
