// Package parentwatch makes a control-plane process exit when the process that
// started it dies, so that a test binary that exits (or panics, or is killed)
// never leaves kube-apiserver or etcd behind. It is enabled by the
// KCACHE_PARENT_PID environment variable, set by kcache-envtest; processes
// started detached by `cargo xtask controlplane start` do not set it.
package parentwatch

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Start begins watching the parent named by KCACHE_PARENT_PID, if set.
func Start() {
	want, err := strconv.Atoi(os.Getenv("KCACHE_PARENT_PID"))
	if err != nil || want <= 0 {
		return
	}
	go func() {
		for {
			if os.Getppid() != want {
				fmt.Fprintf(os.Stderr, "kcache: parent process %d is gone, exiting\n", want)
				os.Exit(2)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
}
