package host

import (
	"context"
	"slices"

	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/internal/wasip2"
	"github.com/capsule-host/capsule-host/host/process"
	"github.com/capsule-host/capsule-host/host/tool"
	"github.com/capsule-host/capsule-host/registry"
)

// The ABI layer (host/process, host/tool) is used through these helpers
// only, so the Host's use of it is visible in one place.

// ToolSpec is one tool a capsule describes (name, description, JSON
// Schema of the input).
type ToolSpec = tool.Spec

func hostFuncs(reg *registry.Registry) []engine.HostFunc { return process.HostFuncs(reg) }

func servedModules() []string { return process.Served() }

// witSignatures are the WIT function types a component's imports of
// capsule:process are checked against at load.
func witSignatures() component.WIT { return process.Signatures() }

// componentFuncs are what a component instance's imports are lowered
// onto: the same capsule:process functions core modules import, and
// WASI 0.2 with this instance's stdout and stderr.
func (h *Host) componentFuncs(cfg engine.InstanceConfig) []engine.HostFunc {
	return append(slices.Clip(h.funcs), wasip2.Funcs(wasip2.Config{Stdout: cfg.Stdout, Stderr: cfg.Stderr})...)
}

func describeTools(ctx context.Context, inst engine.Instance) ([]ToolSpec, error) {
	return tool.Describe(ctx, inst)
}

func callTool(ctx context.Context, inst engine.Instance, name, input string) (string, *string, error) {
	return tool.Call(ctx, inst, name, input)
}

// ComponentImport is one interface a component imports: the host's
// version that serves it, or why none does (Err).
type ComponentImport struct {
	Name      string
	Served    string
	Functions int // functions its import type declares
	Err       error
}

// ComponentImports reads a component binary the way Load does before
// compiling it: each imported interface resolved against what the host
// serves components (capsule:process and WASI 0.2, semver-compatibly),
// then the WIT-level check of the capsule:process imports, whose
// refusal (a *component.WITMismatch or *component.Error) is the error.
func ComponentImports(wasm []byte) ([]ComponentImport, error) {
	c, err := component.Parse(wasm)
	if err != nil {
		return nil, err
	}
	served := append(process.Served(), wasip2.Modules()...)
	var out []ComponentImport
	for _, im := range c.Imports {
		if im.Sort != component.SortInstance {
			continue
		}
		ci := ComponentImport{Name: im.Name}
		ci.Served, ci.Err = component.Resolve(im.Name, served)
		if int(im.Type) < len(c.TypeSpace) {
			for _, ex := range c.TypeSpace[im.Type].Exports {
				if ex.Sort == component.SortFunc {
					ci.Functions++
				}
			}
		}
		out = append(out, ci)
	}
	return out, component.CheckWIT(c, served, witSignatures())
}
