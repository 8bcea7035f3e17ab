//go:build !leanclient

package main

import (
	"io/fs"

	"github.com/capsule-host/capsule-host/capsules"
)

// bundledFS holds the capsules compiled into the binary (capsules/embed.go).
var bundledFS fs.FS = capsules.Bundled
