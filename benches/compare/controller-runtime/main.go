// A leader-elected controller-runtime controller of ConfigMaps for
// `cargo xtask failover-table`: prints "first <unix ms>" at its first
// reconcile. Lease timings: client-go's defaults (15 s, 10 s, 2 s). With
// -warmup, controller-runtime's EnableWarmup (0.22+): the controller's
// sources start and sync before the lease is won.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func nowMs() int64 { return time.Now().UnixMilli() }

type reconciler struct{ once sync.Once }

func (r *reconciler) Reconcile(_ context.Context, _ reconcile.Request) (reconcile.Result, error) {
	r.once.Do(func() { fmt.Printf("first %d\n", nowMs()) })
	return reconcile.Result{}, nil
}

func main() {
	// -kubeconfig: controller-runtime registers it (pkg/client/config)
	ns := flag.String("namespace", "", "namespace of the ConfigMaps and the Lease")
	lease := flag.String("lease", "failover", "the Lease's name")
	warmup := flag.Bool("warmup", false, "EnableWarmup: sources started before the lease is won")
	flag.Parse()
	cfg := ctrl.GetConfigOrDie()
	leaseDuration, renewDeadline, retryPeriod := 15*time.Second, 10*time.Second, 2*time.Second
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionID:        *lease,
		LeaderElectionNamespace: *ns,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retryPeriod,
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{*ns: {}}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{EnableWarmup: ptr.To(*warmup)}).
		Complete(&reconciler{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
