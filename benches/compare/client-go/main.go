// Command client-go-bench is the client-go side of `cargo xtask bench-compare`:
// a SharedIndexInformer for Pods over the replay server named by $KUBECONFIG
// (scenarios ingest, memory, relist), or client-go's workqueue (scenario
// workqueue). It prints one JSON line of results on stdout.
//
// Scenario sync runs against the real apiserver and speaks the line protocol
// of benches/compare/src/real.rs (phases synced, updated, done).
//
// Scenario encode-protobuf reads Pods as JSON lines on stdin and writes each
// as its protobuf message (k8s.io/api's generated Marshal, the code the
// apiserver serves with), preceded by its 4-byte big-endian length: the
// replay server's protobuf bodies.
//
// The informer's clientset is client-go's default for built-in types
// (-content-type=protobuf: it asks for application/vnd.kubernetes.protobuf
// with JSON as the fallback); -content-type=json forces JSON.
//
// With -resource=applications scenario sync runs client-go's dynamic
// informer (dynamicinformer, unstructured objects) on the custom resource
// apps.kcache.dev/v1 applications: -content-type=json is the dynamic
// client's default, -content-type=cbor turns on the ClientsAllowCBOR and
// ClientsPreferCBOR feature gates (KEP-4222), so it asks for
// application/cbor with JSON as the fallback.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	contentType := flag.String("content-type", "protobuf", "protobuf (client-go's default for built-in types) | json")
	mode := flag.String("mode", "paged", "sync: paged | streaming (sets the WatchListClient feature gate)")
	expect := flag.Uint64("expect", 0, "sync: Pods in the cluster")
	expectUpdates := flag.Uint64("expect-updates", 0, "sync: updates to wait for after the sync")
	watchLog := flag.String("watch-log", "", "sync: where to write 'resourceVersion unix_micros' per update seen")
	resource := flag.String("resource", "pods", "sync: pods | applications (the custom resource, by the dynamic informer)")
	flag.Parse()
	var r result
	switch *scenario {
	case "workqueue":
		r = runWorkqueue(*keys, *workers)
	case "encode-protobuf":
		encodeProtobuf()
		return
	case "sync":
		runSync(syncArgs{
			strip: *strip, settle: time.Duration(*settleMs) * time.Millisecond,
			contentType: *contentType, mode: *mode, expect: *expect,
			expectUpdates: *expectUpdates, watchLog: *watchLog, resource: *resource,
		})
		return
	default:
		r = runInformer(*strip, *contentType, time.Duration(*settleMs)*time.Millisecond)
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

// restConfig reads $KUBECONFIG. With contentType "json" every request asks
// for JSON; with "protobuf" nothing is set, which is client-go's default
// (the generated clients of built-in types prefer protobuf).
func restConfig(contentType string) *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(2)
	}
	switch contentType {
	case "json":
		cfg.ContentType = "application/json"
		cfg.AcceptContentTypes = "application/json"
	case "protobuf", "cbor":
		// cbor: the dynamic client sets its own content types from the
		// ClientsAllowCBOR / ClientsPreferCBOR gates (runSync sets them).
	default:
		fmt.Fprintln(os.Stderr, "-content-type must be protobuf, cbor or json")
		os.Exit(2)
	}
	cfg.QPS = -1
	return cfg
}

func runInformer(strip bool, contentType string, settle time.Duration) result {
	cfg := restConfig(contentType)
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

type syncArgs struct {
	strip         bool
	settle        time.Duration
	contentType   string
	mode          string
	expect        uint64
	expectUpdates uint64
	watchLog      string
	resource      string
}

// phase is one line of the protocol (see benches/compare/src/real.rs).
type phase struct {
	Phase         string   `json:"phase"`
	Client        string   `json:"client"`
	Objects       uint64   `json:"objects"`
	Secs          float64  `json:"secs"`
	CPUMicros     uint64   `json:"cpu_us"`
	PeakRssKB     uint64   `json:"peak_rss_kb"`
	RssKB         uint64   `json:"rss_kb"`
	BaselineRssKB uint64   `json:"baseline_rss_kb"`
	ReadBytes     uint64   `json:"read_bytes"`
	Cached        uint64   `json:"cached"`
	Requests      []string `json:"requests,omitempty"`
}

// cpuMicros is the process's user + system CPU time in microseconds
// (getrusage: the kernel's nanosecond run time of all threads, where
// /proc/self/stat rounds to 10 ms clock ticks).
func cpuMicros() uint64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	us := func(t syscall.Timeval) uint64 { return uint64(t.Sec)*1000000 + uint64(t.Usec) }
	return us(ru.Utime) + us(ru.Stime)
}

// readBytes is rchar of /proc/self/io.
func readBytes() uint64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "rchar:") {
			n, _ := strconv.ParseUint(strings.TrimSpace(line[6:]), 10, 64)
			return n
		}
	}
	return 0
}

// requestLog records every request's method, URL, Accept header and the
// response's Content-Type: what client-go actually asked for.
type requestLog struct {
	mu    sync.Mutex
	lines []string
	next  http.RoundTripper
}

func (l *requestLog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	ct := ""
	if resp != nil {
		ct = resp.Header.Get("Content-Type")
		// Go's transport asks for gzip by itself and decompresses
		// transparently; Uncompressed says the body came gzipped.
		if resp.Uncompressed {
			ct += " (gzip)"
		}
	}
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf("%s %s accept=%q -> %s", req.Method, req.URL.RequestURI(), req.Header.Get("Accept"), ct))
	l.mu.Unlock()
	return resp, err
}

func (l *requestLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func runSync(a syncArgs) {
	// The feature gate is read from the environment when client-go's
	// feature gates are first used: set it before anything else.
	if a.mode == "streaming" {
		os.Setenv("KUBE_FEATURE_WatchListClient", "true")
	} else {
		os.Setenv("KUBE_FEATURE_WatchListClient", "false")
	}
	if a.contentType == "cbor" {
		os.Setenv("KUBE_FEATURE_ClientsAllowCBOR", "true")
		os.Setenv("KUBE_FEATURE_ClientsPreferCBOR", "true")
	}
	cfg := restConfig(a.contentType)
	reqs := &requestLog{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { reqs.next = rt; return reqs })
	stop := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(stop)
	}()
	runtime.GC()
	baseline := status("VmRSS")
	var inf cache.SharedIndexInformer
	switch a.resource {
	case "pods":
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "clientset:", err)
			os.Exit(2)
		}
		inf = informers.NewSharedInformerFactory(cs, 0).Core().V1().Pods().Informer()
	case "applications":
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dynamic client:", err)
			os.Exit(2)
		}
		gvr := schema.GroupVersionResource{Group: "apps.kcache.dev", Version: "v1", Resource: "applications"}
		inf = dynamicinformer.NewDynamicSharedInformerFactory(dc, 0).ForResource(gvr).Informer()
	default:
		fmt.Fprintln(os.Stderr, "-resource must be pods or applications")
		os.Exit(2)
	}
	if a.strip {
		_ = inf.SetTransform(func(obj interface{}) (interface{}, error) {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(nil)
			}
			return obj, nil
		})
	}
	var adds atomic.Uint64
	var syncedFlag atomic.Bool
	synced := make(chan struct{})
	updated := make(chan struct{})
	var seenMu sync.Mutex
	var seen [][2]uint64
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if adds.Add(1) == a.expect {
				syncedFlag.Store(true)
				close(synced)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			m, err := meta.Accessor(obj)
			if err != nil {
				return
			}
			rv, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
			seenMu.Lock()
			seen = append(seen, [2]uint64{rv, uint64(time.Now().UnixMicro())})
			n := uint64(len(seen))
			seenMu.Unlock()
			if n == a.expectUpdates {
				close(updated)
			}
		},
	})
	cpu0, read0 := cpuMicros(), readBytes()
	start := time.Now()
	mk := func(name string, objects uint64) phase {
		return phase{
			Phase: name, Client: "client-go", Objects: objects, Secs: time.Since(start).Seconds(),
			CPUMicros: cpuMicros() - cpu0, PeakRssKB: status("VmHWM"), RssKB: status("VmRSS"),
			BaselineRssKB: baseline, ReadBytes: readBytes() - read0,
			Cached: uint64(len(inf.GetStore().ListKeys())), Requests: reqs.snapshot(),
		}
	}
	emit := func(p phase) {
		out, _ := json.Marshal(p)
		fmt.Println(string(out))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx.Done())
	<-synced
	emit(mk("synced", adds.Load()))
	stopped := false
	if a.expectUpdates > 0 {
		select {
		case <-updated:
			emit(mk("updated", a.expectUpdates))
		case <-stop:
			stopped = true
		}
	}
	if !stopped {
		<-stop
	}
	time.Sleep(a.settle)
	runtime.GC()
	debug.FreeOSMemory()
	seenMu.Lock()
	n := uint64(len(seen))
	log := append([][2]uint64(nil), seen...)
	seenMu.Unlock()
	emit(mk("done", n))
	if a.watchLog != "" {
		f, err := os.Create(a.watchLog)
		if err == nil {
			w := bufio.NewWriter(f)
			for _, s := range log {
				fmt.Fprintf(w, "%d %d\n", s[0], s[1])
			}
			_ = w.Flush()
			_ = f.Close()
		}
	}
}

// encodeProtobuf: see the package doc.
func encodeProtobuf() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	var lenBuf [4]byte
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var p corev1.Pod
			if jerr := json.Unmarshal(line, &p); jerr != nil {
				fmt.Fprintln(os.Stderr, "encode-protobuf: bad Pod JSON:", jerr)
				os.Exit(2)
			}
			b, merr := p.Marshal()
			if merr != nil {
				fmt.Fprintln(os.Stderr, "encode-protobuf:", merr)
				os.Exit(2)
			}
			binary.BigEndian.PutUint32(lenBuf[:], uint32(len(b)))
			_, _ = out.Write(lenBuf[:])
			_, _ = out.Write(b)
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "encode-protobuf:", err)
			os.Exit(2)
		}
	}
}
