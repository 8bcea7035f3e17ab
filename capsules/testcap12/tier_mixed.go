//go:build !capsule_v12only

package main

import "github.com/capsule-host/capsule-host/capsules/internal/testtools"

// tier11 is package process's: the 1.1.0 tools call 1.1.0's functions,
// so the end-to-end suite sees a 1.2.0 process through 1.1.0 (status
// without the terminal fields). Such a core module mixes versions, which
// a component cannot (tier_v12only.go is the form the component tests
// wrap).
func tier11() testtools.Tier11 { return testtools.Process11() }
