//go:build !capsule_v11only

package main

import "github.com/capsule-host/capsule-host/capsules/internal/testtools"

func registerV10() { testtools.RegisterV10() }
