//go:build !leanclient

package main

import (
	"os"
	"testing"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

// TestMain lets the backends re-execute this test binary as their helpers.
func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }
