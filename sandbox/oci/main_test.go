package oci

import (
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

// TestMain lets this test binary become the backends' helpers (the local
// exec helper, the OCI monitor) when they re-execute it.
func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }
