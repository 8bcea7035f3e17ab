package host

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/capsule-host/capsule-host/host/engine"
)

// The preview1 table the validator accepts is exactly what the default
// engine links: same names, same core signatures.
func TestWASITableMatchesWazero(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	m, err := wasi_snapshot_preview1.Instantiate(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defs := m.(api.Module).ExportedFunctionDefinitions()
	conv := func(vs []api.ValueType) []engine.ValueType {
		out := make([]engine.ValueType, len(vs))
		for i, v := range vs {
			out[i] = engine.ValueType(v)
		}
		return out
	}
	for name, d := range defs {
		want, ok := wasiPreview1[name]
		if !ok {
			t.Errorf("wazero links %s, the validator refuses it", name)
			continue
		}
		if got := sig(conv(d.ParamTypes()), conv(d.ResultTypes())); got != want {
			t.Errorf("%s: wazero %s, table %s", name, got, want)
		}
	}
	for name := range wasiPreview1 {
		if _, ok := defs[name]; !ok {
			t.Errorf("the validator accepts %s, wazero does not link it", name)
		}
	}
}

func TestVersionMatches(t *testing.T) {
	tests := []struct {
		declared, actual string
		want             bool
	}{
		{"1.1", "1.1.0", true},
		{"1.1", "1.1.7", true},
		{"1.1", "1.0.0", true},
		{"1.0", "1.1.0", false},
		{"1.1", "2.0.0", false},
		{"2.0", "1.9.0", false},
		{"1.1.0", "1.1.0", true},
		{"1.1.0", "1.1.1", false},
		{"1.1.0", "1.0.5", true},
		{"x", "1.0.0", false},
	}
	for _, tc := range tests {
		if got := versionMatches(tc.declared, tc.actual); got != tc.want {
			t.Errorf("versionMatches(%q, %q) = %v", tc.declared, tc.actual, got)
		}
	}
}
