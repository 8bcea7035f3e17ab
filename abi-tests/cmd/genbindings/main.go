// Command genbindings regenerates the committed wit-bindgen-go bindings of
// the third-party guest (testdata/bindings/...) from the repository's wit/.
// Run it with `go generate ./...` from abi-tests/; TestBindingsReproducible
// fails when the committed code differs from a fresh run.
package main

import (
	"fmt"
	"os"

	"github.com/capsule-host/capsule-host/abi-tests/internal/witsrc"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	if err := witsrc.Generate(root, root); err != nil {
		fmt.Fprintln(os.Stderr, "genbindings:", err)
		os.Exit(1)
	}
}
