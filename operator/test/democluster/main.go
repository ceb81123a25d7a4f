// Command democluster runs the cluster of `make demo`: the control plane on this host (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, bound to --address) and one real
// node, the test VM with an emulated NVMe SSD and HDD, running kubelet, kube-proxy, containerd
// and runc. hack/demo.sh runs it inside a network namespace of its own that holds --tap, so
// the host's network is never touched.
//
// It writes an admin kubeconfig, prints "ready" once the node is Ready, and stops everything
// on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/e2e/cluster"
	"github.com/flashcache/flashcache/operator/test/kubenode"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "democluster:", err)
		os.Exit(1)
	}
}

func run() error {
	// A flag set of our own: controller-runtime registers --kubeconfig on the global one.
	flags := flag.NewFlagSet("democluster", flag.ExitOnError)
	dir := flags.String("dir", "", "folder for logs, certificates, kubeconfigs and the VM's disks (required)")
	kubeconfig := flags.String("kubeconfig", "", "where to write the admin kubeconfig (required)")
	image := flags.String("vm-image", "", "the folder hack/build-vm-image.sh prints (required)")
	images := flags.String("node-images", "", "the folder hack/build-node-images.sh prints (required)")
	address := flags.String("address", "192.168.227.1", "this host's address on --tap; the API server binds to it")
	tap := flags.String("tap", "", "the tap interface that becomes the VM's second card (required)")
	nodeName := flags.String("node-name", "demo-node", "the node's name")
	nodeIP := flags.String("node-ip", "192.168.227.2", "the VM's address on --tap")
	podCIDR := flags.String("pod-cidr", "10.244.0.0/24", "the node's pod subnet; route it to --node-ip")
	pauseImage := flags.String("pause-image", "", "the pod sandbox image (required)")
	memory := flags.Int("memory-mib", 4096, "the VM's memory (four MariaDB servers at the demo's peak)")
	_ = flags.Parse(os.Args[1:])
	for name, v := range map[string]string{"dir": *dir, "kubeconfig": *kubeconfig, "vm-image": *image,
		"node-images": *images, "tap": *tap, "pause-image": *pauseImage} {
		if v == "" {
			return fmt.Errorf("--%s is required", name)
		}
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The node's root, with the images that do not change with the code imported, is made (once)
	// while the control plane starts.
	type prepared struct {
		root string
		err  error
	}
	rootReady := make(chan prepared, 1)
	go func() {
		root, err := kubenode.PreparedRoot(ctx, *image, *images, logf)
		rootReady <- prepared{root, err}
	}()
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(*dir, "cluster"), Address: *address, Logf: logf})
	root := <-rootReady
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			logf("stopping the control plane: %v", err)
		}
	}()
	if err := testenv.WriteAdminKubeconfig(c.Env, *kubeconfig); err != nil {
		return err
	}
	if root.err != nil {
		return root.err
	}

	vm, err := vmharness.Boot(ctx, vmharness.Options{
		Image:     *image,
		WorkDir:   filepath.Join(*dir, "vm"),
		RootBase:  root.root,
		MemoryMiB: *memory,
		Tap:       *tap,
		Shares: []vmharness.Share{
			{Tag: kubenode.BinShare, Path: c.Assets},
			{Tag: kubenode.ImagesShare, Path: *images},
		},
		Disks: []vmharness.Disk{
			{Kind: vmharness.NVMe, Serial: "demo-ssd", Size: 4 << 30},
			// Its write cache is volatile and honours flushes, as a real disk's: the
			// agent's durability check judges it and allows writeback.
			{Kind: vmharness.HDD, Serial: "demo-hdd", Size: 8 << 30, Cache: vmharness.CacheVolatileHonest},
			// A FlashCachePool's disks, for the volumes claims get: one NVMe and one HDD
			// shared by every claim's volume.
			{Kind: vmharness.NVMe, Serial: "demo-pool-ssd", Size: 4 << 30},
			{Kind: vmharness.HDD, Serial: "demo-pool-hdd", Size: 8 << 30, Cache: vmharness.CacheVolatileHonest},
		},
		Logf: logf,
	})
	if err != nil {
		return err
	}
	defer vm.Close()
	if err := os.WriteFile(filepath.Join(*dir, "ssh"), []byte(strings.Join(vm.SSHCommand(), " ")+"\n"), 0o644); err != nil {
		return err
	}

	if _, err := kubenode.Setup(ctx, vm, c, kubenode.Options{
		Name: *nodeName, IP: *nodeIP, PodCIDR: *podCIDR, PauseImage: *pauseImage, Logf: logf,
	}); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	logf("stopping")
	return nil
}
