//go:build !linux

package wazero

import "errors"

// reserve is unavailable here: memories are Go slices.
func reserve(uint64) ([]byte, error) { return nil, errors.ErrUnsupported }

func release([]byte) {}
