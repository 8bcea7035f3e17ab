//go:build capsule_v12only

package main

import (
	"github.com/capsule-host/capsule-host/capsules/internal/testtools"
	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/capsules/sdk/terminal"
)

// tier11 is package terminal's 1.2.0 spawn-persistent, list-processes,
// status and status-many: one version of each function, so that the
// capsule can be a component.
func tier11() testtools.Tier11 {
	return testtools.Tier11{
		SpawnPersistent: terminal.SpawnPersistent,
		ListProcesses:   func(l *string) (any, error) { return terminal.ListProcesses(l) },
		Status:          func(id process.ID) (any, error) { return terminal.Status(id) },
		StatusMany:      func(ids []process.ID) (any, error) { return terminal.StatusMany(ids) },
	}
}
