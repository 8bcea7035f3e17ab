package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// spec.Path, the file the exec check resolved, is what runs, directly
// and through the exec helper (a limit needs it); argv[0], a link that
// now reaches /bin/bash, is only the name. A Path that stopped being its
// own real file since the check fails closed.
func TestExecPathRunsCheckedFile(t *testing.T) { eachHelper(t, testExecPathRunsCheckedFile) }

func testExecPathRunsCheckedFile(t *testing.T) {
	b := newBackend(t, local.Options{})
	dir := t.TempDir()
	link := filepath.Join(dir, "true")
	if err := os.Symlink("/bin/bash", link); err != nil {
		t.Fatal(err)
	}
	for _, openFiles := range []int{0, 64} { // 64: through the helper
		sp := baseSpec(t, "")
		sp.Argv, sp.Path = []string{link, "-c", "echo PWNED"}, "/usr/bin/true"
		sp.Limits.OpenFiles = openFiles
		h, err := b.Start(bg(t), sp)
		if err != nil {
			t.Fatalf("Start (open files %d): %v", openFiles, err)
		}
		ex, err := h.Wait(bg(t))
		out, _ := h.Stdout().ReadFrom(0, 1<<10)
		b.Cleanup(bg(t), h.Ref())
		if err != nil || ex.Code != 0 || len(out.Data) != 0 {
			t.Errorf("open files %d: exit %+v %v, output %q: not the checked file", openFiles, ex, err, out.Data)
		}
	}
	sp := baseSpec(t, "")
	sp.Argv, sp.Path = []string{link}, link // a link is not a resolved file
	if _, err := b.Start(bg(t), sp); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("Start with a Path that resolves elsewhere: %v, want ErrInvalidSpec", err)
	}
}
