package enginetest_test

import (
	"testing"

	"github.com/capsule-host/capsule-host/host/engine/enginetest"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
)

// The default engine passes the suite in every build; the wasmtime
// package runs it on both engines side by side under -tags wasmtime.
func TestWazeroConformance(t *testing.T) { enginetest.Run(t, wazero.New) }
