package enginetest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestPureGoBuildHasNoWasmtime: without the build tag, the daemon's
// dependency graph must not mention wasmtime at all, so CGO_ENABLED=0
// builds work and nobody links a 73 MB static library by accident.
func TestPureGoBuildHasNoWasmtime(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		t.Skipf("SKIPPED LOUDLY: no go tool at %s to list dependencies: %v", gobin, err)
	}
	cmd := exec.Command(gobin, "list", "-deps", "../../../cmd/capsule-host")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "wasmtime") {
			t.Fatalf("the pure-Go build of cmd/capsule-host depends on %s", line)
		}
	}
}
