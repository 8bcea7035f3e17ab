package witsrc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ModulePath is the Go module path of abi-tests.
const ModulePath = "github.com/capsule-host/capsule-host/abi-tests"

// Binding is one world generated with wit-bindgen-go.
type Binding struct {
	World string // WIT world name (capsule:guest@1.0.0's, or process@1.2.0's capsule-terminal)
	Dir   string // output directory, relative to the abi-tests module root
}

// Bindings are the wit-bindgen-go outputs committed under
// testdata/bindings. They are test data, not code the suite links: they
// serve as a static third-party oracle (see README.md, "Known gap"), and
// testdata keeps them out of ./... (go vet flags generated struct tags).
var Bindings = []Binding{
	{World: "capsule", Dir: "testdata/bindings/full"},
	{World: "capsule-ephemeral", Dir: "testdata/bindings/ephemeral"},
	{World: "capsule-terminal", Dir: "testdata/bindings/terminal"},
}

// Generate runs the pinned wit-bindgen-go (a tool dependency of the
// abi-tests module, run with `go tool`) for every Binding, writing below
// outRoot (which stands for the abi-tests module root; pass the module root
// itself to regenerate the committed code). modRoot is the abi-tests module
// root, where `go tool` resolves the pinned version.
func Generate(modRoot, outRoot string) error {
	witDir, err := WITDir(modRoot)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "abi-tests-wit-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := Assemble(witDir, tmp); err != nil {
		return err
	}
	for _, b := range Bindings {
		out := filepath.Join(outRoot, filepath.FromSlash(b.Dir))
		if err := os.RemoveAll(out); err != nil {
			return err
		}
		cmd := exec.Command("go", "tool", "wit-bindgen-go", "generate",
			"--world", b.World,
			"--out", out,
			"--package-root", ModulePath+"/"+b.Dir,
			tmp)
		cmd.Dir = modRoot
		cmd.Env = append(os.Environ(), "GOWORK=off")
		var stderr bytes.Buffer
		cmd.Stdout = &stderr
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("wit-bindgen-go generate --world %s: %w\n%s", b.World, err, stderr.String())
		}
	}
	return nil
}
