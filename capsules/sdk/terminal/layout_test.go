package terminal

import (
	"slices"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
)

// TestLayouts pins the 1.2.0 layouts to the values derived by hand from
// the Canonical ABI (host/process/wit_test.go derives the same ones for
// the host's descriptors; abi-tests checks both against the WIT).
func TestLayouts(t *testing.T) {
	tests := []struct {
		name        string
		t           abi.Type
		size, align uint32
		offs        []uint32
	}{
		{"terminal-spec", lTerminalSpec, 16, 4, []uint32{0, 2, 4}},
		{"persist-options", lPersistOptions, 144, 8, []uint32{0, 12, 13, 16, 24, 40, 56, 72, 120}},
		{"(spawn-request, persist-options)", lSpawnParams, 208, 8, []uint32{0, 64}},
		{"key", lKey, 12, 4, nil},
		{"screen-snapshot", lSnapshot, 56, 8, []uint32{0, 2, 4, 12, 14, 16, 17, 20, 28, 29, 30, 32, 40, 48}},
		{"wait-for-result", lWaitResult, 12, 4, []uint32{0, 4}},
		{"process-info", lInfo, 184, 8, []uint32{0, 8, 16, 24, 32, 36, 56, 64, 72, 80, 88, 96, 104, 120, 136, 152, 160, 176}},
	}
	for _, tc := range tests {
		if tc.t.Size != tc.size || tc.t.Align != tc.align || (tc.offs != nil && !slices.Equal(tc.t.Offs, tc.offs)) {
			t.Errorf("%s: size %d align %d offs %v, want %d %d %v", tc.name, tc.t.Size, tc.t.Align, tc.t.Offs, tc.size, tc.align, tc.offs)
		}
	}
	if len(lSpawnParams.Flat) <= abi.MaxFlatParams {
		t.Errorf("spawn-persistent params flatten to %d values: they would not go through a pointer", len(lSpawnParams.Flat))
	}
}
