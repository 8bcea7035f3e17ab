// Package terminal is the typed Go API over the terminal tier of
// capsule:process/host@1.2.0: a persistent process on a pseudo-terminal
// (Spawn), driven like a person at a keyboard (SendKeys, Paste, Submit),
// read as a rendered screen (Screen), resized (Resize), and waited on for
// output, silence, input-wait or exit (WaitFor, which serves pipe
// processes too). Status returns 1.2.0's process-info.
//
// It sits beside package process (1.1.0): a terminal process is a
// persistent process in every other respect, so read-since, signal, stop
// and release come from there with the same ID. The four functions whose
// types 1.2.0 changed are here in their 1.2.0 form, and a capsule using
// this package calls them here, never in package process:
// SpawnPersistent, Status, StatusMany and ListProcesses. A core module
// may mix versions; a component may not (wit-component lowers a
// module's 1.1.0 calls of them with 1.2.0's layouts, and the host refuses
// such a component at load). A capsule using this package declares
// `"capsule:process" = "1.2"` in its manifest (which covers its 1.1.0
// imports too).
package terminal

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/proccore"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/wire"
	"github.com/capsule-host/capsule-host/capsules/sdk/process"
)

// Spec is the WIT terminal-spec: the window size (1 to 1000 each) and
// TERM (nil: the host's xterm-256color).
type Spec struct {
	Rows uint16  `json:"rows"`
	Cols uint16  `json:"cols"`
	Term *string `json:"term,omitempty"`
}

// Key is one element of a send-keys list: a tmux key name (Name) or
// literal text (Text). The WIT documents every name and modifier.
type Key struct {
	Name string `json:"name,omitempty"`
	Text string `json:"text,omitempty"`
}

// Named is a tmux key name ("Enter", "C-c", "Up", "F5").
func Named(name string) Key { return Key{Name: name} }

// Text is literal text, never interpreted as key names.
func Text(s string) Key { return Key{Text: s} }

// Snapshot is the WIT screen-snapshot.
type Snapshot struct {
	Rows           uint16   `json:"rows"`
	Cols           uint16   `json:"cols"`
	Lines          []string `json:"lines"`
	CursorRow      uint16   `json:"cursor_row"`
	CursorCol      uint16   `json:"cursor_col"`
	CursorVisible  bool     `json:"cursor_visible"`
	AltScreen      bool     `json:"alt_screen"`
	Title          string   `json:"title"`
	AppCursorKeys  bool     `json:"app_cursor_keys"`
	AppKeypad      bool     `json:"app_keypad"`
	BracketedPaste bool     `json:"bracketed_paste"`
	Scrollback     []string `json:"scrollback"`
	SkippedBytes   uint64   `json:"skipped_bytes"`
	BehindBytes    uint64   `json:"behind_bytes"`
}

// Kind is a wait-condition case, and the WIT wait-fired enum.
type Kind uint8

const (
	OutputMatched Kind = iota
	Quiet
	InputWait
	Exited
)

var kindNames = [...]string{"output-matched", "quiet", "input-wait", "exited"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// MarshalText writes the WIT case name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a WIT case name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("terminal: %q is not a wait-fired case (%s)", b, strings.Join(kindNames[:], ", "))
}

// Condition is the WIT wait-condition; build one with Match, QuietFor,
// WaitInput or WaitExit.
type Condition struct {
	Kind    Kind
	Stream  process.LogStream // Match
	Cursor  *string           // Match: a read-since cursor; nil: from now
	Regex   string            // Match: RE2
	QuietMS uint64            // QuietFor
}

// Match waits for output on stream, from cursor (nil: from now), matching
// the RE2 expression re.
func Match(stream process.LogStream, cursor *string, re string) Condition {
	return Condition{Kind: OutputMatched, Stream: stream, Cursor: cursor, Regex: re}
}

// QuietFor waits for ms milliseconds with no output.
func QuietFor(ms uint64) Condition { return Condition{Kind: Quiet, QuietMS: ms} }

// WaitInput waits until the process blocks reading its input.
func WaitInput() Condition { return Condition{Kind: InputWait} }

// WaitExit waits for the exit.
func WaitExit() Condition { return Condition{Kind: Exited} }

// WaitResult is the WIT wait-for-result.
type WaitResult struct {
	Fired  Kind   `json:"fired"`
	Cursor string `json:"cursor"`
}

// Info is 1.2.0's process-info: 1.1.0's and four fields.
type Info struct {
	process.ProcessInfo
	Terminal        *TerminalInfo       `json:"terminal,omitempty"`
	WaitingForInput *bool               `json:"waiting_for_input,omitempty"`
	ReapInMS        *uint64             `json:"reap_in_ms,omitempty"`
	ReapRule        *process.ExitReason `json:"reap_rule,omitempty"`
}

// TerminalInfo is the WIT terminal-info: the PTY's size now, and TERM.
type TerminalInfo struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
	Term string `json:"term"`
}

// Layouts of the 1.2.0 types (field order as in wit/process@1.2.0).
var (
	lTerminalSpec   = abi.Record(abi.U16, abi.U16, abi.Option(abi.String))
	optTerminalSpec = abi.Option(lTerminalSpec)
	// persist-options@1.2.0: 1.1.0's fields, then terminal.
	lPersistOptions = abi.Record(append(fieldsOf11(), optTerminalSpec)...)
	lSpawnParams    = abi.Tuple(wire.LSpawnRequest, lPersistOptions)
	lKey            = abi.Variant(&abi.String, &abi.String)
	lSnapshot       = abi.Record(abi.U16, abi.U16, abi.List(), abi.U16, abi.U16, abi.Bool, abi.Bool, abi.String,
		abi.Bool, abi.Bool, abi.Bool, abi.List(), abi.U64, abi.U64)
	lWaitResult     = abi.Record(abi.Enum(4), abi.String)
	lTerminalInfo   = abi.Record(abi.U16, abi.U16, abi.String)
	optTerminalInfo = abi.Option(lTerminalInfo)
	optBool, optU64 = abi.Option(abi.Bool), abi.Option(abi.U64)
	optExitReason   = abi.Option(abi.Enum(7))
	lInfo           = abi.Record(append(infoFieldsOf11(), optTerminalInfo, optBool, optU64, optExitReason)...)
	lID             = abi.String
	lU32            = abi.U32
)

// fieldsOf11 are persist-options@1.1.0's field layouts, which 1.2.0
// keeps in front (so wire.StorePersistOptions stores them).
func fieldsOf11() []abi.Type {
	return []abi.Type{abi.Option(abi.String), abi.Bool, abi.Enum(2), abi.Option(abi.U32),
		abi.Option(abi.U64), abi.Option(abi.U64), abi.Option(abi.U64), wire.LResourceLimits}
}

// infoFieldsOf11 are process-info@1.1.0's field layouts.
func infoFieldsOf11() []abi.Type {
	return []abi.Type{abi.String, abi.String, abi.String, abi.Option(abi.U32), abi.Enum(3),
		abi.Option(wire.LExitInfo), abi.Option(abi.Enum(7)), abi.U64, abi.U64, abi.U64, abi.U64,
		abi.Bool, abi.Option(abi.U64), abi.Option(abi.U64)}
}

// v12 is 1.2.0's error-code: 1.1.0's.
var v12 = &proccore.Version{EC: wire.LErrorCode11, Cases: 14}

func getU16(b []byte, off uint32) uint16 { return binary.LittleEndian.Uint16(b[off:]) }

func putU16(b []byte, off uint32, v uint16) { binary.LittleEndian.PutUint16(b[off:], v) }

// Spawn starts a persistent process on a pseudo-terminal of spec
// (spawn-persistent@1.2.0 with persist-options.terminal set) and returns
// its ID. Its stdin is always open; its output is the stdout stream.
func Spawn(req process.SpawnRequest, opts process.PersistOptions, spec Spec) (process.ID, error) {
	return spawnPersistent(req, opts, &spec)
}

// SpawnPersistent is process.SpawnPersistent through 1.2.0's
// spawn-persistent (no terminal: pipes). A capsule of the 1.2.0 tier
// spawns through it: 1.2.0's persist-options has one field more than
// 1.1.0's, and a capsule importing both versions' spawn-persistent cannot
// be made a component (wit-component merges the two imports into 1.2.0's
// and lowers the 1.1.0 calls with 1.2.0's layout; the host refuses such
// a component at load, naming the function). Every other function is the
// same in both versions, so process's serve the same IDs.
func SpawnPersistent(req process.SpawnRequest, opts process.PersistOptions) (process.ID, error) {
	return spawnPersistent(req, opts, nil)
}

func spawnPersistent(req process.SpawnRequest, opts process.PersistOptions, spec *Spec) (process.ID, error) {
	s := &abi.Scope{}
	defer s.Free()
	pp, pb := s.Alloc(lSpawnParams.Size, lSpawnParams.Align)
	wire.StoreSpawnRequest(s, pb, lSpawnParams.Offs[0], &req)
	po := lSpawnParams.Offs[1]
	wire.StorePersistOptions(s, pb, po, &opts)
	if spec != nil {
		to := po + lPersistOptions.Offs[8]
		abi.PutU8(pb, to, 1)
		t := to + optTerminalSpec.Payload
		putU16(pb, t+lTerminalSpec.Offs[0], spec.Rows)
		putU16(pb, t+lTerminalSpec.Offs[1], spec.Cols)
		if spec.Term != nil {
			o := t + lTerminalSpec.Offs[2]
			abi.PutU8(pb, o, 1)
			s.PutStr(pb, o+abi.Option(abi.String).Payload, *spec.Term)
		}
	}
	return proccore.Call(v12, s, &lID, liftString, func(rp uint32) { impSpawnPersistent(pp, rp) })
}

func liftString(l *abi.Lifter, b []byte, off uint32) string { return l.String(b, off, "string") }

// SendKeys types keys into a terminal; it returns the bytes written.
func SendKeys(id process.ID, keys []Key) (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	kp, kb := s.Alloc(uint32(len(keys))*lKey.Size, lKey.Align)
	for i, k := range keys {
		off := uint32(i) * lKey.Size
		v := k.Name
		if k.Name == "" {
			abi.PutU8(kb, off, 1)
			v = k.Text
		}
		s.PutStr(kb, off+lKey.Payload, v)
	}
	n := uint32(len(keys))
	return proccore.Call(v12, s, &lU32, proccore.LiftU32, func(rp uint32) { impSendKeys(ip, il, kp, n, rp) })
}

// Paste pastes text (bracketed when the application enabled it).
func Paste(id process.ID, text string) (uint32, error) { return paste(id, text, impPaste) }

// Submit is Paste, then Enter outside the bracket.
func Submit(id process.ID, text string) (uint32, error) { return paste(id, text, impSubmit) }

func paste(id process.ID, text string, imp func(idP, idL, tP, tL, ret uint32)) (uint32, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	tp, tl := s.Str(text)
	return proccore.Call(v12, s, &lU32, proccore.LiftU32, func(rp uint32) { imp(ip, il, tp, tl, rp) })
}

// Resize sets the window size (the program gets SIGWINCH).
func Resize(id process.ID, rows, cols uint16) error {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Unit(v12, s, func(rp uint32) { impResize(ip, il, uint32(rows), uint32(cols), rp) })
}

// Screen returns the rendered screen with at most scrollback lines of
// scrollback.
func Screen(id process.ID, scrollback uint32) (Snapshot, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Call(v12, s, &lSnapshot, liftSnapshot, func(rp uint32) { impSnapshot(ip, il, scrollback, rp) })
}

func liftStrings(l *abi.Lifter, b []byte, off uint32, what string) []string {
	elems := l.List(b, off, abi.String, what)
	out := make([]string, 0, len(elems))
	for _, e := range elems {
		out = append(out, l.String(e, 0, what))
	}
	return out
}

func liftSnapshot(l *abi.Lifter, b []byte, off uint32) Snapshot {
	o := lSnapshot.Offs
	return Snapshot{
		Rows: getU16(b, off+o[0]), Cols: getU16(b, off+o[1]),
		Lines:     liftStrings(l, b, off+o[2], "screen-snapshot.lines"),
		CursorRow: getU16(b, off+o[3]), CursorCol: getU16(b, off+o[4]),
		CursorVisible: abi.GetBool(b, off+o[5]), AltScreen: abi.GetBool(b, off+o[6]),
		Title:         l.String(b, off+o[7], "screen-snapshot.title"),
		AppCursorKeys: abi.GetBool(b, off+o[8]), AppKeypad: abi.GetBool(b, off+o[9]),
		BracketedPaste: abi.GetBool(b, off+o[10]),
		Scrollback:     liftStrings(l, b, off+o[11], "screen-snapshot.scrollback"),
		SkippedBytes:   abi.GetU64(b, off+o[12]), BehindBytes: abi.GetU64(b, off+o[13]),
	}
}

// WaitFor blocks until cond holds or timeoutMS passes (ErrWaitTimeout;
// the host caps it like wait). A condition that can no longer hold is
// ErrClosed.
func WaitFor(id process.ID, cond Condition, timeoutMS uint64) (WaitResult, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	// wait-condition flat: disc, then the join of output-match's six i32
	// (stream, cursor option (disc, ptr, len), regex (ptr, len)) and
	// quiet-ms's i64 in the first slot.
	var f [7]uint64
	f[0] = uint64(cond.Kind)
	switch cond.Kind {
	case OutputMatched:
		f[1] = uint64(cond.Stream)
		if cond.Cursor != nil {
			p, n := s.Str(*cond.Cursor)
			f[2], f[3], f[4] = 1, uint64(p), uint64(n)
		}
		p, n := s.Str(cond.Regex)
		f[5], f[6] = uint64(p), uint64(n)
	case Quiet:
		f[1] = cond.QuietMS
	}
	return proccore.Call(v12, s, &lWaitResult, liftWaitResult, func(rp uint32) {
		impWaitFor(ip, il, uint32(f[0]), f[1], uint32(f[2]), uint32(f[3]), uint32(f[4]), uint32(f[5]), uint32(f[6]), timeoutMS, rp)
	})
}

func liftWaitResult(l *abi.Lifter, b []byte, off uint32) WaitResult {
	o := lWaitResult.Offs
	return WaitResult{
		Fired:  Kind(l.Case(b, off+o[0], 4, "wait-for-result.fired")),
		Cursor: l.String(b, off+o[1], "wait-for-result.cursor"),
	}
}

// Status is status@1.2.0: process-info with the terminal size,
// waiting-for-input and the reap deadline.
func Status(id process.ID) (Info, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Str(id)
	return proccore.Call(v12, s, &lInfo, liftInfo, func(rp uint32) { impStatus(ip, il, rp) })
}

// StatusMany is status-many@1.2.0: unknown IDs are absent.
func StatusMany(ids []process.ID) ([]Info, error) {
	s := &abi.Scope{}
	defer s.Free()
	ip, il := s.Strs(ids)
	return proccore.Call(v12, s, &lInfoList, liftInfos, func(rp uint32) { impStatusMany(ip, il, rp) })
}

// ListProcesses is list-processes@1.2.0: the caller's processes, those
// labelled labelFilter if it is not nil. A 1.2.0 capsule lists and reads
// status here, not through package process (see SpawnPersistent: 1.2.0's
// process-info has four fields more than 1.1.0's).
func ListProcesses(labelFilter *string) ([]Info, error) {
	s := &abi.Scope{}
	defer s.Free()
	d, p, n := s.OptStr(labelFilter)
	return proccore.Call(v12, s, &lInfoList, liftInfos, func(rp uint32) { impListProcesses(d, p, n, rp) })
}

var lInfoList = abi.List()

func liftInfos(l *abi.Lifter, b []byte, off uint32) []Info {
	return abi.LiftList(l, b, off, lInfo, "list<process-info>", liftInfo)
}

// liftInfo lifts 1.2.0's process-info: 1.1.0's fields, then four more,
// whose discriminants are read together as wire.LiftProcessInfo does.
func liftInfo(l *abi.Lifter, b []byte, off uint32) Info {
	o := lInfo.Offs
	in := Info{ProcessInfo: wire.LiftProcessInfo(l, b, off)}
	term, wait, reap, rule := b[off+o[14]], b[off+o[15]], b[off+o[16]], b[off+o[17]]
	if term|wait|reap|rule > 1 || rule == 1 && b[off+o[17]+optExitReason.Payload] > 6 || l.Err != nil {
		term = byte(l.Case(b, off+o[14], 2, "process-info.terminal"))
		wait = byte(l.Case(b, off+o[15], 2, "process-info.waiting-for-input"))
		reap = byte(l.Case(b, off+o[16], 2, "process-info.reap-in-ms"))
		if rule = byte(l.Case(b, off+o[17], 2, "process-info.reap-rule")); rule == 1 {
			l.Case(b, off+o[17]+optExitReason.Payload, 7, "process-info.reap-rule")
		}
		if l.Err != nil {
			return in
		}
	}
	if term == 1 {
		t := off + o[14] + optTerminalInfo.Payload
		to := lTerminalInfo.Offs
		in.Terminal = &TerminalInfo{Rows: getU16(b, t+to[0]), Cols: getU16(b, t+to[1]),
			Term: l.String(b, t+to[2], "terminal-info.term")}
	}
	if wait == 1 {
		in.WaitingForInput = abi.Box(l, abi.GetBool(b, off+o[15]+optBool.Payload))
	}
	if reap == 1 {
		in.ReapInMS = abi.Box(l, abi.GetU64(b, off+o[16]+optU64.Payload))
	}
	if rule == 1 {
		in.ReapRule = abi.Box(l, process.ExitReason(b[off+o[17]+optExitReason.Payload]))
	}
	return in
}
