// Command goadapt adds cabi_realloc_adapter to a Go (gc) wasip1 capsule
// built with capsules/sdk, so that jco's componentNew with the
// wasi_snapshot_preview1 reactor adapter makes a component that runs
// (see package internal/goadapt):
//
//	go run ./internal/goadapt/cmd/goadapt IN.wasm OUT.wasm
package main

import (
	"fmt"
	"os"

	"github.com/capsule-host/capsule-host/internal/goadapt"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: goadapt IN.wasm OUT.wasm")
		os.Exit(2)
	}
	in, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, a, err := goadapt.Inject(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[2], out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s exported, arena [%#x, +%#x)\n", os.Args[2], goadapt.ExportName, a.Base, a.Size)
}
