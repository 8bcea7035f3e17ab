//go:build wasmtime && !leanclient

package main

import (
	"strings"
	"testing"
)

// In the -tags wasmtime build, `version` lists wasmtime among the engines
// compiled in (issue 7: the operator can see what the binary offers).
func TestVersionListsWasmtime(t *testing.T) {
	out, errOut, code := runCLI(t, "", "version", "--json")
	if code != exitOK || !strings.Contains(out, `"wasmtime"`) || !strings.Contains(out, `"wazero"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
