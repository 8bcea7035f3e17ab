package wazero_test

import (
	"context"
	"testing"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
)

// The engine conformance suite runs on wazero in every build as
// enginetest's TestWazeroConformance, and on both engines side by side in
// host/engine/wasmtime (tag wasmtime).

// BenchmarkExportCall is the engine's floor for a host→guest export call.
func BenchmarkExportCall(b *testing.B) {
	f := enginetest.NewFixture(b, wazero.New, engine.EngineConfig{})
	ctx := context.Background()
	for b.Loop() {
		if _, err := f.Inst.Call(ctx, "add", 1, 2); err != nil {
			b.Fatal(err)
		}
	}
}

// Compile the Go conformance capsule with and without the on-disk cache,
// and instantiate it (+ _initialize).
//
//	go test -run '^$' -bench 'Compile|Instantiate' ./host/engine/wazero/

func BenchmarkCompile(b *testing.B) {
	wasm, stubs := enginetest.GoGuest(b, wazero.New)
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			eng, err := wazero.New(ctx, engine.EngineConfig{}, stubs)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := eng.Compile(ctx, wasm); err != nil {
				b.Fatal(err)
			}
			eng.Close(ctx)
		}
	})
	dir := b.TempDir()
	prime, err := wazero.New(ctx, engine.EngineConfig{CacheDir: dir}, stubs)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := prime.Compile(ctx, wasm); err != nil {
		b.Fatal(err)
	}
	prime.Close(ctx)
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			eng, err := wazero.New(ctx, engine.EngineConfig{CacheDir: dir}, stubs)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := eng.Compile(ctx, wasm); err != nil {
				b.Fatal(err)
			}
			eng.Close(ctx)
		}
	})
}

func BenchmarkInstantiate(b *testing.B) {
	wasm, stubs := enginetest.GoGuest(b, wazero.New)
	ctx := context.Background()
	eng, err := wazero.New(ctx, engine.EngineConfig{}, stubs)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	mod, err := eng.Compile(ctx, wasm)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		in, err := mod.Instantiate(ctx, engine.InstanceConfig{Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		in.Close(ctx)
	}
}
