// Command controller-runtime-peer is the controller-runtime peer of the controller benchmark.
//
// It is the smallest controller a controller-runtime user would write for a custom resource with
// no generated types: an unstructured object for the benchmark's GVK, one reconcile worker (the
// default), no metrics server, no health probes, no leader election, a cache limited to one
// namespace, and a Reconcile that reads the object from the cache and counts. It speaks the
// JSON-lines protocol described in bench/README.md on stdout.
package main

import (
	"bufio"
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
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	benchv1alpha1 "modelpool.dev/bench/controller-runtime-peer/api/v1alpha1"
)

var stdout sync.Mutex

// emit prints one protocol line; every line carries the wall-clock time and the resident set.
func emit(event string, fields map[string]any) {
	line := map[string]any{"event": event, "t": now(), "rss_bytes": rssBytes()}
	for k, v := range fields {
		line[k] = v
	}
	data, err := json.Marshal(line)
	if err != nil {
		panic(err)
	}
	stdout.Lock()
	defer stdout.Unlock()
	_, _ = os.Stdout.Write(append(data, '\n'))
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// rssBytes reads VmRSS from /proc/self/status, as the Python peers do.
func rssBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kib * 1024
		}
	}
	return -1
}

// counter is the trivial reconciler's whole state.
type counter struct {
	client client.Reader
	gvk    schema.GroupVersionKind
	typed  bool // typed structs (generated DeepCopy) instead of unstructured
	target int64
	replay int64 // spec.round of the replayed burst; 0 for none
	expect int

	mu       sync.Mutex
	total    int64               // every Reconcile call
	seen     map[string]struct{} // objects reconciled at all (the start-up pass)
	atTarget map[string]struct{} // objects reconciled with spec.round == target
	atReplay map[string]struct{} // objects reconciled with spec.round == replay
	synced   bool
	settled  bool
	done     bool
	replayed bool
	reported int64 // c.total at the last progress line
}

func (c *counter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var round int64
	if c.typed {
		obj := &benchv1alpha1.BenchObject{}
		if err := c.client.Get(ctx, req.NamespacedName, obj); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		round = obj.Spec.Round
	} else {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(c.gvk)
		if err := c.client.Get(ctx, req.NamespacedName, obj); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		round, _, _ = unstructured.NestedInt64(obj.Object, "spec", "round")
	}
	key := req.String()

	c.mu.Lock()
	defer c.mu.Unlock()
	c.total++
	c.seen[key] = struct{}{}
	switch {
	case round == c.target:
		c.atTarget[key] = struct{}{}
	case c.replay != 0 && round == c.replay:
		c.atReplay[key] = struct{}{}
	}
	c.announce()
	return reconcile.Result{}, nil
}

// announce prints settled and done once each, in protocol order; the caller holds c.mu.
func (c *counter) announce() {
	if c.synced && !c.settled && len(c.seen) >= c.expect {
		c.settled = true
		emit("settled", map[string]any{"reconciled": len(c.seen), "reconciles_total": c.total})
	}
	if c.settled && !c.done && len(c.atTarget) >= c.expect {
		c.done = true
		emit("done", map[string]any{"reconciled": len(c.atTarget), "reconciles_total": c.total})
	}
	if c.done && !c.replayed && c.replay != 0 && len(c.atReplay) >= c.expect {
		c.replayed = true
		emit("replayed", map[string]any{"reconciled": len(c.atReplay), "reconciles_total": c.total})
	}
}

func main() {
	namespace := flag.String("namespace", "bench", "namespace of the objects")
	expect := flag.Int("expect", 0, "number of objects")
	target := flag.Int64("target", 0, "spec.round value of the live update burst")
	replay := flag.Int64("replay-target", 0, "spec.round value of the replayed burst (0: none)")
	group := flag.String("group", "", "API group")
	version := flag.String("version", "", "API version")
	plural := flag.String("plural", "", "resource plural (unused: the kind addresses the resource)")
	kind := flag.String("kind", "", "kind")
	typed := flag.Bool("typed", false, "reconcile typed Go structs (generated DeepCopy), not unstructured")
	flag.Parse()
	_ = plural
	if *expect <= 0 || *group == "" || *version == "" || *kind == "" {
		fmt.Fprintln(os.Stderr, "usage: controller-runtime-peer --expect N --group G --version V --kind K [--namespace NS] [--target R]")
		os.Exit(2)
	}
	ctrl.SetLogger(logr.Discard())
	gvk := schema.GroupVersionKind{Group: *group, Version: *version, Kind: *kind}
	if *typed && (gvk.GroupVersion() != benchv1alpha1.GroupVersion || *kind != "BenchObject") {
		fmt.Fprintln(os.Stderr, "controller-runtime-peer: --typed knows only", benchv1alpha1.GroupVersion.WithKind("BenchObject"))
		os.Exit(2)
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fail(err)
	}
	if err := benchv1alpha1.AddToScheme(scheme); err != nil {
		fail(err)
	}
	emit("ready", nil)

	ctx, cancel := context.WithCancel(ctrl.SetupSignalHandler())
	defer cancel()
	go func() { // stdin closing is the other way to say stop
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		cancel()
	}()

	cfg, err := ctrl.GetConfig()
	if err != nil {
		fail(err)
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme: scheme,
		Cache:  cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		// Without this the client reads unstructured objects from the API server, not the cache.
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		fail(err)
	}
	c := &counter{
		client: mgr.GetClient(), gvk: gvk, typed: *typed, target: *target, replay: *replay, expect: *expect,
		seen: map[string]struct{}{}, atTarget: map[string]struct{}{}, atReplay: map[string]struct{}{},
	}
	var forType client.Object = &benchv1alpha1.BenchObject{}
	if !*typed {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		forType = u
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("bench").
		For(forType).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(c)
	if err != nil {
		fail(err)
	}

	go waitForCache(ctx, mgr, c, gvk, *namespace)
	go progress(ctx, c)
	if err := mgr.Start(ctx); err != nil {
		fail(err)
	}
}

// waitForCache announces synced once the informer's store holds every expected object.
func waitForCache(ctx context.Context, mgr manager.Manager, c *counter, gvk schema.GroupVersionKind, namespace string) {
	var list client.ObjectList = &benchv1alpha1.BenchObjectList{}
	if !c.typed {
		u := &unstructured.UnstructuredList{}
		u.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		list = u
	}
	for ctx.Err() == nil {
		err := mgr.GetCache().List(ctx, list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy)
		if n := listLen(list); err == nil && n >= c.expect {
			c.mu.Lock()
			c.synced = true
			emit("synced", map[string]any{"objects": n})
			c.announce()
			c.mu.Unlock()
			// The resident set right after the list still holds garbage the collector has not
			// reclaimed; this second figure is the live cache after a collection (reported
			// beside the first one, never instead of it).
			list = nil
			runtime.GC()
			debug.FreeOSMemory()
			emit("memory", map[string]any{"objects": c.expect, "after_gc": true})
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func listLen(list client.ObjectList) int {
	switch l := list.(type) {
	case *benchv1alpha1.BenchObjectList:
		return len(l.Items)
	case *unstructured.UnstructuredList:
		return len(l.Items)
	}
	return 0
}

func progress(ctx context.Context, c *counter) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.mu.Lock()
			if c.total != c.reported {
				c.reported = c.total
				reconciled := len(c.atTarget)
				if c.done {
					reconciled = len(c.atReplay)
				}
				emit("progress", map[string]any{"reconciles_total": c.total, "reconciled": reconciled})
			}
			c.mu.Unlock()
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "controller-runtime-peer:", err)
	os.Exit(1)
}
