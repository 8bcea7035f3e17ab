package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/capsule-host/capsule-host/host/component/componenttest"
)

// formEnv selects the form the suite loads the Go capsules in:
// CAPSULE_E2E_FORM=component runs it against every bundled Go capsule
// made a WebAssembly component the way a user would
// (componenttest.WrapGo: internal/goadapt's cabi_realloc_adapter, then
// jco's componentEmbed + componentNew with the preview1 reactor adapter,
// for the world of the contract version its manifest imports; `make
// e2e-component`). Unset, the committed core modules load.
const formEnv = "CAPSULE_E2E_FORM"

// componentWorlds are the WIT worlds the component form wraps for.
var componentWorlds = map[string]string{
	"testcap":   "capsule:guest/capsule",
	"testcap10": "capsule:guest/capsule-ephemeral",
	"testcap12": "capsule:process/capsule-terminal@1.2.0",
	"shell":     "capsule:process/capsule-terminal@1.2.0",
	"mcp-stdio": "capsule:guest/capsule",
}

var (
	moduleLine = regexp.MustCompile(`(?m)^module\s*=\s*"([^"]*)"`)
	shaLine    = regexp.MustCompile(`(?m)^sha256\s*=\s*"[0-9a-f]*"`)
)

// capsuleDir is the directory the suite loads capsule name from: its
// committed one, or in the component form a copy whose manifest names
// and pins the component instead of the core module.
func capsuleDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(capsulesDir(t), name)
	world, ok := componentWorlds[name]
	if os.Getenv(formEnv) != "component" || !ok {
		return dir
	}
	manifest, err := os.ReadFile(filepath.Join(dir, "Capsule.toml"))
	if err != nil {
		t.Fatal(err)
	}
	m := moduleLine.FindSubmatch(manifest)
	if m == nil {
		t.Fatalf("%s/Capsule.toml has no module", name)
	}
	comp, err := os.ReadFile(componenttest.WrapGo(t, filepath.Join(dir, string(m[1])), world))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(comp)
	manifest = moduleLine.ReplaceAll(manifest, []byte(`module = "`+name+`.component.wasm"`))
	manifest = shaLine.ReplaceAll(manifest, []byte(`sha256 = "`+hex.EncodeToString(sum[:])+`"`))
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, name+".component.wasm"), comp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "Capsule.toml"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// skipMixedVersions skips a check of testcap's 1.0.0 tools in the
// component form. testcap imports capsule:process/host@1.0.0 and 1.1.0;
// the world it is wrapped for (capsule:guest/capsule) imports only
// 1.1.0, and wit-component matches the core module's 1.0.0 imports to
// 1.1.0 by semver, lowering them with 1.1.0's types, whose layouts
// differ (1.0.0's process-result, its handle resource). testcap10, the
// 1.0.0-only capsule, covers 1.0.0 as a component.
func skipMixedVersions(t *testing.T, capsule string) bool {
	if os.Getenv(formEnv) == "component" && capsule == "testcap" {
		t.Logf("component form: testcap's 1.0.0 tools are not checked (wit-component lowers them with 1.1.0's types; testcap10 covers 1.0.0)")
		return true
	}
	return false
}
