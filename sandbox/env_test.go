package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

func TestBuildEnv(t *testing.T) {
	host := []string{"PATH=/usr/bin", "HOME=/root", "AWS_SECRET_ACCESS_KEY=leak", "LC_ALL=C", "LD_PRELOAD=/evil.so", "TERM=xterm", "GITHUB_TOKEN=leak", "TZ=UTC", "LANG=C.UTF-8", "SSH_AUTH_SOCK=/tmp/x"}
	got, err := BuildEnv(host, []string{"FOO=bar", "HOME=/home/x", "EMPTY="})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/usr/bin", "HOME=/home/x", "LC_ALL=C", "TERM=xterm", "TZ=UTC", "LANG=C.UTF-8", "FOO=bar", "EMPTY="}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("BuildEnv = %q\nwant %q", got, want)
	}
	for _, kv := range got {
		if strings.Contains(kv, "leak") {
			t.Fatalf("host secret leaked: %s", kv)
		}
	}
}

func TestBuildEnvRejects(t *testing.T) {
	many := make([]string, 257)
	for i := range many {
		many[i] = fmt.Sprintf("K%d=v", i)
	}
	for _, tc := range []struct {
		entries []string
		key     string
	}{
		{[]string{"LD_PRELOAD=/x.so"}, "LD_PRELOAD"},
		{[]string{"LD_LIBRARY_PATH=/x"}, "LD_LIBRARY_PATH"},
		{[]string{"DYLD_INSERT_LIBRARIES=/x"}, "DYLD_INSERT_LIBRARIES"},
		{[]string{"BASH_ENV=/x"}, "BASH_ENV"},
		{[]string{"ENV=/x"}, "ENV"},
		{[]string{"PYTHONPATH=/x"}, "PYTHONPATH"},
		{[]string{"PYTHONHOME=/x"}, "PYTHONHOME"},
		{[]string{"NODE_OPTIONS=--require=/x"}, "NODE_OPTIONS"},
		{[]string{"PERL5OPT=-M/x"}, "PERL5OPT"},
		{[]string{"RUBYOPT=-r/x"}, "RUBYOPT"},
		{[]string{"GCONV_PATH=/x"}, "GCONV_PATH"},
		{[]string{"ZDOTDIR=/x"}, "ZDOTDIR"},
		{[]string{"GLIBC_TUNABLES=glibc.malloc.check=3"}, "GLIBC_TUNABLES"},
		{[]string{"LOCPATH=/x"}, "LOCPATH"},
		{[]string{"HOSTALIASES=/x"}, "HOSTALIASES"},
		{[]string{"PATH=/workspace/bin:/usr/bin"}, "PATH"},
		{[]string{"SHELLOPTS=xtrace"}, "SHELLOPTS"},
		{[]string{"BASHOPTS=extdebug"}, "BASHOPTS"},
		{[]string{"PS4=$(touch /tmp/pwned)"}, "PS4"},
		{[]string{"PROMPT_COMMAND=id"}, "PROMPT_COMMAND"},
		{[]string{"IFS=/"}, "IFS"},
		{[]string{"CDPATH=/etc"}, "CDPATH"},
		{[]string{"GLOBIGNORE=*"}, "GLOBIGNORE"},
		{[]string{"PERL5LIB=/x"}, "PERL5LIB"},
		{[]string{"PYTHONSTARTUP=/x.py"}, "PYTHONSTARTUP"},
		{[]string{"GIT_EXEC_PATH=/x"}, "GIT_EXEC_PATH"},
		{[]string{"GIT_SSH=/x"}, "GIT_SSH"},
		{[]string{"GIT_SSH_COMMAND=/x"}, "GIT_SSH_COMMAND"},
		{[]string{"GIT_CONFIG=/x"}, "GIT_CONFIG"},
		{[]string{"GIT_CONFIG_GLOBAL=/x"}, "GIT_CONFIG_GLOBAL"},
		{[]string{"GIT_CONFIG_COUNT=1"}, "GIT_CONFIG_COUNT"},
		{[]string{"GIT_CONFIG_KEY_0=core.sshCommand"}, "GIT_CONFIG_KEY_0"},
		{[]string{"GIT_CONFIG_PARAMETERS='core.pager=id'"}, "GIT_CONFIG_PARAMETERS"},
		{[]string{"GIT_ASKPASS=/x"}, "GIT_ASKPASS"},
		{[]string{"GIT_EDITOR=/x"}, "GIT_EDITOR"},
		{[]string{"GIT_PAGER=/x"}, "GIT_PAGER"},
		{[]string{"1BAD=x"}, "1BAD"},
		{[]string{"BAD-KEY=x"}, "BAD-KEY"},
		{[]string{"=x"}, "empty"},
		{[]string{"NOEQ"}, "NOEQ"},
		{[]string{"NUL=a\x00b"}, "NUL"},
		{[]string{"BIG=" + strings.Repeat("x", 64<<10+1)}, "BIG"},
		{[]string{"DUP=1", "DUP=2"}, "DUP"},
		{many, "257 entries"},
	} {
		_, err := BuildEnv(nil, tc.entries)
		if !errors.Is(err, ErrInvalidEnv) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: %v, want ErrInvalidEnv naming it", tc.key, err)
		}
	}
	if _, err := BuildEnv(nil, []string{"BIG=" + strings.Repeat("x", 64<<10)}); err != nil {
		t.Errorf("64 KiB value refused: %v", err)
	}
	// Variables a program may legitimately take from its caller stay.
	if _, err := BuildEnv(nil, []string{"EDITOR=vi", "VISUAL=vi", "PAGER=cat", "GIT_AUTHOR_NAME=a", "PYTHONUNBUFFERED=1"}); err != nil {
		t.Errorf("ordinary variables refused: %v", err)
	}
}

// A refusal is an *EnvError naming the variable; PATH is the host's.
func TestBuildEnvRefusalNamesKey(t *testing.T) {
	for _, key := range []string{"PATH", "SHELLOPTS", "PS4", "BASH_ENV", "GIT_CONFIG_VALUE_3"} {
		_, err := BuildEnv([]string{"PATH=/usr/bin:/bin"}, []string{key + "=x"})
		var ee *EnvError
		if !errors.As(err, &ee) || ee.Key != key || !errors.Is(err, ErrInvalidEnv) {
			t.Errorf("%s: %v; want an *EnvError for %s", key, err, key)
		}
	}
	// The host's own PATH is kept: only a caller cannot set it.
	got, err := BuildEnv([]string{"PATH=/usr/bin:/bin"}, nil)
	if err != nil || !reflect.DeepEqual(got, []string{"PATH=/usr/bin:/bin"}) {
		t.Errorf("host PATH: %q %v", got, err)
	}
}

func TestConfineCwd(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "a/b"), 0o755))
	must(os.WriteFile(filepath.Join(root, "file"), nil, 0o644))
	must(os.Symlink("a/b", filepath.Join(root, "inlink")))
	must(os.Symlink(outside, filepath.Join(root, "abslink")))
	must(os.Symlink("../../..", filepath.Join(root, "a/uplink")))
	realRoot, _ := filepath.EvalSymlinks(root)
	for _, walk := range []bool{false, true} {
		confine := func(root, rel string) (string, error) { return confineCwd(root, rel, walk) }
		for _, tc := range []struct {
			rel  string
			want string
			err  error
		}{
			{"", realRoot, nil},
			{".", realRoot, nil},
			{"a/b", filepath.Join(realRoot, "a/b"), nil},
			{"a/../a/b/", filepath.Join(realRoot, "a/b"), nil},
			{"inlink", filepath.Join(realRoot, "a/b"), nil},
			{"..", "", ErrBoundaryEscape},
			{"a/../../x", "", ErrBoundaryEscape},
			{"/etc", "", ErrBoundaryEscape},
			{"abslink", "", ErrBoundaryEscape},
			{"a/uplink", "", ErrBoundaryEscape},
			{"missing", "", fs.ErrNotExist},
			{"file", "", syscall.ENOTDIR},
		} {
			got, err := confine(root, tc.rel)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Errorf("walk=%v %q: %q %v, want %v", walk, tc.rel, got, err, tc.err)
				}
				continue
			}
			if err != nil || got != tc.want {
				t.Errorf("walk=%v %q: %q %v, want %q", walk, tc.rel, got, err, tc.want)
			}
		}
	}
}

func TestSplitUTF8(t *testing.T) {
	euro := "€"          // E2 82 AC
	clef := "\U0001D11E" // F0 9D 84 9E
	for _, tc := range []struct {
		in       string
		complete string
		rest     string
	}{
		{"", "", ""},
		{"abc", "abc", ""},
		{"a" + euro, "a" + euro, ""},
		{"a" + euro[:1], "a", euro[:1]},
		{"a" + euro[:2], "a", euro[:2]},
		{clef[:3], "", clef[:3]},
		{clef, clef, ""},
		{"a\xff", "a\xff", ""},         // invalid: not held back
		{"a\xe2\x41", "a\xe2\x41", ""}, // broken sequence
		{"\xed\xa0", "\xed\xa0", ""},   // would be a surrogate: invalid
		{"\xc0", "\xc0", ""},           // overlong start: invalid
	} {
		c, r := SplitUTF8([]byte(tc.in))
		if string(c) != tc.complete || string(r) != tc.rest {
			t.Errorf("SplitUTF8(%x) = %x, %x; want %x, %x", tc.in, c, r, tc.complete, tc.rest)
		}
	}
	if n := UTF8Lead([]byte(euro[1:] + "x")); n != 2 {
		t.Errorf("UTF8Lead = %d", n)
	}
}

// FuzzSplitUTF8: any byte stream cut anywhere renders exactly as the whole.
func FuzzSplitUTF8(f *testing.F) {
	f.Add([]byte("h€llo \U0001D11E"), 3)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		if len(b) == 0 {
			return
		}
		cut = ((cut % len(b)) + len(b)) % len(b)
		c1, rest := SplitUTF8(b[:cut])
		if len(rest) > 3 {
			t.Fatalf("rest %d bytes", len(rest))
		}
		c2, rest2 := SplitUTF8(append(append([]byte(nil), rest...), b[cut:]...))
		whole := append(append([]byte(nil), c1...), c2...)
		whole = append(whole, rest2...)
		if string(whole) != string(b) {
			t.Fatalf("bytes changed")
		}
		if utf8.Valid(b) && (!utf8.Valid(c1) || !utf8.Valid(c2)) {
			t.Fatalf("valid input split mid-rune at %d: %x | %x", cut, c1, c2)
		}
	})
}

func TestValidateNamesField(t *testing.T) {
	s := ProcessSpec{Argv: []string{"/bin/true"}, Cwd: "/", Stdin: StdinSpec{Mode: StdinClosed},
		Output: OutputSpec{RingBytes: 1, Overflow: DropOldest}, Grace: 1, Drain: 1}
	if err := s.Validate(); err != nil {
		t.Fatalf("minimal spec refused: %v", err)
	}
	s.Terminal = &TerminalSpec{}
	if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) || !strings.HasPrefix(err.Error(), "terminal: not supported") {
		t.Fatalf("terminal: %v", err)
	}
	for _, tc := range []struct {
		field string
		term  TerminalSpec
		stdin StdinMode
	}{
		{"terminal.rows", TerminalSpec{Rows: 0, Cols: 80, Term: "xterm"}, StdinOpen},
		{"terminal.rows", TerminalSpec{Rows: 1001, Cols: 80, Term: "xterm"}, StdinOpen},
		{"terminal.cols", TerminalSpec{Rows: 24, Cols: 0, Term: "xterm"}, StdinOpen},
		{"terminal.term", TerminalSpec{Rows: 24, Cols: 80}, StdinOpen},
		{"terminal.term", TerminalSpec{Rows: 24, Cols: 80, Term: "a=b"}, StdinOpen},
		{"terminal: needs stdin mode open", TerminalSpec{Rows: 24, Cols: 80, Term: "xterm"}, StdinClosed},
	} {
		s.Terminal, s.Stdin.Mode = &tc.term, tc.stdin
		if err := s.ValidateTerminal(); !errors.Is(err, ErrInvalidSpec) || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%+v stdin %d: %v, want ErrInvalidSpec naming %s", tc.term, tc.stdin, err, tc.field)
		}
	}
	s.Terminal, s.Stdin.Mode = &TerminalSpec{Rows: 1000, Cols: 1, Term: "xterm-256color"}, StdinOpen
	if err := s.ValidateTerminal(); err != nil {
		t.Fatalf("valid terminal refused: %v", err)
	}
}
