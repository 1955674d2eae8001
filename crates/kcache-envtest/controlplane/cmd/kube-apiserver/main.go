// Command kube-apiserver is the upstream Kubernetes API server, built from the
// k8s.io/kubernetes module pinned in ../../go.mod.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"

	"github.com/kcache/kcache/xtask/controlplane/internal/parentwatch"
)

func main() {
	parentwatch.Start()
	command := app.NewAPIServerCommand()
	os.Exit(cli.Run(command))
}
