//go:build wasmtime

package wasmtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	wt "github.com/bytecodealliance/wasmtime-go/v25"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wasmtime"
)

// TestNonNumericExportRefused: the raw call only passes numeric values,
// so an export with a reference or v128 parameter or result is refused
// with an error naming the type, before anything runs, and the
// instance's numeric exports still work.
func TestNonNumericExportRefused(t *testing.T) {
	wasm, err := wt.Wat2Wasm(`(module
	  (func (export "takes_ref") (param externref))
	  (func (export "gives_ref") (result funcref) (ref.null func))
	  (func (export "takes_v128") (param v128))
	  (func (export "mix") (param i64 f64) (result i32 f32) (i32.const -1) (f32.const 1)))`)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eng, err := wasmtime.New(ctx, engine.EngineConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	mod, err := eng.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	in, err := mod.Instantiate(ctx, engine.InstanceConfig{Name: "refs"})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)
	for _, tc := range []struct {
		export, want string
		params       []uint64
	}{
		{"takes_ref", "parameter: type externref is not supported", []uint64{1}},
		{"gives_ref", "result: type funcref is not supported", nil},
		{"takes_v128", "parameter: type v128 is not supported", []uint64{1}},
	} {
		_, err := in.Call(ctx, tc.export, tc.params...)
		var tr *engine.Trap
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &tr) {
			t.Errorf("%s: err = %v, want a non-trap error containing %q", tc.export, err, tc.want)
		}
	}
	// Several results, each in the seam's encoding: i32 and f32 in the
	// low 32 bits, zero above.
	r, err := in.Call(ctx, "mix", 1<<40, 0x4000000000000000)
	if err != nil || len(r) != 2 || r[0] != 0xffffffff || r[1] != 0x3f800000 {
		t.Fatalf("mix = %#x, %v; want [0xffffffff 0x3f800000]", r, err)
	}
}
