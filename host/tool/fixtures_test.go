package tool_test

import (
	"testing"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

// The committed .wasm fixtures are what their .wat sources build to.
func TestFixturesUpToDate(t *testing.T) { testutil.CheckWATFixtures(t, "testdata/*.wat") }
