package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

func bareRegistry(t *testing.T) *Registry {
	t.Helper()
	r, err := New(Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown(t.Context()) })
	return r
}

func TestIDFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id, err := newRawID()
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != idLen {
			t.Fatalf("len %d", len(id))
		}
		if strings.Trim(id, "abcdefghijklmnopqrstuvwxyz234567") != "" {
			t.Fatalf("alphabet: %q", id)
		}
		if seen[id] {
			t.Fatal("duplicate ID")
		}
		seen[id] = true
	}
}

func TestKeyedHashIsPerRegistry(t *testing.T) {
	a, b := bareRegistry(t), bareRegistry(t)
	id, _ := newRawID()
	if a.keyOf(id) == b.keyOf(id) {
		t.Fatal("two registries hash an ID alike: the key is not per registry")
	}
	if a.keyOf(id) != a.keyOf(id) {
		t.Fatal("hash not deterministic")
	}
	if len(a.keyOf(id).short()) != 12 {
		t.Fatal("short hash length")
	}
}

func TestPrincipalGrammar(t *testing.T) {
	for _, tc := range []struct {
		p  string
		ok bool
	}{
		{"alice", true},
		{"alice@example.com", true},
		{"user:42", true},
		{"a.b_c-d", true},
		{"A", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{"-flag", false},
		{"a/b", false},
		{"a b", false},
		{"a\x00b", false},
		{"é", false},
	} {
		err := ValidPrincipal(tc.p)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err=%v, want ok=%v", tc.p, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%q: class %v", tc.p, err)
		}
	}
}

func TestCursorTokens(t *testing.T) {
	r := bareRegistry(t)
	k1, k2 := r.keyOf("one"), r.keyOf("two")
	tok := r.encodeCursor(k1, Stdout, 12345)
	if off, ok := r.decodeCursor(k1, Stdout, tok); !ok || off != 12345 {
		t.Fatalf("roundtrip: %d %v", off, ok)
	}
	if strings.Trim(tok, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		t.Fatalf("token alphabet: %q", tok)
	}
	other := bareRegistry(t)
	flip := []byte(tok)
	if flip[5] == 'a' {
		flip[5] = 'b'
	} else {
		flip[5] = 'a'
	}
	for name, c := range map[string]struct {
		k   procKey
		s   Stream
		tok string
	}{
		"foreign process":  {k2, Stdout, tok},
		"other stream":     {k1, Stderr, tok},
		"other registry":   {k1, Stdout, other.encodeCursor(k1, Stdout, 12345)},
		"altered":          {k1, Stdout, string(flip)},
		"empty":            {k1, Stdout, ""},
		"garbage":          {k1, Stdout, "not a cursor"},
		"uppercase":        {k1, Stdout, strings.ToUpper(tok)},
		"truncated":        {k1, Stdout, tok[:len(tok)-1]},
		"extended":         {k1, Stdout, tok + "a"},
		"forged offset":    {k1, Stdout, forgeOffset(tok, 99999)},
		"hex of an offset": {k1, Stdout, "0000000000003039"},
	} {
		if _, ok := r.decodeCursor(c.k, c.s, c.tok); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}

// forgeOffset rewrites the offset field of a token, keeping its MAC.
func forgeOffset(tok string, off uint64) string {
	raw, err := idEncoding.DecodeString(tok)
	if err != nil {
		return tok
	}
	for i := range 8 {
		raw[2+i] = byte(off >> (56 - 8*i))
	}
	return idEncoding.EncodeToString(raw)
}

func TestQuotasOnlyLower(t *testing.T) {
	r := bareRegistry(t)
	q := r.quotasFor(&CapsulePolicy{Quotas: Quotas{MaxConcurrent: 2, MaxRetained: 1000, MaxEntries: 0}})
	if q != (Quotas{MaxConcurrent: 2, MaxRetained: 32, MaxEntries: 256}) {
		t.Fatalf("got %+v", q)
	}
}

func TestConfigDefaultsAndCeilings(t *testing.T) {
	c := Config{Defaults: Defaults{ExitRetention: 5 * time.Hour, LogRingBytes: 1, StopGrace: time.Hour}}.withDefaults()
	d := c.Defaults
	if d.ExitRetention != time.Hour || d.LogRingBytes != minRingBytes || d.StopGrace != d.StopGraceCap || d.WaitCap != time.Minute {
		t.Fatalf("%+v", d)
	}
}

func TestEffectiveLimitsOnlyTighten(t *testing.T) {
	u64 := func(v uint64) *uint64 { return &v }
	u32 := func(v uint32) *uint32 { return &v }
	dur := func(v time.Duration) *time.Duration { return &v }
	capsule := sandbox.Limits{MemoryBytes: 1 << 30, Pids: 64}
	for _, tc := range []struct {
		name string
		g    Limits
		want sandbox.Limits
		err  bool
	}{
		{"none", Limits{}, capsule, false},
		{"tighter", Limits{MaxMemoryBytes: u64(1 << 20), MaxPids: u32(8)}, sandbox.Limits{MemoryBytes: 1 << 20, Pids: 8}, false},
		{"looser clamped", Limits{MaxMemoryBytes: u64(1 << 40), MaxPids: u32(1000)}, capsule, false},
		{"new limit", Limits{MaxOpenFiles: u32(16), MaxCPU: dur(time.Second)}, sandbox.Limits{MemoryBytes: 1 << 30, Pids: 64, OpenFiles: 16, CPUTime: time.Second}, false},
		{"zero invalid", Limits{MaxPids: u32(0)}, sandbox.Limits{}, true},
	} {
		got, err := effectiveLimits(capsule, tc.g)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("%s: got %+v, %v", tc.name, got, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: class %v", tc.name, err)
		}
	}
}

func TestResolveExecExactNeverPrefix(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "tool2"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink(tool, filepath.Join(dir, "alias"))
	os.Symlink(filepath.Join(dir, "tool2"), filepath.Join(dir, "evil"))
	dir2 := t.TempDir()
	os.Symlink(tool, filepath.Join(dir2, "tool"))
	res, _ := filepath.EvalSymlinks(tool)
	missing := filepath.Join(dir, "missing")
	allowed := map[string]bool{rootExecKey(res, tool): true}
	literal := map[string]bool{tool: true, missing: true}
	for _, tc := range []struct {
		cmd, path string
		want      error
	}{
		{tool, "", nil},
		{filepath.Join(dir2, "tool"), "", nil},                 // same-name symlink to an allowed binary
		{filepath.Join(dir, "alias"), "", ErrCapabilityDenied}, // renamed: a multi-call binary would run another applet
		{"tool", dir, nil},                                     // PATH lookup
		{filepath.Join(dir, "tool2"), "", ErrCapabilityDenied},
		{filepath.Join(dir, "evil"), "", ErrCapabilityDenied},
		{dir, "", ErrCapabilityDenied},                      // prefix of the allowed path
		{filepath.Join(dir, "to"), "", ErrCapabilityDenied}, // string prefix
		{"./tool", dir, ErrCapabilityDenied},                // relative
		{"tool", "relative/dir", ErrCapabilityDenied},       // relative PATH entries skipped
		{"/nonexistent/x", "", ErrCapabilityDenied},         // no probing of the host FS
		{missing, "", ErrInvalidInput},                      // allowed but not installed
	} {
		got, file, err := resolveExec(tc.cmd, tc.path, allowed, literal)
		if tc.want == nil {
			// argv[0] is the path as invoked (a multi-call binary reads it);
			// the file is what was checked, the allowed binary itself.
			want := tc.cmd
			if !filepath.IsAbs(want) {
				want = filepath.Join(tc.path, tc.cmd)
			}
			if err != nil || got != want || file != res {
				t.Errorf("%q: got %q (file %q), %v; want file %q", tc.cmd, got, file, err, res)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%q: got %v, want %v", tc.cmd, err, tc.want)
		}
	}
}

func TestLabels(t *testing.T) {
	for l, ok := range map[string]bool{"dev server": true, "": true, "a\tb": false, "a\nb": false, strings.Repeat("x", 129): false, "\xff": false, "naïve": true} {
		if err := validLabel(l); (err == nil) != ok {
			t.Errorf("%q: %v", l, err)
		}
	}
	if got := deriveLabel("/usr/bin/python3"); got != "python3" {
		t.Errorf("derive: %q", got)
	}
	if got := deriveLabel(strings.Repeat("é", 100)); len(got) > maxLabelBytes || validLabel(got) != nil {
		t.Errorf("derive long: %d bytes", len(got))
	}
}

func TestMissingCallerIsTypedNotPanic(t *testing.T) {
	r := bareRegistry(t)
	ctx := t.Context()
	if _, err := r.Status(ctx, "x"); !errors.Is(err, ErrInternal) {
		t.Fatalf("status: %v", err)
	}
	if _, err := r.SpawnPersistent(ctx, SpawnRequest{Cmd: "/bin/true"}, PersistOptions{}); !errors.Is(err, ErrInternal) {
		t.Fatalf("spawn: %v", err)
	}
	if _, err := r.PollEvents(ctx, 0, 1, 0); !errors.Is(err, ErrInternal) {
		t.Fatalf("poll: %v", err)
	}
	// A nil ctx is a host bug: a typed error, never a panic.
	if _, err := r.Status(nil, "x"); !errors.Is(err, ErrInternal) {
		t.Fatalf("nil ctx: %v", err)
	}
	bad := WithCaller(ctx, Caller{Capsule: "c", Principal: "../etc"})
	if _, err := r.List(bad, nil); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("bad principal: %v", err)
	}
}

func TestMapSandboxErr(t *testing.T) {
	for _, tc := range []struct {
		in   error
		want error
	}{
		{sandbox.ErrBoundaryEscape, ErrBoundaryEscape},
		{&sandbox.SpawnError{Argv0: "x", Cause: os.ErrNotExist}, ErrInvalidInput},
		{&sandbox.SpawnError{Argv0: "x", Cause: os.ErrPermission}, ErrInvalidInput},
		{sandbox.ErrUnavailable, ErrUnavailable},
		{sandbox.ErrLimitsUnsupported, ErrUnavailable},
		{sandbox.ErrInvalidEnv, ErrInvalidInput},
		{sandbox.ErrInvalidSpec, ErrInvalidInput},
		{sandbox.ErrClosed, ErrClosed},
		{errors.New("weird"), ErrInternal},
	} {
		if got := mapSandboxErr("op", tc.in); !errors.Is(got, tc.want) {
			t.Errorf("%v → %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzDecodeCursor: no input panics, and nothing the registry did not
// issue is accepted.
func FuzzDecodeCursor(f *testing.F) {
	r, err := New(Config{StateDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	defer r.Shutdown(f.Context())
	k := r.keyOf("fuzz")
	f.Add(r.encodeCursor(k, Stdout, 0))
	f.Add(r.encodeCursor(k, Stdout, 1<<40))
	f.Add("")
	f.Add("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Fuzz(func(t *testing.T, tok string) {
		off, ok := r.decodeCursor(k, Stdout, tok)
		if ok && r.encodeCursor(k, Stdout, off) != tok {
			t.Fatalf("accepted a token it did not issue: %q", tok)
		}
	})
}

// The capture rate: the default bounds every stream, a negative host rate
// turns it off, and a capsule's rate only lowers the host's.
func TestOutputRatePolicy(t *testing.T) {
	def := DefaultConfig().Defaults.OutputRate
	if def.BytesPerSec != 4<<20 || def.Burst != 16<<20 {
		t.Fatalf("default %+v", def)
	}
	for _, tc := range []struct {
		name    string
		host    sandbox.OutputRate
		capsule int64
		want    sandbox.OutputRate
	}{
		{"default", sandbox.OutputRate{}, 0, def},
		{"host rate keeps the default burst", sandbox.OutputRate{BytesPerSec: 1 << 20}, 0, sandbox.OutputRate{BytesPerSec: 1 << 20, Burst: 16 << 20}},
		{"capsule lowers", sandbox.OutputRate{}, 1 << 10, sandbox.OutputRate{BytesPerSec: 1 << 10, Burst: 16 << 20}},
		{"capsule cannot raise", sandbox.OutputRate{}, 1 << 30, def},
		{"host off", sandbox.OutputRate{BytesPerSec: -1}, 0, sandbox.OutputRate{}},
		{"host off, capsule sets one", sandbox.OutputRate{BytesPerSec: -1}, 1 << 10, sandbox.OutputRate{BytesPerSec: 1 << 10}},
	} {
		cfg := Config{Defaults: Defaults{OutputRate: tc.host}}.withDefaults()
		r := &Registry{cfg: cfg}
		if got := r.outputSpec(tc.capsule).Rate; got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
