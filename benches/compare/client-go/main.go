// Command client-go-bench is the client-go side of `cargo xtask bench-compare`:
// a SharedIndexInformer for Pods over the replay server named by $KUBECONFIG
// (scenarios ingest, memory, relist), or client-go's workqueue (scenario
// workqueue). It prints one JSON line of results on stdout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// The name of the Pod the replay server adds after the last event.
const endMarker = "bench-end-marker"

type result struct {
	Client        string  `json:"client"`
	Events        uint64  `json:"events"`
	Secs          float64 `json:"secs"`
	EventsPerSec  float64 `json:"events_per_sec"`
	PeakRssKB     uint64  `json:"peak_rss_kb"`
	SteadyRssKB   uint64  `json:"steady_rss_kb"`
	BaselineRssKB uint64  `json:"baseline_rss_kb"`
	Cached        int     `json:"cached"`
}

// status reads a field (VmHWM, VmRSS) of /proc/self/status in KiB.
func status(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line[len(field)+1:])
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

func main() {
	scenario := flag.String("scenario", "ingest", "ingest | workqueue")
	strip := flag.Bool("strip-managed-fields", false, "transform: drop metadata.managedFields")
	settleMs := flag.Int("settle-ms", 1000, "milliseconds to wait before reading the steady-state RSS")
	keys := flag.Int("keys", 1000000, "workqueue: number of keys")
	workers := flag.Int("workers", 1, "workqueue: number of workers")
	flag.Parse()
	var r result
	switch *scenario {
	case "workqueue":
		r = runWorkqueue(*keys, *workers)
	default:
		r = runInformer(*strip, time.Duration(*settleMs)*time.Millisecond)
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func runInformer(strip bool, settle time.Duration) result {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(2)
	}
	cfg.ContentType = "application/json"
	cfg.AcceptContentTypes = "application/json"
	cfg.QPS = -1
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientset:", err)
		os.Exit(2)
	}
	runtime.GC()
	baseline := status("VmRSS")

	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().Pods().Informer()
	if strip {
		_ = inf.SetTransform(func(obj interface{}) (interface{}, error) {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(nil)
			}
			return obj, nil
		})
	}
	var events atomic.Uint64
	done := make(chan struct{})
	var once sync.Once
	count := func(obj interface{}) {
		events.Add(1)
		if p, ok := obj.(*corev1.Pod); ok && p.Name == endMarker {
			once.Do(func() { close(done) })
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    count,
		UpdateFunc: func(_, obj interface{}) { count(obj) },
		DeleteFunc: func(obj interface{}) { events.Add(1) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	go inf.Run(ctx.Done())
	<-done
	secs := time.Since(start).Seconds()
	n := events.Load()
	peak := status("VmHWM")
	time.Sleep(settle)
	runtime.GC()
	debug.FreeOSMemory()
	steady := status("VmRSS")
	return result{
		Client: "client-go", Events: n, Secs: secs, EventsPerSec: float64(n) / secs,
		PeakRssKB: peak, SteadyRssKB: steady, BaselineRssKB: baseline,
		Cached: len(inf.GetStore().ListKeys()),
	}
}

func runWorkqueue(keys, workers int) result {
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("team-%d/web-%08d", i%50, i)
	}
	// What a controller builds: the rate-limiting queue with the default
	// controller rate limiter; a worker forgets a key it processed.
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	start := time.Now()
	var wg sync.WaitGroup
	var processed atomic.Uint64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Forget(k)
				q.Done(k)
				if processed.Add(1) == uint64(keys) {
					q.ShutDown()
				}
			}
		}()
	}
	for _, k := range names {
		q.Add(k)
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	return result{
		Client: "client-go", Events: uint64(keys), Secs: secs, EventsPerSec: float64(keys) / secs,
		PeakRssKB: status("VmHWM"), SteadyRssKB: status("VmRSS"),
	}
}
