// Command etcd is the upstream etcd server, built from the etcd server module
// at the version in the pinned Kubernetes release's module graph.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"

	"github.com/kcache/kcache/xtask/controlplane/internal/parentwatch"
)

func main() {
	parentwatch.Start()
	etcdmain.Main(os.Args)
}
