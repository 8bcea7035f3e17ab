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
		ci.Served, ci.Err = component.Resolve(im.Name, im.Offset, served)
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

// ComponentExport is one item a component exports: a function, or an
// interface with the functions it holds (nil when the binary does not
// say statically, e.g. an instance aliased from another instance).
type ComponentExport struct {
	Name      string
	Sort      string // "func" or "instance"
	Functions []string
	// Called is whether the host calls it: the capsule:guest tool
	// interface (describe, call); other exports are ignored.
	Called bool
}

// ComponentExports lists a component binary's exported functions and
// interfaces, read from the binary without compiling it (validate's
// view of the component's world, beside ComponentImports).
func ComponentExports(wasm []byte) ([]ComponentExport, error) {
	c, err := component.Parse(wasm)
	if err != nil {
		return nil, err
	}
	var out []ComponentExport
	for _, ex := range c.Exports {
		ce := ComponentExport{Name: ex.Name, Sort: ex.Sort.String(), Called: ex.Name == tool.Interface}
		switch ex.Sort {
		case component.SortFunc:
			ce.Functions = []string{ex.Name}
		case component.SortInstance:
			ce.Functions = instanceFuncs(c, ex.Index)
		default:
			continue // types: nothing to call
		}
		out = append(out, ce)
	}
	return out, nil
}

// instanceFuncs are the function names of c's instance idx: from its
// type when known, else from what defined it (inline exports, or the
// exports of the nested component it instantiates, as wit-component's
// export shim does).
func instanceFuncs(c *component.Component, idx uint32) []string {
	var names []string
	if int(idx) < len(c.InstanceTypes) && c.InstanceTypes[idx] != nil && c.InstanceTypes[idx].Kind == component.TInstance {
		for _, ex := range c.InstanceTypes[idx].Exports {
			if ex.Sort == component.SortFunc {
				names = append(names, ex.Name)
			}
		}
		return names
	}
	defs := c.Defs[component.SortInstance]
	if int(idx) >= len(defs) || defs[idx].Kind != component.DefInstance {
		return nil
	}
	in := c.Instances[defs[idx].Index]
	refs := in.Exports
	if in.Component >= 0 {
		cdefs := c.Defs[component.SortComponent]
		if int(in.Component) >= len(cdefs) || cdefs[in.Component].Kind != component.DefComponent {
			return nil
		}
		refs = nil
		for _, e := range c.Components[cdefs[in.Component].Index].Exports {
			refs = append(refs, component.Ref{Name: e.Name, Sort: e.Sort})
		}
	}
	for _, r := range refs {
		if r.Sort == component.SortFunc {
			names = append(names, r.Name)
		}
	}
	return names
}
