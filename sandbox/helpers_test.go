package sandbox

import (
	"io"
	"os"
	"syscall"
)

func syscall_ENOSPC() error { return syscall.ENOSPC }

func ioReadFull(f *os.File, b []byte) (int, error) { return io.ReadFull(f, b) }
