//go:build wasmtime

package wasmtime_test

import (
	"testing"

	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/host/engine/wasmtime"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
)

// TestConformance runs the same suite on both engines in one binary, so a
// divergence shows up as one engine's subtest failing.
func TestConformance(t *testing.T) {
	t.Run("wazero", func(t *testing.T) { enginetest.Run(t, wazero.New) })
	t.Run("wasmtime", func(t *testing.T) { enginetest.Run(t, wasmtime.New) })
}
