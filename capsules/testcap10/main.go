// Command testcap10 targets capsule:process@1.0.0 only (world
// capsule-ephemeral): it imports nothing of 1.1.0, so it shows that a
// capsule built against the first release keeps loading.
package main

import "github.com/capsule-host/capsule-host/capsules/internal/testtools"

func init() {
	testtools.RegisterBasicsOnly()
	testtools.RegisterV10()
}

// main is empty: a reactor's tools are registered in init (_initialize).
func main() {}
