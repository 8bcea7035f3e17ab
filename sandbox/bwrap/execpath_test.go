package bwrap

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The file the exec check resolved (spec.Path) is what bwrap runs when
// argv[0] is a link in the workspace, the one place a guest can swap it;
// a system path keeps its invoked name; a workspace link under another
// name is refused (bwrap 0.8 cannot set argv[0]).
func TestProgramRunsCheckedFile(t *testing.T) {
	e := newEnv(t)
	link := filepath.Join(e.workspace, "true")
	if err := os.Symlink("/bin/bash", link); err != nil { // swapped after the check
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		argv0, exe string
		want       string // the program bwrap runs; "" = refused
	}{
		{"no path", "/bin/sh", "", "/bin/sh"},
		{"same", "/usr/bin/true", "/usr/bin/true", "/usr/bin/true"},
		{"system link keeps its name", "/bin/sh", "/usr/bin/dash", "/bin/sh"},
		{"workspace link runs the checked file", link, "/usr/bin/true", "/usr/bin/true"},
		{"workspace link under another name", filepath.Join(e.workspace, "sh"), "/usr/bin/dash", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := e.spec("")
			sp.Argv, sp.Path = []string{tc.argv0, "-c", "echo PWNED"}, tc.exe
			args, err := e.b.Args(sp)
			if tc.want == "" {
				if !errors.Is(err, sandbox.ErrInvalidSpec) {
					t.Fatalf("Args: %v, want ErrInvalidSpec", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			i := slices.Index(args, "--")
			if i < 0 || args[i+1] != tc.want || !slices.Equal(args[i+2:], []string{"-c", "echo PWNED"}) {
				t.Fatalf("program %q, want %q", args[i+1:], tc.want)
			}
		})
	}
	sp := e.spec("")
	sp.Argv, sp.Path = []string{link, "-c", "echo PWNED"}, "/usr/bin/true"
	stdout, _, ex := run(t, e, sp)
	if stdout != "" || ex.Code != 0 {
		t.Fatalf("ran %q with exit %+v: the link's target, not the checked file", stdout, ex)
	}
}
