//go:build linux && !amd64

package procfs

import "syscall"

// isSelect: architectures after amd64 have only pselect6.
func isSelect(nr int) bool { return nr == syscall.SYS_PSELECT6 }
