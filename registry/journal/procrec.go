package journal

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// procV1 is a process record on disk, schema version 1. Times are Unix
// nanoseconds (0: none), durations nanoseconds: plain integers, no time
// zone or monotonic reading to round-trip.
type procV1 struct {
	V                   int      `json:"v"`
	Capsule             string   `json:"capsule"`
	Principal           string   `json:"principal"`
	Fallback            bool     `json:"fallback"`
	Label               string   `json:"label"`
	Command             string   `json:"command"`
	Args                []string `json:"args"`
	Backend             string   `json:"backend"`
	BackendID           string   `json:"backend_id"`
	Lifetime            string   `json:"lifetime"`
	MemoryBytes         int64    `json:"mem_bytes"`
	CPUTimeNS           int64    `json:"cpu_ns"`
	Pids                int      `json:"pids"`
	OpenFiles           int      `json:"open_files"`
	Stdin               string   `json:"stdin"`
	Overflow            string   `json:"overflow"`
	RingBytes           int      `json:"ring_bytes"`
	Drain               [2]int64 `json:"drain"`
	StartedNS           int64    `json:"started_ns"`
	LifetimeDeadlineNS  int64    `json:"lifetime_deadline_ns"`
	IdleTimeoutNS       int64    `json:"idle_timeout_ns"`
	IdleDeadlineNS      int64    `json:"idle_deadline_ns"`
	ExitRetentionNS     int64    `json:"exit_retention_ns"`
	RetentionDeadlineNS int64    `json:"retention_deadline_ns"`
	Exit                *exitV1  `json:"exit"`
	Reason              string   `json:"reason"`
	SealedID            []byte   `json:"sealed_id"`
	// Terminal is omitted for a pipe process, so the records of pipe
	// processes are byte for byte those of builds before terminals.
	Terminal *termV1 `json:"terminal,omitempty"`
}

type termV1 struct {
	Rows    uint16     `json:"rows"`
	Cols    uint16     `json:"cols"`
	Term    string     `json:"term"`
	Resizes []resizeV1 `json:"resizes,omitempty"`
}

type resizeV1 struct {
	At   int64  `json:"at"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

type exitV1 struct {
	Code      *int32 `json:"code"`
	Signal    *int32 `json:"signal"`
	KilledFor string `json:"killed_for"`
	AtNS      int64  `json:"at_ns"`
}

// EncodeProcess is the stored value of p (its key is p.Key). It refuses,
// with ErrInvalid, a record that DecodeProcess would not read back.
func EncodeProcess(p Process) ([]byte, error) {
	if err := validateProcess(p); err != nil {
		return nil, invalid(ErrInvalid, err)
	}
	v, err := seal(p.Key[:], toProcV1(p))
	return v, invalid(ErrInvalid, err)
}

// DecodeProcess decodes a stored process record strictly (see codec.go).
// Errors wrap ErrChecksum, ErrUnknownVersion or ErrMalformed.
func DecodeProcess(key, val []byte) (Process, error) {
	if len(key) != len(Key{}) {
		return Process{}, fmt.Errorf("%w: key is %d bytes, want %d", ErrMalformed, len(key), len(Key{}))
	}
	body, v, err := unseal(key, val)
	if err != nil {
		return Process{}, err
	}
	if v != procVersion {
		return Process{}, versionErr(v, procVersion)
	}
	var w procV1
	if err := strictJSON(body, &w); err != nil {
		return Process{}, err
	}
	p := fromProcV1(w)
	copy(p.Key[:], key)
	if err := validateProcess(p); err != nil {
		return Process{}, invalid(ErrMalformed, err)
	}
	if err := canonical(key, val, func() ([]byte, error) { return seal(key, toProcV1(p)) }); err != nil {
		return Process{}, err
	}
	return p, nil
}

func toProcV1(p Process) procV1 {
	w := procV1{
		V: procVersion, Capsule: p.Owner.Capsule, Principal: p.Owner.Principal, Fallback: p.Owner.Fallback,
		Label: p.Label, Command: p.Command, Args: p.Args,
		Backend: p.Backend.Name, BackendID: p.Backend.ID, Lifetime: string(p.Backend.Lifetime),
		MemoryBytes: p.Limits.MemoryBytes, CPUTimeNS: int64(p.Limits.CPUTime), Pids: p.Limits.Pids, OpenFiles: p.Limits.OpenFiles,
		Stdin: string(p.Stdin), Overflow: string(p.Overflow), RingBytes: p.RingBytes, Drain: p.Drain,
		StartedNS: unixNS(p.Started), LifetimeDeadlineNS: unixNS(p.LifetimeDeadline),
		IdleTimeoutNS: int64(p.IdleTimeout), IdleDeadlineNS: unixNS(p.IdleDeadline),
		ExitRetentionNS: int64(p.ExitRetention), RetentionDeadlineNS: unixNS(p.RetentionDeadline),
		Reason: string(p.Reason), SealedID: p.SealedID,
	}
	if len(w.SealedID) == 0 {
		w.SealedID = nil // one spelling of "none": null
	}
	if len(w.Args) == 0 {
		w.Args = nil // one spelling of "no arguments": null
	}
	if e := p.Exit; e != nil {
		w.Exit = &exitV1{Code: e.Code, Signal: e.Signal, KilledFor: e.KilledFor, AtNS: unixNS(e.At)}
	}
	if t := p.Terminal; t != nil {
		w.Terminal = &termV1{Rows: t.Rows, Cols: t.Cols, Term: t.Term}
		for _, z := range t.Resizes {
			w.Terminal.Resizes = append(w.Terminal.Resizes, resizeV1(z))
		}
	}
	return w
}

func fromProcV1(w procV1) Process {
	p := Process{
		Owner: Owner{Capsule: w.Capsule, Principal: w.Principal, Fallback: w.Fallback},
		Label: w.Label, Command: w.Command, Args: w.Args,
		Backend: BackendRef{Name: w.Backend, ID: w.BackendID, Lifetime: Lifetime(w.Lifetime)},
		Limits:  Limits{MemoryBytes: w.MemoryBytes, CPUTime: time.Duration(w.CPUTimeNS), Pids: w.Pids, OpenFiles: w.OpenFiles},
		Stdin:   StdinMode(w.Stdin), Overflow: Overflow(w.Overflow), RingBytes: w.RingBytes, Drain: w.Drain,
		Started: fromNS(w.StartedNS), LifetimeDeadline: fromNS(w.LifetimeDeadlineNS),
		IdleTimeout: time.Duration(w.IdleTimeoutNS), IdleDeadline: fromNS(w.IdleDeadlineNS),
		ExitRetention: time.Duration(w.ExitRetentionNS), RetentionDeadline: fromNS(w.RetentionDeadlineNS),
		Reason: Reason(w.Reason), SealedID: w.SealedID,
	}
	if e := w.Exit; e != nil {
		p.Exit = &Exit{Code: e.Code, Signal: e.Signal, KilledFor: e.KilledFor, At: fromNS(e.AtNS)}
	}
	if t := w.Terminal; t != nil {
		p.Terminal = &Terminal{Rows: t.Rows, Cols: t.Cols, Term: t.Term}
		for _, z := range t.Resizes {
			p.Terminal.Resizes = append(p.Terminal.Resizes, Resize(z))
		}
	}
	return p
}

// minTime and maxTime bound what Unix nanoseconds in an int64 can hold
// (0 is reserved for "none").
var minTime, maxTime = time.Unix(0, 1), time.Unix(0, 1<<63-1)

// unixNS is t in Unix nanoseconds, 0 for the zero time. validTime has
// refused what does not fit.
func unixNS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// maxSealedID bounds Process.SealedID (a sealed 52-character ID is 92
// bytes).
const maxSealedID = 256

// validateProcess is what a record must satisfy to be written or read.
func validateProcess(p Process) error {
	if err := validOwner(p.Owner); err != nil {
		return err
	}
	for _, f := range [...]struct{ name, s string }{{"label", p.Label}, {"command", p.Command}, {"backend id", p.Backend.ID}, {"killed-for", exitKilledFor(p.Exit)}} {
		if err := validString(f.name, f.s, 0); err != nil {
			return err
		}
	}
	if err := validString("backend", p.Backend.Name, 1); err != nil {
		return err
	}
	if t := p.Terminal; t != nil {
		if err := validString("terminal term", t.Term, 1); err != nil {
			return err
		}
	}
	if len(p.SealedID) > maxSealedID {
		return fmt.Errorf("sealed id is %d bytes (max %d)", len(p.SealedID), maxSealedID)
	}
	if len(p.Args) > 1<<16 {
		return fmt.Errorf("%d arguments (max %d)", len(p.Args), 1<<16)
	}
	for i, a := range p.Args {
		if err := validString(fmt.Sprintf("argument %d", i), a, 0); err != nil {
			return err
		}
	}
	if err := validEnums(p); err != nil {
		return err
	}
	if err := validNumbers(p); err != nil {
		return err
	}
	return validTimes(p)
}

func exitKilledFor(e *Exit) string {
	if e == nil {
		return ""
	}
	return e.KilledFor
}

// maxString bounds every string field (the registry's own limits are far
// lower; this only keeps a damaged record from being absurd).
const maxString = 64 << 10

func validString(name, s string, minLen int) error {
	switch {
	case len(s) < minLen:
		return fmt.Errorf("%s is empty", name)
	case len(s) > maxString:
		return fmt.Errorf("%s is %d bytes (max %d)", name, len(s), maxString)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", name)
	}
	return nil
}

func validEnums(p Process) error {
	switch p.Backend.Lifetime {
	case LifetimeHandle, LifetimeBackend:
	default:
		return fmt.Errorf("backend lifetime %q is not handle or backend", p.Backend.Lifetime)
	}
	switch p.Stdin {
	case StdinClosed, StdinBytes, StdinOpen:
	default:
		return fmt.Errorf("stdin mode %q is not closed, bytes or open", p.Stdin)
	}
	switch p.Overflow {
	case DropOldest, Backpressure:
	default:
		return fmt.Errorf("overflow %q is not drop-oldest or backpressure", p.Overflow)
	}
	switch p.Reason {
	case ReasonNone, ReasonSelfExit, ReasonStopped, ReasonKilled, ReasonLifetime, ReasonIdle, ReasonEvicted, ReasonRemoved:
	default:
		return fmt.Errorf("reason %q is unknown", p.Reason)
	}
	return nil
}

func validNumbers(p Process) error {
	l := p.Limits
	if l.MemoryBytes < 0 || l.CPUTime < 0 || l.Pids < 0 || l.OpenFiles < 0 {
		return fmt.Errorf("negative limit in %+v", l)
	}
	if p.RingBytes < 0 || p.Drain[0] < 0 || p.Drain[1] < 0 {
		return fmt.Errorf("negative ring size or drain offset (%d, %v)", p.RingBytes, p.Drain)
	}
	if p.IdleTimeout < 0 || p.ExitRetention < 0 {
		return fmt.Errorf("negative idle timeout or exit retention (%v, %v)", p.IdleTimeout, p.ExitRetention)
	}
	if e := p.Exit; e != nil && e.Code != nil && e.Signal != nil {
		return fmt.Errorf("exit has both a code (%d) and a signal (%d)", *e.Code, *e.Signal)
	}
	if t := p.Terminal; t != nil {
		return validTerminal(t)
	}
	return nil
}

// validTerminal: sizes in 1..1000, a TERM, at most MaxResizes resizes
// at non-decreasing offsets.
func validTerminal(t *Terminal) error {
	bad := func(r, c uint16) bool { return r < 1 || r > 1000 || c < 1 || c > 1000 }
	if bad(t.Rows, t.Cols) || t.Term == "" {
		return fmt.Errorf("terminal %dx%d term %q: size not in 1..1000 or no TERM", t.Rows, t.Cols, t.Term)
	}
	if len(t.Resizes) > MaxResizes {
		return fmt.Errorf("terminal: %d resizes (max %d)", len(t.Resizes), MaxResizes)
	}
	last := int64(0)
	for i, z := range t.Resizes {
		if bad(z.Rows, z.Cols) || z.At < last {
			return fmt.Errorf("terminal resize %d (%dx%d at %d): size not in 1..1000 or offset before the previous one", i, z.Rows, z.Cols, z.At)
		}
		last = z.At
	}
	return nil
}

func validTimes(p Process) error {
	if p.Started.IsZero() {
		return fmt.Errorf("start time is missing")
	}
	type named struct {
		name string
		t    time.Time
	}
	times := []named{{"start", p.Started}, {"lifetime deadline", p.LifetimeDeadline}, {"idle deadline", p.IdleDeadline}, {"retention deadline", p.RetentionDeadline}}
	if p.Exit != nil {
		if p.Exit.At.IsZero() {
			return fmt.Errorf("exit time is missing")
		}
		times = append(times, named{"exit", p.Exit.At})
	}
	for _, n := range times {
		if err := validTime(n.name, n.t); err != nil {
			return err
		}
	}
	return nil
}

// validTime refuses times Unix nanoseconds cannot carry (before 1970 or
// after 2262); the zero time means "none" and passes.
func validTime(name string, t time.Time) error {
	if !t.IsZero() && (t.Before(minTime) || t.After(maxTime)) {
		return fmt.Errorf("%s %v is outside 1970..2262", name, t)
	}
	return nil
}
