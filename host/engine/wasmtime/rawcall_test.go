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

// TestMemoryAfterGuestGrows: the host sees guest memory as it is after
// the guest grew it, between calls and inside a host function whose
// cabi_realloc grows it (an engine that caches the memory's bytes must
// drop them whenever guest code has run).
func TestMemoryAfterGuestGrows(t *testing.T) {
	wasm, err := wt.Wat2Wasm(`(module
	  (import "t" "realloc_then_write" (func $rw))
	  (memory (export "memory") 1)
	  ;; cabi_realloc grows by one page and returns that page.
	  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
	    (i32.mul (memory.grow (i32.const 1)) (i32.const 65536)))
	  (func (export "run") (call $rw))
	  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
	  (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))`)
	if err != nil {
		t.Fatal(err)
	}
	hf := engine.HostFunc{Module: "t", Name: "realloc_then_write", Fn: func(ctx context.Context, c engine.Caller, s []uint64) {
		m := c.Memory()
		if got := m.Size(); got != 65536 {
			engine.Trapf("size before realloc %d", got)
		}
		p, err := c.Realloc(ctx, 0, 0, 1, 1)
		if err != nil || p != 65536 {
			engine.Trapf("realloc = %d, %v", p, err)
		}
		if got := m.Size(); got != 2*65536 {
			engine.Trapf("size after realloc %d", got)
		}
		if !m.Write(p+65535, []byte{7}) {
			engine.Trapf("write to the grown page failed")
		}
	}}
	ctx := context.Background()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			eng, err := e.ctor(ctx, engine.EngineConfig{}, []engine.HostFunc{hf})
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close(ctx)
			mod, err := eng.Compile(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			in, err := mod.Instantiate(ctx, engine.InstanceConfig{Name: "grow"})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close(ctx)
			if _, err := in.Call(ctx, "run"); err != nil {
				t.Fatal(err)
			}
			m := in.Memory()
			if got := m.Size(); got != 2*65536 {
				t.Fatalf("size after run %d", got)
			}
			if _, err := in.Call(ctx, "grow", 1); err != nil {
				t.Fatal(err)
			}
			if got := m.Size(); got != 3*65536 {
				t.Fatalf("size after grow %d", got)
			}
			if !m.Write(3*65536-1, []byte{9}) {
				t.Fatal("write to the last byte failed")
			}
			for addr, want := range map[uint64]uint64{2*65536 - 1: 7, 3*65536 - 1: 9} {
				if r, err := in.Call(ctx, "load", addr); err != nil || r[0] != want {
					t.Fatalf("load %d = %v, %v; want %d", addr, r, err, want)
				}
			}
		})
	}
}
