//go:build linux

package procfs

import "syscall"

// isSelect: amd64 has select and pselect6.
func isSelect(nr int) bool { return nr == syscall.SYS_SELECT || nr == syscall.SYS_PSELECT6 }
