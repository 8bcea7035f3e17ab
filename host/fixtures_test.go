package host_test

import (
	"testing"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

// The committed .wasm fixtures are what their .wat sources build to.
func TestWATFixturesUpToDate(t *testing.T) {
	testutil.CheckWATFixtures(t, "testdata/*/*.wat", "engine/enginetest/testdata/*.wat")
}
