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

// componentTags are the build tags of the capsules whose committed core
// module mixes versions of a function whose types differ (as it tests the
// host serving both), which a component cannot carry: the component form
// builds them with these tags, one version of each function.
var componentTags = map[string][]string{
	"testcap":   componenttest.TestcapTags, // no 1.0.0 tools
	"testcap12": {"capsule_v12only"},       // the 1.1.0 tools through 1.2.0's status, list, spawn-persistent
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
	core := filepath.Join(dir, string(m[1]))
	if tags, ok := componentTags[name]; ok {
		core = componenttest.BuildGo(t, "capsules/"+name, tags...) // see skipMixedVersions
	}
	comp, err := os.ReadFile(componenttest.WrapGo(t, core, world))
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

// skipMixedVersions skips a check of a mixed-version call in the
// component form. The committed testcap imports capsule:process/host@1.0.0
// and 1.1.0, testcap12 1.1.0's and 1.2.0's status (and list-processes,
// status-many, spawn-persistent); wit-component merges the older imports
// into the world's version, whose types differ (error-code's cases,
// process-info's and persist-options' fields), and the host refuses the
// result (component.VersionMismatch; TestMixedVersionComponentRefused).
// The component form builds them with componentTags: testcap without its
// 1.0.0 tools (testcap10 covers 1.0.0 as a component), testcap12's 1.1.0
// tools through 1.2.0's functions.
func skipMixedVersions(t *testing.T, capsule string) bool {
	if os.Getenv(formEnv) == "component" && componentTags[capsule] != nil {
		t.Logf("component form: %s is built with -tags %v, one version of each function (a component cannot carry two); this check needs both", capsule, componentTags[capsule])
		return true
	}
	return false
}
