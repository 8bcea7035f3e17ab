package wazero

import "golang.org/x/sys/unix"

// reserve maps n bytes of zeroed, private memory with no swap reserved:
// untouched pages cost address space only.
func reserve(n uint64) ([]byte, error) {
	if n == 0 || n > 1<<40 {
		return nil, unix.EINVAL
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err == nil {
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	}
	return b, err
}

// release unmaps a reservation. wazero frees a memory only once no call
// runs in its instance (a call that times out closes the module without
// its resources, and the resources go when the call returns).
func release(b []byte) { _ = unix.Munmap(b) }
