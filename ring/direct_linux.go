package ring

import (
	"os"

	"golang.org/x/sys/unix"
)

// OpenDirect opens an existing file for direct writes (O_WRONLY|O_DIRECT|
// O_CLOEXEC); see DirectOpener.
func (osFS) OpenDirect(name string) (File, error) {
	return os.OpenFile(name, os.O_WRONLY|unix.O_DIRECT, 0)
}
